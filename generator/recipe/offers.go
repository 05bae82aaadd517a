package recipe

import "slices"

// Offer is one combination upstream's site offers for a recipe: a variant on a hardware
// profile under a serving strategy (its JSON API renders one command per Offer).
type Offer struct {
	Variant, Hardware, Strategy string
}

// Offers lists every (variant, hardware, strategy) combination upstream's site renders for a
// recipe, the way its build script enumerates them: each variant; each hardware profile the
// variant may run on (precision, meta.hardware, supported_hardware, and restricted profiles
// only when the recipe declares them); each strategy of the recipe that passes upstream's
// per-hardware gate, can reach its strategy_min_gpus floor, and, on hardware that cannot be
// clustered, runs on one node. vllm-omni recipes offer none (upstream renders them apart).
// Derive either derives each of them or says why not.
func (b *Book) Offers(modelID string) []Offer {
	r, _, ok := b.lookup(modelID)
	if !ok || slices.Contains(r.Meta.Tasks, "omni") {
		return nil
	}
	tax := b.taxonomy
	var out []Offer
	for _, vk := range r.Variants.Keys {
		v := r.Variants.Values[vk]
		for _, hw := range tax.HardwareProfiles.Keys {
			p := tax.HardwareProfiles.Values[hw]
			if hardwareRefusal(r, vk, v, hw, p) != nil {
				continue
			}
			for _, s := range effectiveStrategies(r) {
				st, known := b.strategies[s]
				if !known || !strategyOnHardware(r, s, hw, p) {
					continue
				}
				multi := st.DeployType == DeployMultiNode || st.DeployType == DeployPDCluster
				reach := p.GPUCount
				if multi {
					reach *= MaxNodes
				}
				if r.StrategyMinGPUs.For(s, hw) > reach || (multi && !p.scalable()) {
					continue
				}
				out = append(out, Offer{Variant: vk, Hardware: hw, Strategy: s})
			}
		}
	}
	return out
}

// RecipeStrategies splits a recipe's strategies (compatible_strategies and those
// strategy_hardware grants) into those inferplane renders and those it refuses on any
// hardware: a strategy it does not render (pd_cluster), one the tree has no file for, and
// every strategy of a vllm-omni recipe. Per-hardware gates and memory are Derive's to check.
func (b *Book) RecipeStrategies(modelID string) (rendered, refused []string) {
	r, _, ok := b.lookup(modelID)
	if !ok {
		return nil, nil
	}
	return b.strategiesOf(r)
}

func (b *Book) strategiesOf(r *Recipe) (rendered, refused []string) {
	omni := slices.Contains(r.Meta.Tasks, "omni")
	for _, s := range effectiveStrategies(r) {
		if st, ok := b.strategies[s]; ok && !omni && supported(st) == "" {
			rendered = append(rendered, s)
		} else {
			refused = append(refused, s)
		}
	}
	return rendered, refused
}
