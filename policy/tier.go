package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// CheckTier is the rules on a Tier that the tenant rules read: nodeTypes entries that
// NodeTypeAllowed understands, each once; models entries that ModelOffered understands, each
// once; quota figures of 0 (no limit) or more.
func CheckTier(t *v1alpha1.Tier) field.ErrorList {
	out := checkNodeTypeList(specPath.Child("nodeTypes"), t.Spec.NodeTypes)
	out = append(out, checkModelList(specPath.Child("models"), t.Spec.Models)...)
	return append(out, checkQuotaFigures(specPath.Child("quota"), t.Spec.Quota, "0 (no limit) or more")...)
}

// checkNodeTypeList holds a list of node type names and "<provider>.*" wildcards to what
// NodeTypeAllowed understands, each entry once.
func checkNodeTypeList(path *field.Path, list []string) field.ErrorList {
	var out field.ErrorList
	seen := map[string]bool{}
	for i, a := range list {
		p := path.Index(i)
		if !validAllowedEntry(a) {
			out = append(out, field.Invalid(p, a, "must be a node type name (metal3.gpu-h100) or a provider wildcard (metal3.*)"))
		}
		if seen[a] {
			e := field.Duplicate(p, a)
			e.Detail = "must be listed once"
			out = append(out, e)
		}
		seen[a] = true
	}
	return out
}

// checkModelList holds a model catalogue to what ModelOffered understands: model ids or
// master names, or "<org>/*", each once.
func checkModelList(path *field.Path, list []string) field.ErrorList {
	var out field.ErrorList
	if list != nil && len(list) == 0 {
		return field.ErrorList{field.Invalid(path, list, "must list at least one model, or be left out to offer every model")}
	}
	seen := map[string]bool{}
	for i, m := range list {
		p := path.Index(i)
		org, wild := strings.CutSuffix(m, "/*")
		switch {
		case strings.TrimSpace(m) != m || m == "" || strings.ContainsAny(m, " \t\n"):
			out = append(out, field.Invalid(p, m, "must be a model id (Qwen/Qwen3-32B), a ModelMaster name, or every model of an organisation (Qwen/*)"))
		case wild && (org == "" || strings.ContainsAny(org, "/*")):
			out = append(out, field.Invalid(p, m, "must be <org>/* to offer every recipe model of an organisation (Qwen/*)"))
		case !wild && strings.Contains(m, "*"):
			out = append(out, field.Invalid(p, m, "must name one model, or end in /* to offer every model of an organisation"))
		}
		if key := strings.ToLower(m); seen[key] {
			e := field.Duplicate(p, m)
			e.Detail = "must be listed once"
			out = append(out, e)
		} else {
			seen[key] = true
		}
	}
	return out
}

// checkQuotaFigures holds each figure of a quota to 0 or more.
func checkQuotaFigures(path *field.Path, q *v1alpha1.Quota, zero string) field.ErrorList {
	if q == nil {
		return nil
	}
	var out field.ErrorList
	for _, f := range []struct {
		name string
		v    int32
	}{{"gpus", q.GPUs}, {"jobs", q.Jobs}, {"replicasPerJob", q.ReplicasPerJob}} {
		if f.v < 0 {
			out = append(out, field.Invalid(path.Child(f.name), f.v, "must be "+zero))
		}
	}
	return out
}

// ModelOffered reports whether a model catalogue (a tier's or a tenant's spec.models) offers
// model, a job's spec.model: nil offers every model; an entry is a model id or master name
// (matched without regard to case, as recipe ids are) or "<org>/*", every model id of the
// organisation.
func ModelOffered(models []string, model string) bool {
	if models == nil {
		return true
	}
	for _, m := range models {
		if strings.EqualFold(m, model) {
			return true
		}
		if org, ok := strings.CutSuffix(m, "/*"); ok && len(model) > len(org)+1 && strings.EqualFold(model[:len(org)+1], org+"/") {
			return true
		}
	}
	return false
}

// JobModelOffered reports whether a model catalogue offers what a job runs: the model it
// names (ModelOffered), or, when it runs a master, the model the master serves, so that a
// master the operator pinned from a recipe model of the catalogue (Qwen/*) is offered too.
func JobModelOffered(models []string, model string, master *v1alpha1.ModelMaster) bool {
	return ModelOffered(models, model) || master != nil && master.Spec.Model != "" && ModelOffered(models, master.Spec.Model)
}

// ApplyTier is tenant t with its tier applied: what the rules, the renders and the product API
// read as the tenant (and what the tenant's cluster gets as its policy data). The tenant's own
// allowedNodeTypes and models stay when set, but may only narrow the tier's (each entry one
// the tier allows); unset, they are the tier's. Each quota and limit figure the tenant sets
// replaces the tier's. errs are the tenant's entries that would widen the tier, at their paths
// in the tenant's file; the tenant is still returned, with the tier's lists in their place.
func ApplyTier(t *v1alpha1.Tenant, tier *v1alpha1.Tier) (*v1alpha1.Tenant, field.ErrorList) {
	out := t.DeepCopy()
	s, ts := &out.Spec, &tier.Spec
	var errs field.ErrorList
	// An entry is within the tier's list when the list allows it as a name: a wildcard
	// (metal3.*, Qwen/*) then only under the same or a wider wildcard.
	s.AllowedNodeTypes, errs = narrow(specPath.Child("allowedNodeTypes"), t.Spec.AllowedNodeTypes, ts.NodeTypes, tier.Name, "node type", NodeTypeAllowed)
	var merrs field.ErrorList
	s.Models, merrs = narrow(specPath.Child("models"), t.Spec.Models, ts.Models, tier.Name, "model", ModelOffered)
	s.Quota = mergeQuota(ts.Quota, t.Spec.Quota)
	s.Limits = t.Spec.Limits.Over(ts.Limits)
	return out, append(errs, merrs...)
}

// narrow is a tenant's list within its tier's: the tenant's when set (each entry one within
// the tier's, else an error), the tier's when not.
func narrow(path *field.Path, own, tier []string, tierName, what string, within func(list []string, entry string) bool) ([]string, field.ErrorList) {
	if own == nil {
		if tier == nil {
			return nil, nil
		}
		return append([]string{}, tier...), nil
	}
	var errs field.ErrorList
	for i, e := range own {
		if !within(tier, e) {
			errs = append(errs, field.Invalid(path.Index(i), e, fmt.Sprintf(
				"must be within Tier %s's %ss (%s): a tenant's list may narrow its tier's, never widen it", tierName, what, describeList(tier))))
		}
	}
	if len(errs) > 0 {
		return append([]string{}, tier...), errs
	}
	return append([]string{}, own...), nil
}

// describeList renders a tier's list for a message.
func describeList(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// mergeQuota is the tier's quota with each figure the tenant sets in its place (nil when no
// figure is set at all).
func mergeQuota(tier, own *v1alpha1.Quota) *v1alpha1.Quota {
	var q v1alpha1.Quota
	if tier != nil {
		q = *tier
	}
	if own != nil {
		q.GPUs = pick(own.GPUs, q.GPUs)
		q.Jobs = pick(own.Jobs, q.Jobs)
		q.ReplicasPerJob = pick(own.ReplicasPerJob, q.ReplicasPerJob)
	}
	if q == (v1alpha1.Quota{}) {
		return nil
	}
	return &q
}

func pick(own, tier int32) int32 {
	if own > 0 {
		return own
	}
	return tier
}
