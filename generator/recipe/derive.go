package recipe

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// The derivation follows the upstream command builder (vllm-project/recipes,
// src/lib/command-synthesis.js, resolveCommand and friends), rewritten for one question: the
// serving arguments of one replica of one model on one class of node. docs/recipes.md states
// the rules with examples.

// MaxNodes is the most nodes one replica may span (the upstream builder's limit).
const MaxNodes = 16

// Upstream strategy names the automatic choice prefers.
const (
	StrategySingleNodeTP = "single_node_tp"
	StrategyMultiNodeTP  = "multi_node_tp"
	StrategyMultiNodeDEP = "multi_node_dep"
	StrategyMultiNodeTEP = "multi_node_tep"
)

const (
	flagTP = "--tensor-parallel-size"
	flagPP = "--pipeline-parallel-size"
)

// derivation is everything Derive decided, before it becomes a master.
type derivation struct {
	recipe      *Recipe
	variantKey  string
	variant     Variant
	profileID   string
	profile     HardwareProfile
	gpusPerNode int64
	gpuMemGB    float64
	strategy    *Strategy
	nodes       int64
	tp, pp      int64
	perReplica  int64
	features    []string // on, in the recipe's order
	args        []string
	env         []v1alpha1.EnvVar
	image       string
}

func typeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelMaster}
}

func (b *Book) derive(req Request) (*derivation, error) {
	r, impliedVariant, ok := b.lookup(req.ModelID)
	if !ok {
		if strings.TrimSpace(req.ModelID) == "" {
			return nil, newError(ErrUnknownModel, "model", "no model given: name a recipe's model id (e.g. %s)", b.exampleID())
		}
		msg := fmt.Sprintf("unknown model %q: the recipes tree has no models/%s.yaml", req.ModelID, req.ModelID)
		if s := suggest(req.ModelID, b.Models()); len(s) > 0 {
			msg += "; did you mean " + list(s) + "?"
		} else {
			msg += fmt.Sprintf(" and no recipe with a close id (%d recipes)", len(b.recipes))
		}
		return nil, newError(ErrUnknownModel, "model", "%s", msg)
	}
	d := &derivation{recipe: r}

	if err := d.pickVariant(req.Variant, impliedVariant, req.ModelID); err != nil {
		return nil, err
	}
	if slices.Contains(r.Meta.Tasks, "omni") {
		return nil, newError(ErrUnsupportedRecipe, "model",
			"recipe %s is a vllm-omni recipe (meta.tasks lists omni): inferplane derives masters for `vllm serve` models only", r.ID)
	}
	if err := b.pickHardware(d, req.Hardware); err != nil {
		return nil, err
	}
	if err := d.pickFeatures(req.Features); err != nil {
		return nil, err
	}
	if err := b.pickLayout(d, req.Strategy, int64(req.Nodes)); err != nil {
		return nil, err
	}
	d.dropStrategyFeatures(req.Features)
	if err := d.checkForcedFeatures(req.Features); err != nil {
		return nil, err
	}
	d.args = d.buildArgs()
	d.env = d.buildEnv()
	d.image = d.buildImage()
	return d, nil
}

func (b *Book) exampleID() string {
	if ids := b.Models(); len(ids) > 0 {
		return ids[0]
	}
	return "Qwen/Qwen3-32B"
}

// pickVariant: the asked variant, else the one a checkpoint id implies, else "default", else
// the recipe's first.
func (d *derivation) pickVariant(asked, implied, modelID string) error {
	r := d.recipe
	key := asked
	switch {
	case key == "" && implied != "":
		key = implied
	case key != "" && implied != "" && key != implied:
		return newError(ErrUnknownVariant, "variant",
			"model %s is the checkpoint of variant %q of recipe %s, but variant %q was asked for", modelID, implied, r.ID, asked)
	case key == "":
		key = "default"
		if _, ok := r.Variants.Get(key); !ok {
			key = r.Variants.Keys[0]
		}
	}
	v, ok := r.Variants.Get(key)
	if !ok {
		return newError(ErrUnknownVariant, "variant", "recipe %s has no variant %q; its variants: %s", r.ID, key, list(r.Variants.Keys))
	}
	d.variantKey, d.variant = key, v
	return nil
}

func (b *Book) pickHardware(d *derivation, hw Hardware) error {
	r, tax := d.recipe, b.taxonomy
	if hw.Profile == "" {
		return newError(ErrUnknownHardware, "hardware", "no hardware profile given: the node type must name one of the taxonomy's (%s)", list(tax.HardwareProfiles.Keys))
	}
	p, ok := tax.HardwareProfiles.Get(hw.Profile)
	if !ok {
		return newError(ErrUnknownHardware, "hardware", "unknown hardware profile %q; taxonomy.yaml defines %s", hw.Profile, list(tax.HardwareProfiles.Keys))
	}
	if hw.GPUsPerNode < 0 || hw.GPUsPerNode > maxGPUsPerNode || hw.GPUMemoryGB < 0 {
		return newError(ErrUnknownHardware, "hardware", "GPUs per node must be 0 (the taxonomy's) to %d and GPU memory not negative; got %d GPUs of %d GB",
			maxGPUsPerNode, hw.GPUsPerNode, hw.GPUMemoryGB)
	}
	d.profileID, d.profile = hw.Profile, p
	d.gpusPerNode = p.GPUCount
	if hw.GPUsPerNode > 0 {
		d.gpusPerNode = int64(hw.GPUsPerNode)
	}
	d.gpuMemGB = p.perGPU()
	if hw.GPUMemoryGB > 0 {
		d.gpuMemGB = float64(hw.GPUMemoryGB)
	}

	if r.Meta.Hardware[hw.Profile] == "unsupported" {
		return newError(ErrUnsupportedHardware, "hardware", "recipe %s marks hardware %s unsupported (meta.hardware)", r.ID, hw.Profile)
	}
	if s := d.variant.SupportedHardware; len(s) > 0 && !slices.Contains(s, hw.Profile) {
		return newError(ErrUnsupportedHardware, "hardware", "variant %q of recipe %s runs only on %s, not on %s", d.variantKey, r.ID, list(s), hw.Profile)
	}
	if c := precisionConstraint(d.variant); c != nil {
		if (c.Brand != "" && c.Brand != p.Brand) || (c.Generation != "" && c.Generation != string(p.Generation)) {
			return newError(ErrUnsupportedHardware, "hardware", "variant %q of recipe %s (precision %s) needs %s GPUs; hardware %s is %s %s",
				d.variantKey, r.ID, d.variant.Precision, strings.TrimSpace(c.Brand+" "+c.Generation), hw.Profile, p.Brand, p.Generation)
		}
	}
	return nil
}

// precisionConstraint: NVFP4 and FP4 need NVIDIA Blackwell unless the variant says otherwise.
func precisionConstraint(v Variant) *Constraint {
	if v.PrecisionHardware != nil {
		return v.PrecisionHardware
	}
	switch v.Precision {
	case "nvfp4", "fp4":
		return &Constraint{Brand: "NVIDIA", Generation: "blackwell"}
	}
	return nil
}

// pickFeatures: every feature is on unless the recipe lists it in opt_in_features (or
// hardware_opt_in_features for this profile); a variant's default_modes force theirs on; the
// request toggles any of them.
func (d *derivation) pickFeatures(toggles map[string]bool) error {
	r := d.recipe
	for _, name := range slices.Sorted(maps.Keys(toggles)) {
		if _, ok := r.Features.Get(name); !ok {
			if r.Features.Len() == 0 {
				return newError(ErrUnknownFeature, "features", "unknown feature %q: recipe %s has no features", name, r.ID)
			}
			return newError(ErrUnknownFeature, "features", "unknown feature %q; recipe %s has %s", name, r.ID, d.describeFeatures())
		}
	}
	optIn := map[string]bool{}
	for _, f := range r.OptInFeatures {
		optIn[f] = true
	}
	for _, f := range r.HardwareOptInFeatures[d.profileID] {
		optIn[f] = true
	}
	for _, name := range r.Features.Keys {
		on := !optIn[name]
		if _, forced := d.variant.DefaultModes[name]; forced {
			on = true
		}
		if t, ok := toggles[name]; ok {
			on = t
		}
		if on {
			d.features = append(d.features, name)
		}
	}
	return nil
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

// dropStrategyFeatures turns off, silently, default-on features the recipe restricts to other
// strategies (upstream skips them the same way).
func (d *derivation) dropStrategyFeatures(toggles map[string]bool) {
	d.features = slices.DeleteFunc(d.features, func(name string) bool {
		f := d.recipe.Features.Values[name]
		_, asked := toggles[name]
		return !asked && len(f.Strategies) > 0 && !slices.Contains(f.Strategies, d.strategy.Name)
	})
}

// checkForcedFeatures: a feature asked for by name must apply under the chosen strategy.
func (d *derivation) checkForcedFeatures(toggles map[string]bool) error {
	for _, name := range slices.Sorted(maps.Keys(toggles)) {
		f := d.recipe.Features.Values[name]
		if toggles[name] && len(f.Strategies) > 0 && !slices.Contains(f.Strategies, d.strategy.Name) {
			return newError(ErrUnknownFeature, "features", "feature %q of recipe %s applies only under strategy %s, not %s",
				name, d.recipe.ID, list(f.Strategies), d.strategy.Name)
		}
	}
	return nil
}

// listedStrategies is compatible_strategies; a recipe that lists none gets single_node_tp,
// which upstream's builder falls back to.
func (d *derivation) listedStrategies() []string {
	if len(d.recipe.CompatibleStrategies) == 0 {
		return []string{StrategySingleNodeTP}
	}
	return d.recipe.CompatibleStrategies
}

// compatibleStrategies is compatible_strategies plus strategies strategy_hardware grants
// somewhere, minus those strategy_hardware marks unsupported on this hardware.
func (d *derivation) compatibleStrategies() []string {
	r := d.recipe
	all := slices.Clone(d.listedStrategies())
	for _, s := range slices.Sorted(maps.Keys(r.StrategyHardware)) {
		if slices.Contains(all, s) {
			continue
		}
		for _, v := range r.StrategyHardware[s] {
			if v == "supported" {
				all = append(all, s)
				break
			}
		}
	}
	return slices.DeleteFunc(all, func(s string) bool { return !d.strategyOnHardware(s) })
}

func (d *derivation) strategyOnHardware(s string) bool {
	if gate, ok := d.recipe.StrategyHardware[s]; ok {
		for _, k := range hardwareKeys(d.profileID, d.profile, true) {
			if v, ok := gate[k]; ok {
				return v != "unsupported"
			}
		}
	}
	return slices.Contains(d.listedStrategies(), s)
}

// supported says why inferplane cannot run a strategy, or "" when it can. The renderer
// launches a multi-node replica with vLLM's --nnodes/--node-rank/--master-addr launcher, which
// serves TP (and TP within a node, PP across nodes); data-parallel and disaggregated layouts
// launch differently.
func supported(s *Strategy) string {
	switch s.DeployType {
	case DeploySingleNode:
		return ""
	case DeployMultiNode:
		if s.Parallelism != "" && s.Parallelism != "tp_pp" {
			return fmt.Sprintf("its parallelism %q is launched per node differently from the --nnodes/--node-rank launcher inferplane renders", s.Parallelism)
		}
		if f := s.ParallelFlag; f != "" && f != flagTP {
			return fmt.Sprintf("its parallel flag %s is launched per node differently from the --nnodes/--node-rank launcher inferplane renders", f)
		}
		return ""
	case DeployPDCluster:
		return "disaggregated prefill/decode clusters are not rendered by inferplane"
	case DeployKVStoreLB:
		return "KV-store load-balanced deployments are not rendered by inferplane"
	}
	return fmt.Sprintf("deploy_type %q is not one inferplane knows", s.DeployType)
}

// pickLayout chooses the strategy and the nodes per replica, then the parallel sizes.
func (b *Book) pickLayout(d *derivation, asked string, nodes int64) error {
	r := d.recipe
	if nodes < 0 {
		return newError(ErrDoesNotFit, "nodes", "nodes per replica must not be negative (got %d)", nodes)
	}
	if nodes > MaxNodes {
		return newError(ErrDoesNotFit, "nodes", "%d nodes per replica is more than the %d a replica may span", nodes, MaxNodes)
	}
	nodeVRAM := d.gpuMemGB * float64(d.gpusPerNode)
	need := d.variant.VRAMMinimumGB
	minNodes := int64(1)
	if need > 0 && nodeVRAM > 0 && need > nodeVRAM {
		minNodes = MaxNodes + 1 // also when the ratio is too large for an int
		if ratio := need / nodeVRAM; ratio <= MaxNodes {
			minNodes = ceilDiv(need, nodeVRAM)
		}
	}
	compatible := d.compatibleStrategies()
	available := slices.DeleteFunc(slices.Clone(compatible), func(s string) bool { _, ok := b.strategies[s]; return !ok })
	fitMsg := func() string {
		return fmt.Sprintf("variant %q of %s needs %g GB; one %s node has %d GPUs x %g GB = %g GB",
			d.variantKey, r.ID, need, d.profileID, d.gpusPerNode, d.gpuMemGB, nodeVRAM)
	}
	if minNodes > MaxNodes {
		return newError(ErrDoesNotFit, "nodes", "does not fit: %s, so it would span %s nodes, more than the %d a replica may",
			fitMsg(), strconv.FormatFloat(math.Ceil(need/nodeVRAM), 'f', -1, 64), MaxNodes)
	}
	if nodes > 0 && nodes < minNodes {
		return newError(ErrDoesNotFit, "nodes", "does not fit %d node(s): %s, so a replica needs at least %d nodes", nodes, fitMsg(), minNodes)
	}

	var s *Strategy
	if asked != "" {
		st, err := b.askedStrategy(d, asked, compatible, available)
		if err != nil {
			return err
		}
		s = st
		switch {
		case s.DeployType == DeploySingleNode && nodes > 1:
			return newError(ErrIncompatibleStrategy, "strategy", "strategy %s runs on one node, but %d nodes per replica were asked for", s.Name, nodes)
		case s.DeployType == DeploySingleNode && minNodes > 1:
			return newError(ErrDoesNotFit, "strategy", "does not fit one node with strategy %s: %s; a multi-node strategy is needed (%s available)",
				s.Name, fitMsg(), list(multiNode(b, available)))
		case s.DeployType == DeployMultiNode && nodes == 1:
			return newError(ErrIncompatibleStrategy, "strategy", "strategy %s spans two or more nodes, but 1 node per replica was asked for", s.Name)
		}
		if nodes == 0 {
			nodes = 1
			if s.DeployType == DeployMultiNode {
				nodes = max(2, minNodes)
			}
		}
	} else {
		if nodes == 0 {
			nodes = minNodes
		}
		s = b.recommend(d, available, nodes)
		if s == nil {
			if nodes > 1 {
				why := "does not fit one node"
				if minNodes == 1 {
					why = fmt.Sprintf("%d nodes per replica were asked for", nodes)
				} else {
					why = "does not fit: " + fitMsg()
				}
				return newError(ErrDoesNotFit, "strategy", "%s, and recipe %s has no multi-node strategy inferplane can use in this recipes tree (compatible: %s; with a strategies/ file: %s)",
					why, r.ID, list(compatible), list(available))
			}
			return newError(ErrStrategyUnavailable, "strategy", "recipe %s has no single-node strategy inferplane can use in this recipes tree (compatible: %s; with a strategies/ file: %s)",
				r.ID, list(compatible), list(available))
		}
	}
	if nodes > 1 && !d.profile.scalable() {
		return newError(ErrDoesNotFit, "nodes", "does not fit: %s, and %s nodes cannot be joined into one deployment (taxonomy: scalable: false)", fitMsg(), d.profileID)
	}
	d.strategy, d.nodes = s, nodes
	d.sizes()
	return nil
}

func multiNode(b *Book, names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		s := b.strategies[n]
		return s.DeployType != DeployMultiNode || supported(s) != ""
	})
}

func (b *Book) askedStrategy(d *derivation, asked string, compatible, available []string) (*Strategy, error) {
	r := d.recipe
	if !b.knownStrategies()[asked] {
		return nil, newError(ErrUnknownStrategy, "strategy", "unknown strategy %q; recipe %s is compatible with %s", asked, r.ID, list(compatible))
	}
	if !slices.Contains(compatible, asked) {
		return nil, newError(ErrIncompatibleStrategy, "strategy", "strategy %s is not compatible with recipe %s on %s; compatible: %s (with a strategies/ file: %s)",
			asked, r.ID, d.profileID, list(compatible), list(available))
	}
	s, ok := b.strategies[asked]
	if !ok {
		return nil, newError(ErrStrategyUnavailable, "strategy", "strategy %s is not available in this recipes tree (no %s/%s.yaml); available for recipe %s: %s",
			asked, StrategiesDir, asked, r.ID, list(available))
	}
	if why := supported(s); why != "" {
		return nil, newError(ErrUnsupportedStrategy, "strategy", "strategy %s is not supported by inferplane: %s", asked, why)
	}
	return s, nil
}

// recommend is upstream's recommendStrategy, restricted to strategies this tree has a file
// for, inferplane can run, and whose deploy type matches the node count: the recipe's
// default_strategy (its multi-node sibling on more than one node), else multi_node_tp,
// multi_node_dep, multi_node_tep on more than one node, else single_node_tp, else the first
// compatible one.
func (b *Book) recommend(d *derivation, available []string, nodes int64) *Strategy {
	var prefs []string
	if def := d.recipe.DefaultStrategy; def != "" {
		if nodes > 1 && strings.HasPrefix(def, "single_node_") {
			prefs = append(prefs, "multi_node_"+strings.TrimPrefix(def, "single_node_"))
		} else {
			prefs = append(prefs, def)
		}
	}
	if nodes > 1 {
		prefs = append(prefs, StrategyMultiNodeTP, StrategyMultiNodeDEP, StrategyMultiNodeTEP)
	}
	prefs = append(prefs, StrategySingleNodeTP)
	prefs = append(prefs, available...)
	want := DeploySingleNode
	if nodes > 1 {
		want = DeployMultiNode
	}
	for _, name := range prefs {
		if !slices.Contains(available, name) {
			continue
		}
		s := b.strategies[name]
		if s.DeployType == want && supported(s) == "" {
			return s
		}
	}
	return nil
}

// sizes sets the parallel sizes and the GPUs one replica claims.
//
// Single node: single_node_tp takes the variant's tp, else the recipe's
// strategy_overrides.single_node_tp.tp (both capped at the node's GPUs), else 1 when the
// variant's vram_minimum_gb fits one GPU, else every GPU of the node (never a size in between
// by itself). Other single-node strategies (TEP, DEP) take every GPU. Multi-node TP spans
// every GPU of every node; multi-node TP+PP is TP over one node's GPUs and PP over the nodes.
func (d *derivation) sizes() {
	s, g := d.strategy, d.gpusPerNode
	d.tp, d.pp = 1, 1
	if s.DeployType == DeployMultiNode {
		d.perReplica = g * d.nodes
		if s.Parallelism == "tp_pp" {
			d.tp, d.pp = g, d.nodes
		} else {
			d.tp = g * d.nodes
		}
		return
	}
	size := g
	if s.Name == StrategySingleNodeTP {
		size = d.singleNodeTP()
	}
	d.perReplica = size
	switch s.ParallelFlag {
	case "", flagTP:
		d.tp = size
	case flagPP:
		d.pp = size
	}
}

func (d *derivation) singleNodeTP() int64 {
	g := d.gpusPerNode
	if tp, ok := d.variant.TP.For(d.profileID, d.profile); ok && tp > 0 {
		return min(tp, g)
	}
	if so, ok := d.recipe.StrategyOverrides[StrategySingleNodeTP]; ok {
		if tp, ok := so.TP.For(d.profileID, d.profile); ok && tp > 0 {
			return min(tp, g)
		}
	}
	need := d.variant.VRAMMinimumGB
	if need <= 0 || d.gpuMemGB <= 0 {
		return g
	}
	if need <= d.gpuMemGB {
		return 1
	}
	return g
}

// parallelArgs are the parallel-size flags; the multi-node launcher flags (--nnodes,
// --node-rank, --master-addr, --headless) are the renderer's, per node.
func (d *derivation) parallelArgs() []string {
	s := d.strategy
	if s.DeployType == DeployMultiNode {
		if s.Parallelism == "tp_pp" {
			return []string{flagTP, itoa(d.tp), flagPP, itoa(d.pp)}
		}
		return []string{flagTP, itoa(d.tp)}
	}
	flag := s.ParallelFlag
	if flag == "" {
		flag = flagTP
	}
	return []string{flag, itoa(d.perReplica)}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// byGeneration looks a hardware_overrides map up by generation, else by brand (upstream
// falls back to an `nvidia:` block on every NVIDIA GPU).
func byGeneration[V any](m map[string]V, p HardwareProfile) (V, bool) {
	if v, ok := m[string(p.Generation)]; ok && p.Generation != "" {
		return v, true
	}
	if v, ok := m[strings.ToLower(p.Brand)]; ok && p.Brand != "" {
		return v, true
	}
	var zero V
	return zero, false
}

// buildArgs puts the arguments together in upstream's order and applies the last-wins dedupe:
//  1. model.base_args
//  2. the variant's extra_args, then its hardware_overrides.<profile>.extra_args
//  3. the strategy's vllm_args, then the parallel-size flag(s)
//  4. strategy_overrides.<strategy>.extra_args and .vllm_args
//  5. hardware overrides: strategy_overrides.<strategy>.hardware_overrides.<generation> when
//     present (it replaces the next two), else the recipe's hardware_overrides.<generation>
//     and then the variant's; then strategy_overrides.<strategy>.hardware_overrides.<profile>
//  6. the features that are on, in the recipe's order (a feature's hardware_overrides args
//     replace its args on that hardware; a pick-one feature contributes its mode's args)
func (d *derivation) buildArgs() []string {
	r, v, s, p := d.recipe, d.variant, d.strategy, d.profile
	var args []string
	args = append(args, r.Model.BaseArgs...)
	args = append(args, v.ExtraArgs...)
	args = append(args, v.HardwareOverrides[d.profileID].ExtraArgs...)
	args = append(args, s.VLLMArgs...)
	args = append(args, d.parallelArgs()...)
	so := r.StrategyOverrides[s.Name]
	args = append(args, so.ExtraArgs...)
	args = append(args, so.VLLMArgs...)
	if sho, ok := byGeneration(so.HardwareOverrides, p); ok {
		args = append(args, sho.ExtraArgs...)
	} else {
		if rho, ok := byGeneration(r.HardwareOverrides, p); ok {
			args = append(args, rho.ExtraArgs...)
		}
		if vho, ok := byGeneration(v.HardwareOverrides, p); ok {
			args = append(args, vho.ExtraArgs...)
		}
	}
	args = append(args, so.HardwareOverrides[d.profileID].ExtraArgs...)
	for _, name := range d.features {
		args = append(args, d.featureArgs(name)...)
	}
	return MergeArgs(args)
}

func (d *derivation) featureArgs(name string) []string {
	f := d.recipe.Features.Values[name]
	if f.Modes.Len() > 0 {
		mode, ok := d.featureMode(name, f)
		if !ok {
			return nil
		}
		for _, k := range hardwareKeys(d.profileID, d.profile, true) {
			if o, ok := mode.HardwareOverrides[k]; ok && o.Args != nil {
				return o.Args
			}
		}
		return mode.Args
	}
	if o, ok := byGeneration(f.HardwareOverrides, d.profile); ok && o.Args != nil {
		return o.Args
	}
	return f.Args
}

// featureMode picks a pick-one feature's mode: among the modes allowed for this variant and
// hardware, the variant's default_modes choice, else the feature's default_mode, else the first.
func (d *derivation) featureMode(name string, f Feature) (FeatureMode, bool) {
	var allowed []string
	for _, k := range f.Modes.Keys {
		m := f.Modes.Values[k]
		if len(m.Variants) > 0 && !slices.Contains(m.Variants, d.variantKey) {
			continue
		}
		if m.Hardware[string(d.profile.Generation)] == "unsupported" || m.Hardware[d.profileID] == "unsupported" {
			continue
		}
		allowed = append(allowed, k)
	}
	if len(allowed) == 0 {
		return FeatureMode{}, false
	}
	for _, c := range []string{d.variant.DefaultModes[name], f.DefaultMode} {
		if c != "" && slices.Contains(allowed, c) {
			return f.Modes.Values[c], true
		}
	}
	return f.Modes.Values[allowed[0]], true
}

// buildEnv merges env in upstream's order, a later source overriding an earlier value in
// place: model.base_env, the variant's extra_env and hardware_overrides.<profile>.extra_env, the
// strategy's env, strategy_overrides.<strategy>.env and .extra_env, then the hardware overrides
// as for the args.
func (d *derivation) buildEnv() []v1alpha1.EnvVar {
	r, v, s, p := d.recipe, d.variant, d.strategy, d.profile
	var env envBuilder
	env.add(r.Model.BaseEnv)
	env.add(v.ExtraEnv)
	env.add(v.HardwareOverrides[d.profileID].ExtraEnv)
	env.add(s.Env)
	so := r.StrategyOverrides[s.Name]
	env.add(so.Env)
	env.add(so.ExtraEnv)
	if sho, ok := byGeneration(so.HardwareOverrides, p); ok {
		env.add(sho.ExtraEnv)
	} else {
		if rho, ok := byGeneration(r.HardwareOverrides, p); ok {
			env.add(rho.ExtraEnv)
		}
		if vho, ok := byGeneration(v.HardwareOverrides, p); ok {
			env.add(vho.ExtraEnv)
		}
	}
	env.add(so.HardwareOverrides[d.profileID].ExtraEnv)
	return env.vars
}

type envBuilder struct {
	vars []v1alpha1.EnvVar
	at   map[string]int
}

func (e *envBuilder) add(o Env) {
	if e.at == nil {
		e.at = map[string]int{}
	}
	for _, k := range o.Keys {
		if i, ok := e.at[k]; ok {
			e.vars[i].Value = o.Values[k]
			continue
		}
		e.at[k] = len(e.vars)
		e.vars = append(e.vars, v1alpha1.EnvVar{Name: k, Value: o.Values[k]})
	}
}

// Default images by brand, as upstream's builder picks them.
var (
	defaultImages = map[string]string{
		"nvidia": v1alpha1.DefaultVLLMImage,
		"amd":    "vllm/vllm-openai-rocm:latest",
		"tpu":    "vllm/vllm-tpu:latest",
		"intel":  "vllm/vllm-openai-cpu:latest-x86_64",
	}
	nightlyImages = map[string]string{
		"nvidia": "vllm/vllm-openai:nightly",
		"amd":    "vllm/vllm-openai-rocm:nightly",
		"tpu":    "vllm/vllm-tpu:nightly",
	}
)

const xpuImage = "vllm/vllm-openai-xpu:latest"

// buildImage: the variant's hardware_overrides.<profile>.docker_image, else the variant's
// docker_image, else the model's (each a plain image for NVIDIA, a brand map or a CUDA map,
// cu130 preferred), else the brand's default image (vllm/vllm-openai:latest on NVIDIA).
func (d *derivation) buildImage() string {
	p := d.profile
	brand := "nvidia"
	switch {
	case p.Generation == "tpu":
		brand = "tpu"
	case p.Brand == "AMD":
		brand = "amd"
	case p.Generation == "cpu" || p.Generation == "xpu" || p.Brand == "Intel":
		brand = "intel"
	}
	pinned, cuda := "", map[string]string(nil)
	if o := d.variant.HardwareOverrides[d.profileID].DockerImage; o != nil && o.Single != "" {
		pinned = o.Single
	}
	apply := func(im *Image) {
		if im == nil || pinned != "" || cuda != nil {
			return
		}
		switch {
		case im.Single != "":
			if brand == "nvidia" {
				pinned = im.Single
			}
		case im.ByBrand != nil:
			bv := im.ByBrand[brand]
			if bv.Single != "" {
				pinned = bv.Single
			} else if brand == "nvidia" && bv.CUDA != nil {
				cuda = bv.CUDA
			}
		case im.CUDA != nil:
			if brand == "nvidia" {
				cuda = im.CUDA
			}
		}
	}
	apply(d.variant.DockerImage)
	apply(d.recipe.Model.DockerImage)
	switch {
	case pinned != "":
		return pinned
	case p.Generation == "xpu":
		return xpuImage
	case cuda["cu130"] != "":
		return cuda["cu130"]
	case cuda["cu129"] != "":
		return cuda["cu129"]
	}
	if d.recipe.Model.NightlyRequired && nightlyImages[brand] != "" {
		return nightlyImages[brand]
	}
	return defaultImages[brand]
}

func (d *derivation) master() *v1alpha1.ModelMaster {
	model := d.variant.ModelID
	if model == "" {
		model = d.recipe.Model.ModelID
	}
	features := slices.Clone(d.features)
	slices.Sort(features)
	tool, _ := ArgValue(d.args, "--tool-call-parser")
	reasoning, _ := ArgValue(d.args, "--reasoning-parser")
	return &v1alpha1.ModelMaster{
		TypeMeta: typeMeta(),
		Spec: v1alpha1.ModelMasterSpec{
			Runtime:              v1alpha1.RuntimeVLLM,
			Model:                model,
			Image:                d.image,
			Args:                 d.args,
			Env:                  d.env,
			ToolCallParser:       tool,
			ReasoningParser:      reasoning,
			Variant:              d.variantKey,
			Precision:            d.variant.Precision,
			TensorParallelSize:   int32(d.tp),
			PipelineParallelSize: int32(d.pp),
			PerReplicaGPUCount:   int32(d.perReplica),
			HardwareProfile:      d.profileID,
			Source: &v1alpha1.MasterSource{
				Recipe:   d.recipe.ID,
				Strategy: d.strategy.Name,
				Features: features,
				Nodes:    int32(d.nodes),
			},
		},
	}
}
