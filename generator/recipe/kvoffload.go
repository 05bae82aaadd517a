package recipe

import (
	"fmt"
	"maps"
	"slices"
)

// pickKVOffload resolves the request's KV offload option: one of the taxonomy's kv_offload
// options, under upstream's three gates (the strategy: never under pd_cluster, and only the
// option's own strategies when it lists them; the recipe: not marked unsupported, and marked
// verified when the option requires opt-in; the hardware brand). The Mooncake KV stores
// (kv_store/) and options with a companion process are refused: they need processes beside
// the model server that inferplane does not render.
func (b *Book) pickKVOffload(d *derivation, name string) error {
	if name == "" {
		return nil
	}
	r, tax := d.recipe, b.taxonomy
	if _, ok := b.kvStores[name]; ok {
		return newError(ReasonUnsupportedKVOffload, "kvOffload",
			"KV offload %s is a Mooncake KV-store deployment: it needs a mooncake_master, a shared Mooncake config file and, past one instance, a vllm-router in front, which inferplane does not render; the options inferplane renders here: %s",
			name, list(b.kvOffloads(d)))
	}
	opt, ok := tax.KVOffload.Get(name)
	if !ok {
		known := append(slices.Clone(tax.KVOffload.Keys), slices.Sorted(maps.Keys(b.kvStores))...)
		return newError(ReasonUnknownKVOffload, "kvOffload", "unknown KV offload option %q; taxonomy.yaml offers %s%s", name, list(known), didYouMean(name, known))
	}
	if why := kvOffloadRefusal(r, name, &opt, d.strategy.Name, d.profile); why != "" {
		return newError(ReasonUnsupportedKVOffload, "kvOffload", "KV offload %s %s; the options inferplane renders here: %s", name, why, list(b.kvOffloads(d)))
	}
	if opt.Companion != nil && opt.Companion.Command != "" {
		return newError(ReasonUnsupportedKVOffload, "kvOffload",
			"KV offload %s needs its companion process %q running beside vllm serve on the node (%s), which inferplane does not render; the options inferplane renders here: %s",
			name, companionName(opt.Companion, name), opt.Install, list(b.kvOffloads(d)))
	}
	d.kvName, d.kv = name, &opt
	return nil
}

// kvOffloadRefusal says why upstream's gates leave an option out, or "".
func kvOffloadRefusal(r *Recipe, name string, opt *KVOffloadOption, strategy string, p HardwareProfile) string {
	support := r.KVOffloadSupport[name]
	switch {
	case len(opt.Strategies) > 0 && !slices.Contains(opt.Strategies, strategy):
		return fmt.Sprintf("runs only under strategy %s, not %s", list(opt.Strategies), strategy)
	case support == "unsupported":
		return fmt.Sprintf("is marked unsupported by recipe %s (kv_offload_support)", r.ID)
	case opt.RequiresOptIn && support != "verified":
		return fmt.Sprintf("is offered only for recipes that mark it verified (kv_offload_support), and recipe %s does not", r.ID)
	case len(opt.Brands) > 0 && !slices.Contains(opt.Brands, p.Brand):
		return fmt.Sprintf("runs only on %s hardware, not %s", list(opt.Brands), p.Brand)
	}
	return ""
}

// kvOffloads are the taxonomy's options inferplane renders for the derivation's recipe,
// strategy and hardware.
func (b *Book) kvOffloads(d *derivation) []string {
	var out []string
	for _, k := range b.taxonomy.KVOffload.Keys {
		opt := b.taxonomy.KVOffload.Values[k]
		if (opt.Companion == nil || opt.Companion.Command == "") && kvOffloadRefusal(d.recipe, k, &opt, d.strategy.Name, d.profile) == "" {
			out = append(out, k)
		}
	}
	return out
}
