package recipe

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// effectiveStrategies is compatible_strategies plus the strategies strategy_hardware grants
// somewhere (upstream's effectiveCompatibleStrategies); a recipe that lists none gets
// single_node_tp, the builder's fallback.
func effectiveStrategies(r *Recipe) []string {
	all := slices.Clone(r.CompatibleStrategies)
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
	if len(all) == 0 {
		return []string{StrategySingleNodeTP}
	}
	return all
}

// strategyOnHardware is upstream's per-hardware gate: strategy_hardware by exact id,
// generation, brand or default; else membership of compatible_strategies.
func strategyOnHardware(r *Recipe, s, profileID string, p HardwareProfile) bool {
	if gate, ok := r.StrategyHardware[s]; ok {
		for _, k := range hardwareKeys(profileID, p, true) {
			if v, ok := gate[k]; ok {
				return v != "unsupported"
			}
		}
	}
	if len(r.CompatibleStrategies) == 0 {
		return s == StrategySingleNodeTP
	}
	return slices.Contains(r.CompatibleStrategies, s)
}

// floorNodes is the node count a strategy's strategy_min_gpus floor asks for (at least 1).
func (d *derivation) floorNodes(s string) int64 {
	return max(1, ceilDiv(float64(d.recipe.StrategyMinGPUs.For(s, d.profileID)), float64(d.gpusPerNode)))
}

// unavailable says why strategy s cannot be used for this recipe, variant and hardware, or
// nil. It checks what upstream checks before offering a strategy (listed, per-hardware gate,
// GPU floor, scalable hardware), then what inferplane adds (a strategies/ file, a layout it
// renders).
func (b *Book) unavailable(d *derivation, s string) error {
	r := d.recipe
	if !b.knownStrategies()[s] {
		return newError(ReasonUnknownStrategy, "strategy", "unknown strategy %q; recipe %s is compatible with %s%s",
			s, r.ID, list(effectiveStrategies(r)), didYouMean(s, slices.Sorted(maps.Keys(b.knownStrategies()))))
	}
	if !slices.Contains(effectiveStrategies(r), s) || !strategyOnHardware(r, s, d.profileID, d.profile) {
		return newError(ReasonIncompatibleStrategy, "strategy", "strategy %s is not compatible with recipe %s on %s; compatible: %s",
			s, r.ID, d.profileID, list(b.usable(d)))
	}
	st, ok := b.strategies[s]
	if !ok {
		return newError(ReasonStrategyUnavailable, "strategy", "strategy %s is not available in this recipes tree (no %s/%s.yaml); available for recipe %s: %s",
			s, StrategiesDir, s, r.ID, list(b.usable(d)))
	}
	multi := st.DeployType == DeployMultiNode || st.DeployType == DeployPDCluster
	floor, reach := r.StrategyMinGPUs.For(s, d.profileID), d.gpusPerNode
	if multi {
		reach *= MaxNodes
	}
	if floor > reach {
		where := fmt.Sprintf("one %s node has %d", d.profileID, d.gpusPerNode)
		if multi {
			where = fmt.Sprintf("%d %s nodes have %d", MaxNodes, d.profileID, reach)
		}
		return newError(ReasonDoesNotFit, "strategy", "strategy %s needs at least %d GPUs for recipe %s on %s (strategy_min_gpus), and %s; usable here: %s",
			s, floor, r.ID, d.profileID, where, list(b.usable(d)))
	}
	if multi && !d.profile.scalable() {
		return newError(ReasonIncompatibleStrategy, "strategy", "strategy %s spans several nodes, and %s nodes cannot be joined into one deployment (taxonomy: scalable: false)", s, d.profileID)
	}
	if why := supported(st); why != "" {
		return newError(ReasonUnsupportedStrategy, "strategy", "strategy %s is not rendered by inferplane: %s; use instead: %s", s, why, list(b.usable(d)))
	}
	return nil
}

// usable are the strategies of the recipe that pass unavailable, in the recipe's order.
func (b *Book) usable(d *derivation) []string {
	var out []string
	for _, s := range effectiveStrategies(d.recipe) {
		if !strategyOnHardware(d.recipe, s, d.profileID, d.profile) {
			continue
		}
		st, ok := b.strategies[s]
		if !ok || supported(st) != "" {
			continue
		}
		multi := st.DeployType == DeployMultiNode
		reach := d.gpusPerNode
		if multi {
			reach *= MaxNodes
		}
		if d.recipe.StrategyMinGPUs.For(s, d.profileID) > reach || (multi && !d.profile.scalable()) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// supported says why inferplane cannot render a strategy, or "" when it can. Multi-node
// replicas start with vLLM's own launchers: --nnodes/--node-rank for TP (and TP within a
// node, PP across nodes), --data-parallel-address/--data-parallel-start-rank for data
// parallel (DEP, and TP within a node, DP across nodes).
func supported(s *Strategy) string {
	switch s.DeployType {
	case DeploySingleNode:
		return ""
	case DeployMultiNode:
		switch {
		case s.Parallelism != "" && s.Parallelism != "tp_pp" && s.Parallelism != "tp_dp":
			return fmt.Sprintf("its parallelism %q is not one of vLLM's multi-node launchers inferplane renders (tp, tp_pp, tp_dp)", s.Parallelism)
		case s.ParallelFlag != "" && s.ParallelFlag != flagTP && s.ParallelFlag != flagDP:
			return fmt.Sprintf("its parallel flag %s is not one of vLLM's multi-node launchers inferplane renders", s.ParallelFlag)
		}
		return ""
	case DeployPDCluster:
		return "disaggregated prefill/decode needs two pools of servers joined by a NIXL KV connector and a vllm-router in front of them, which inferplane does not render yet (docs/recipes.md)"
	case DeployKVStoreLB:
		return "KV-store load-balanced deployments need a Mooncake master and a router, which inferplane does not render"
	}
	return fmt.Sprintf("deploy_type %q is not one inferplane knows", s.DeployType)
}

// minNodes is the nodes the variant's vram_minimum_gb needs (more than MaxNodes when it does
// not fit even those).
func (d *derivation) minNodes() int64 {
	nodeVRAM := d.gpuMemGB * float64(d.gpusPerNode)
	need := d.variant.VRAMMinimumGB
	if need <= 0 || nodeVRAM <= 0 || need <= nodeVRAM {
		return 1
	}
	if ratio := need / nodeVRAM; ratio <= MaxNodes {
		return ceilDiv(need, nodeVRAM)
	}
	return MaxNodes + 1
}

func (d *derivation) fitMsg() string {
	return fmt.Sprintf("variant %q of %s needs %g GB; one %s node has %d GPUs x %g GB = %g GB",
		d.variantKey, d.recipe.ID, d.variant.VRAMMinimumGB, d.profileID, d.gpusPerNode, d.gpuMemGB, d.gpuMemGB*float64(d.gpusPerNode))
}

// pickLayout chooses the strategy and the nodes per replica.
//
// A multi-node replica gets at least two nodes, as many as the variant's vram_minimum_gb
// needs (upstream renders two and treats memory as a hint; inferplane does not render a
// replica the weights do not fit) and as many as the strategy's strategy_min_gpus floor asks
// for; a request may ask for more.
func (b *Book) pickLayout(d *derivation, asked string, nodes int64) error {
	if nodes < 0 {
		return newError(ReasonDoesNotFit, "nodes", "nodes per replica must not be negative (got %d)", nodes)
	}
	if nodes > MaxNodes {
		return newError(ReasonDoesNotFit, "nodes", "%d nodes per replica is more than the %d a replica may span", nodes, MaxNodes)
	}
	minNodes := d.minNodes()
	if minNodes > MaxNodes {
		nodeVRAM := d.gpuMemGB * float64(d.gpusPerNode)
		return newError(ReasonDoesNotFit, "nodes", "does not fit: %s, so it would span %s nodes, more than the %d a replica may",
			d.fitMsg(), strconv.FormatFloat(math.Ceil(d.variant.VRAMMinimumGB/nodeVRAM), 'f', -1, 64), MaxNodes)
	}
	if nodes > 0 && nodes < minNodes {
		return newError(ReasonDoesNotFit, "nodes", "does not fit %d node(s): %s, so a replica needs at least %d nodes", nodes, d.fitMsg(), minNodes)
	}
	if minNodes > 1 && !d.profile.scalable() {
		return newError(ReasonDoesNotFit, "nodes", "does not fit: %s, and %s nodes cannot be joined into one deployment (taxonomy: scalable: false)%s",
			d.fitMsg(), d.profileID, d.fittingVariantHint())
	}
	if nodes > 1 && !d.profile.scalable() {
		return newError(ReasonIncompatibleStrategy, "nodes", "%d nodes per replica were asked for, and %s nodes cannot be joined into one deployment (taxonomy: scalable: false)", nodes, d.profileID)
	}
	var s *Strategy
	if asked != "" {
		if err := b.unavailable(d, asked); err != nil {
			return err
		}
		s = b.strategies[asked]
	} else {
		var err error
		if s, err = b.recommend(d, max(nodes, minNodes)); err != nil {
			return err
		}
	}
	if s.DeployType == DeploySingleNode {
		switch {
		case nodes > 1:
			return newError(ReasonIncompatibleStrategy, "strategy", "strategy %s runs on one node, but %d nodes per replica were asked for", s.Name, nodes)
		case minNodes > 1:
			return newError(ReasonDoesNotFit, "strategy", "does not fit one node with strategy %s: %s; a multi-node strategy over at least %d nodes is needed (%s available)",
				s.Name, d.fitMsg(), minNodes, list(multiNode(b, b.usable(d))))
		}
		d.strategy, d.nodes = s, 1
		return nil
	}
	if nodes == 1 {
		return newError(ReasonIncompatibleStrategy, "strategy", "strategy %s spans two or more nodes, but 1 node per replica was asked for", s.Name)
	}
	need := max(2, minNodes, d.floorNodes(s.Name))
	switch {
	case need > MaxNodes:
		return newError(ReasonDoesNotFit, "nodes", "strategy %s needs %d nodes of %s, more than the %d a replica may span", s.Name, need, d.profileID, MaxNodes)
	case nodes > 0 && nodes < need:
		return newError(ReasonDoesNotFit, "nodes", "strategy %s needs at least %d nodes of %s per replica (strategy_min_gpus %d GPUs; %s), but %d were asked for",
			s.Name, need, d.profileID, d.recipe.StrategyMinGPUs.For(s.Name, d.profileID), d.fitMsg(), nodes)
	}
	d.strategy, d.nodes = s, max(nodes, need)
	return nil
}

// fittingVariantHint names the largest variant that fits one node, which upstream's builder
// switches to on hardware that cannot be clustered.
func (d *derivation) fittingVariantHint() string {
	nodeVRAM := d.gpuMemGB * float64(d.gpusPerNode)
	best, bestVRAM := "", -1.0
	for _, k := range d.recipe.Variants.Keys {
		v := d.recipe.Variants.Values[k]
		if c := precisionConstraint(v); c != nil && !c.matches(d.profile) {
			continue
		}
		if len(v.SupportedHardware) > 0 && !slices.Contains(v.SupportedHardware, d.profileID) {
			continue
		}
		if v.VRAMMinimumGB <= nodeVRAM && v.VRAMMinimumGB > bestVRAM {
			best, bestVRAM = k, v.VRAMMinimumGB
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; variant %q fits (%g GB)", best, bestVRAM)
}

func multiNode(b *Book, names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return b.strategies[n].DeployType != DeployMultiNode })
}

// recommend is upstream's recommendStrategy for a replica of nodes nodes: the recipe's
// default_strategy (its multi_node_ sibling on more than one node), else multi_node_tp,
// multi_node_dep, multi_node_tep on more than one node, else single_node_tp, else the first
// compatible one. When upstream's pick is not usable here (gated on this hardware, below its
// GPU floor, or a layout inferplane does not render), the first usable strategy of the
// recipe's list whose node count fits takes its place, as upstream falls back to the first
// strategy it offers.
func (b *Book) recommend(d *derivation, nodes int64) (*Strategy, error) {
	r := d.recipe
	compatible := effectiveStrategies(r)
	pick := ""
	if def := r.DefaultStrategy; def != "" && slices.Contains(compatible, def) {
		if nodes <= 1 || !strings.HasPrefix(def, "single_node_") {
			pick = def
		} else if sib := "multi_node_" + strings.TrimPrefix(def, "single_node_"); slices.Contains(compatible, sib) {
			pick = sib
		}
	}
	if pick == "" && nodes > 1 {
		for _, s := range []string{StrategyMultiNodeTP, StrategyMultiNodeDEP, StrategyMultiNodeTEP} {
			if slices.Contains(compatible, s) {
				pick = s
				break
			}
		}
	}
	if pick == "" {
		pick = compatible[0]
		if slices.Contains(compatible, StrategySingleNodeTP) {
			pick = StrategySingleNodeTP
		}
	}
	usable := b.usable(d)
	fits := func(s string) bool { return nodes <= 1 || b.strategies[s].DeployType == DeployMultiNode }
	if slices.Contains(usable, pick) && fits(pick) {
		return b.strategies[pick], nil
	}
	for _, s := range usable {
		if fits(s) {
			return b.strategies[s], nil
		}
	}
	if nodes > 1 {
		return nil, newError(ReasonDoesNotFit, "strategy", "does not fit: %s, so a replica needs at least %d nodes, and recipe %s has no multi-node strategy inferplane can use on %s (compatible: %s; usable: %s)",
			d.fitMsg(), nodes, r.ID, d.profileID, list(compatible), list(usable))
	}
	return nil, newError(ReasonStrategyUnavailable, "strategy", "recipe %s has no strategy inferplane can use on %s (compatible: %s; usable: %s)",
		r.ID, d.profileID, list(compatible), list(usable))
}
