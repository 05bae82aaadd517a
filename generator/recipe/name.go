package recipe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
)

// maxNameLen keeps master names usable as label values (the inferplane.io/model-master label).
const maxNameLen = 63

// masterName names a derived master. The rule:
//
//	<recipe>[-<variant>]-<profile>[-<hash>]
//
// <recipe> is the recipe id's repo part, lowercased (the org is prefixed, "org-repo", only when
// two recipes of the tree share a repo name); -<variant> is left out for the variant called
// "default"; <profile> is the hardware profile. Every character outside [a-z0-9.-] becomes "-".
//
// That base names the master the recipe gives by default for that model, variant and profile
// (no strategy, feature or node count asked for, the taxonomy's GPUs per node and memory).
// When the request yields any other spec (features toggled, another strategy or node count, a
// node type whose GPUs change the layout), -<hash> is added: the first 8 hex digits of the
// SHA-256 of the spec. So two jobs asking for the same thing get the same spec and share one
// master, and asks that differ in what the server runs never collide. A request whose node
// type changes nothing (8 x 80 GB on h100) keeps the plain name.
//
// Names longer than 63 characters are cut to 54 and given the hash, so they stay valid
// DNS-1123 subdomains and label values.
func (b *Book) masterName(d *derivation) string {
	base := b.slugs[d.recipe.ID]
	if d.variantKey != "default" {
		base += "-" + d.variantKey
	}
	base = sanitize(base + "-" + d.profileID)

	spec := d.master().Spec
	def, err := b.derive(Request{ModelID: d.recipe.ID, Variant: d.variantKey, Hardware: Hardware{Profile: d.profileID}})
	differs := err != nil || !reflect.DeepEqual(def.master().Spec, spec)
	if !differs && len(base) <= maxNameLen {
		return base
	}
	h := specHash(spec)
	if len(base) > maxNameLen-9 {
		base = strings.TrimRight(base[:maxNameLen-9], "-.")
	}
	return base + "-" + h
}

func specHash(spec any) string {
	// json.Marshal of a struct is deterministic (fields in declaration order, no maps here).
	data, _ := json.Marshal(spec)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:8]
}

// sanitize lowercases s and turns it into a DNS-1123 subdomain: runs of characters outside
// [a-z0-9.-] become one "-", and no label starts or ends with "-" or is empty.
func sanitize(s string) string {
	var out strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.':
			out.WriteRune(c)
			dash = false
		default:
			if !dash {
				out.WriteByte('-')
				dash = true
			}
		}
	}
	labels := strings.Split(out.String(), ".")
	kept := labels[:0]
	for _, l := range labels {
		l = strings.Trim(l, "-")
		if l != "" {
			kept = append(kept, l)
		}
	}
	name := strings.Join(kept, ".")
	if name == "" {
		name = "model"
	}
	return name
}
