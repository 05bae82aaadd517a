package recipe

import (
	"maps"
	"slices"
)

// exclusive pairs features that upstream's builder never has on together: turning one on
// turns the other off (a text-only server loads no vision encoder to run in data parallel).
var exclusive = map[string]string{"text_only": "encoder_parallel", "encoder_parallel": "text_only"}

// pickFeatures decides which features are on and in what order, as upstream's builder does:
// its defaults first, in the recipe's order (every feature but those in opt_in_features or
// hardware_opt_in_features for this profile; a variant's default_modes force theirs on),
// minus those the request turns off; then the ones the request turns on, in the recipe's
// order (the builder appends a feature when it is switched on). Naming a mode turns its
// feature on. Turning on text_only turns encoder_parallel off and the other way round.
func (d *derivation) pickFeatures(toggles map[string]bool, modes map[string]string) error {
	if err := d.checkFeatureNames(toggles, modes); err != nil {
		return err
	}
	r := d.recipe
	d.asked = map[string]bool{}
	for name := range toggles {
		d.asked[name] = true
	}
	for name := range modes {
		d.asked[name] = true
	}
	defaults := d.defaultFeatures()
	for _, name := range defaults {
		if on, ok := toggles[name]; !ok || on {
			d.features = append(d.features, name)
		}
	}
	for _, name := range r.Features.Keys {
		if slices.Contains(defaults, name) || !(toggles[name] || modes[name] != "") {
			continue
		}
		if other, ok := exclusive[name]; ok && slices.Contains(d.features, other) {
			if toggles[other] || modes[other] != "" {
				return newError(ReasonUnknownFeature, "features", "features %s and %s of recipe %s exclude each other: turn one of them off", name, other, r.ID)
			}
			d.features = slices.DeleteFunc(d.features, func(f string) bool { return f == other })
		}
		d.features = append(d.features, name)
	}
	d.modes = map[string]string{}
	for _, name := range d.features {
		if f := r.Features.Values[name]; f.Modes.Len() > 0 {
			if k := d.modeKey(name, f, modes[name]); k != "" {
				d.modes[name] = k
			}
		}
	}
	return nil
}

// defaultFeatures are the features on by default, in the recipe's order.
func (d *derivation) defaultFeatures() []string {
	r := d.recipe
	optIn := map[string]bool{}
	for _, f := range r.OptInFeatures {
		optIn[f] = true
	}
	for _, f := range r.HardwareOptInFeatures[d.profileID] {
		optIn[f] = true
	}
	var out []string
	for _, name := range r.Features.Keys {
		if _, forced := d.variant.DefaultModes[name]; forced || !optIn[name] {
			out = append(out, name)
		}
	}
	return out
}

// checkFeatureNames checks the request's feature and mode names against the recipe.
func (d *derivation) checkFeatureNames(toggles map[string]bool, modes map[string]string) error {
	r := d.recipe
	for _, name := range slices.Sorted(maps.Keys(toggles)) {
		if _, ok := r.Features.Get(name); !ok {
			return d.unknownFeature(name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(modes)) {
		f, ok := r.Features.Get(name)
		switch {
		case !ok:
			return d.unknownFeature(name)
		case f.Modes.Len() == 0:
			return newError(ReasonUnknownFeature, "featureModes", "feature %s of recipe %s has no modes: it is only turned on or off (features: {%s: true})", name, r.ID, name)
		case toggles[name] == false && hasKey(toggles, name):
			return newError(ReasonUnknownFeature, "featureModes", "feature %s of recipe %s is turned off, but its mode %q was asked for", name, r.ID, modes[name])
		}
		mode := modes[name]
		if _, ok := f.Modes.Get(mode); !ok {
			return newError(ReasonUnknownFeature, "featureModes", "feature %s of recipe %s has no mode %q; its modes: %s%s", name, r.ID, mode, list(f.Modes.Keys), didYouMean(mode, f.Modes.Keys))
		}
		if allowed := d.allowedModes(f); !slices.Contains(allowed, mode) {
			return newError(ReasonUnknownFeature, "featureModes", "mode %q of feature %s of recipe %s does not run with variant %q on %s; modes that do: %s",
				mode, name, r.ID, d.variantKey, d.profileID, list(allowed))
		}
	}
	return nil
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

func (d *derivation) unknownFeature(name string) error {
	r := d.recipe
	if r.Features.Len() == 0 {
		return newError(ReasonUnknownFeature, "features", "unknown feature %q: recipe %s has no features", name, r.ID)
	}
	return newError(ReasonUnknownFeature, "features", "unknown feature %q; recipe %s has %s%s", name, r.ID, d.describeFeatures(), didYouMean(name, r.Features.Keys))
}

func (d *derivation) describeFeatures() string {
	r := d.recipe
	var on, opt []string
	optIn := map[string]bool{}
	for _, f := range r.OptInFeatures {
		optIn[f] = true
	}
	for _, f := range r.Features.Keys {
		if optIn[f] {
			opt = append(opt, f)
		} else {
			on = append(on, f)
		}
	}
	s := list(on) + " (on by default)"
	if len(opt) > 0 {
		s += " and " + list(opt) + " (opt-in)"
	}
	return s
}

// allowedModes are a pick-one feature's modes that exist for this variant and run on this
// hardware, in the recipe's order.
func (d *derivation) allowedModes(f Feature) []string {
	var allowed []string
	gen := string(d.profile.Generation)
	for _, k := range f.Modes.Keys {
		m := f.Modes.Values[k]
		if len(m.Variants) > 0 && !slices.Contains(m.Variants, d.variantKey) {
			continue
		}
		if (gen != "" && m.Hardware[gen] == "unsupported") || m.Hardware[d.profileID] == "unsupported" {
			continue
		}
		allowed = append(allowed, k)
	}
	return allowed
}

// modeKey is the mode a pick-one feature runs with: among the allowed modes, the one asked
// for, else the variant's default_modes choice, else the feature's default_mode, else the
// first. "" when no mode is allowed here.
func (d *derivation) modeKey(name string, f Feature, asked string) string {
	allowed := d.allowedModes(f)
	for _, c := range []string{asked, d.variant.DefaultModes[name], f.DefaultMode} {
		if c != "" && slices.Contains(allowed, c) {
			return c
		}
	}
	if len(allowed) == 0 {
		return ""
	}
	return allowed[0]
}

// dropStrategyFeatures turns off, silently, features the recipe restricts to other strategies
// (upstream skips them the same way); one the request names must apply.
func (d *derivation) dropStrategyFeatures() error {
	var err error
	d.features = slices.DeleteFunc(d.features, func(name string) bool {
		f := d.recipe.Features.Values[name]
		if len(f.Strategies) == 0 || slices.Contains(f.Strategies, d.strategy.Name) {
			return false
		}
		if d.asked[name] && err == nil {
			err = newError(ReasonUnknownFeature, "features", "feature %q of recipe %s applies only under strategy %s, not %s",
				name, d.recipe.ID, list(f.Strategies), d.strategy.Name)
		}
		delete(d.modes, name)
		return true
	})
	if err != nil {
		return err
	}
	for _, name := range d.features {
		if c := d.recipe.Features.Values[name].Companion; c != nil && c.Command != "" {
			return newError(ReasonUnsupportedFeature, "features", "feature %s of recipe %s needs its companion process %q running beside vllm serve on the node, which inferplane does not render; turn it off (features: {%s: false})",
				name, d.recipe.ID, companionName(c, name), name)
		}
	}
	return nil
}

func companionName(c *Companion, fallback string) string {
	if c.Label != "" {
		return c.Label
	}
	return fallback
}
