package recipe

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/vllmargs"
)

// The derivation follows the upstream command builder (vllm-project/recipes,
// src/lib/command-synthesis.js, resolveCommand and friends; scripts/build-recipes-api.mjs for
// what it offers), rewritten for one question: the serving arguments of one replica of one
// model on one class of node. docs/recipes.md states the rules with examples.

// MaxNodes is the most nodes one replica may span (the upstream builder's limit).
const MaxNodes = 16

// Upstream strategy names the rules refer to.
const (
	StrategySingleNodeTP = "single_node_tp"
	StrategyMultiNodeTP  = "multi_node_tp"
	StrategyMultiNodeDEP = "multi_node_dep"
	StrategyMultiNodeTEP = "multi_node_tep"
	StrategyPDCluster    = "pd_cluster"
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
	// features are on, in the order upstream's builder emits them; asked are the ones the
	// request named (on or off).
	features []string
	asked    map[string]bool
	// modes are the modes of the pick-one features that are on.
	modes  map[string]string
	kvName string
	kv     *KVOffloadOption
	args   []string
	env    []v1alpha1.EnvVar
	image  string
	// tp, pp and dp are the sizes the args select; perReplica the GPUs they use.
	tp, pp, dp int64
	perReplica int64
}

func typeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelMaster}
}

func (b *Book) derive(req Request) (*derivation, error) {
	r, impliedVariant, ok := b.lookup(req.ModelID)
	if !ok {
		return nil, b.unknownModel(req.ModelID)
	}
	d := &derivation{recipe: r}
	if err := d.pickVariant(req.Variant, impliedVariant, req.ModelID); err != nil {
		return nil, err
	}
	if slices.Contains(r.Meta.Tasks, "omni") {
		return nil, newError(ReasonUnsupportedRecipe, "model",
			"recipe %s is a vllm-omni recipe (meta.tasks lists omni): inferplane derives masters for `vllm serve` chat and completion models only, not `vllm serve --omni` (docs/recipes.md)", r.ID)
	}
	steps := []func() error{
		func() error { return b.pickHardware(d, req.Hardware) },
		func() error { return d.pickFeatures(req.Features, req.FeatureModes) },
		func() error { return b.pickLayout(d, req.Strategy, int64(req.Nodes)) },
		d.dropStrategyFeatures,
		func() error { return b.pickKVOffload(d, req.KVOffload) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	d.args = d.buildArgs()
	d.env = d.buildEnv()
	d.image = d.buildImage()
	if err := d.sizes(); err != nil {
		return nil, err
	}
	return d, nil
}

func (b *Book) unknownModel(modelID string) error {
	if strings.TrimSpace(modelID) == "" {
		return newError(ReasonUnknownModel, "model", "no model given: name a recipe's model id (e.g. %s)", b.exampleID())
	}
	msg := fmt.Sprintf("unknown model %q: the recipes tree has no models/%s.yaml", modelID, modelID)
	if s := didYouMean(modelID, b.Models()); s != "" {
		msg += s
	} else {
		msg += fmt.Sprintf(" and no recipe with a close id (%d recipes)", len(b.recipes))
	}
	return newError(ReasonUnknownModel, "model", "%s", msg)
}

func (b *Book) exampleID() string {
	if _, ok := b.recipes["Qwen/Qwen3-32B"]; ok {
		return "Qwen/Qwen3-32B"
	}
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
		return newError(ReasonUnknownVariant, "variant",
			"model %s is the checkpoint of variant %q of recipe %s, but variant %q was asked for", modelID, implied, r.ID, asked)
	case key == "":
		key = "default"
		if _, ok := r.Variants.Get(key); !ok {
			key = r.Variants.Keys[0]
		}
	}
	v, ok := r.Variants.Get(key)
	if !ok {
		return newError(ReasonUnknownVariant, "variant", "recipe %s has no variant %q; its variants: %s%s", r.ID, key, list(r.Variants.Keys), didYouMean(key, r.Variants.Keys))
	}
	d.variantKey, d.variant = key, v
	return nil
}

// pickHardware checks the hardware against the recipe and the variant the way upstream lists
// a variant's hardware: known to the taxonomy, not marked unsupported, among the variant's
// supported_hardware, of the brand and generation its precision needs, and, for a restricted
// profile (workstations, TPUs, CPUs), declared by the recipe.
func (b *Book) pickHardware(d *derivation, hw Hardware) error {
	r, tax := d.recipe, b.taxonomy
	if hw.Profile == "" {
		return newError(ReasonUnknownHardware, "hardware", "no hardware profile given: the node type must name one of the taxonomy's (%s)", list(tax.HardwareProfiles.Keys))
	}
	p, ok := tax.HardwareProfiles.Get(hw.Profile)
	if !ok {
		return newError(ReasonUnknownHardware, "hardware", "unknown hardware profile %q; taxonomy.yaml defines %s%s", hw.Profile, list(tax.HardwareProfiles.Keys), didYouMean(hw.Profile, tax.HardwareProfiles.Keys))
	}
	if hw.GPUsPerNode < 0 || hw.GPUsPerNode > maxGPUsPerNode || hw.GPUMemoryGB < 0 {
		return newError(ReasonUnknownHardware, "hardware", "GPUs per node must be 0 (the taxonomy's) to %d and GPU memory not negative; got %d GPUs of %d GB",
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
	return hardwareRefusal(r, d.variantKey, d.variant, hw.Profile, p)
}

// hardwareRefusal says why upstream does not offer variant v of r on a profile, or nil.
func hardwareRefusal(r *Recipe, variantKey string, v Variant, id string, p HardwareProfile) error {
	if r.Meta.Hardware[id] == "unsupported" {
		return newError(ReasonUnsupportedHardware, "hardware", "recipe %s marks hardware %s unsupported (meta.hardware)", r.ID, id)
	}
	if s := v.SupportedHardware; len(s) > 0 && !slices.Contains(s, id) {
		return newError(ReasonUnsupportedHardware, "hardware", "variant %q of recipe %s runs only on %s, not on %s", variantKey, r.ID, list(s), id)
	}
	if c := precisionConstraint(v); c != nil && !c.matches(p) {
		return newError(ReasonUnsupportedHardware, "hardware", "variant %q of recipe %s (precision %s) needs %s GPUs; hardware %s is %s %s",
			variantKey, r.ID, v.Precision, strings.TrimSpace(c.Brand+" "+c.Generation), id, p.Brand, p.Generation)
	}
	if _, declared := r.Meta.Hardware[id]; p.Restricted && !declared {
		return newError(ReasonUnsupportedHardware, "hardware", "hardware %s is restricted in taxonomy.yaml (offered only for recipes that declare it) and recipe %s does not list it in meta.hardware (it lists %s)",
			id, r.ID, list(slices.Sorted(maps.Keys(r.Meta.Hardware))))
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

func (c *Constraint) matches(p HardwareProfile) bool {
	return (c.Brand == "" || c.Brand == p.Brand) && (c.Generation == "" || c.Generation == string(p.Generation))
}

func (d *derivation) master() *v1alpha1.ModelMaster {
	model := d.variant.ModelID
	if model == "" {
		model = d.recipe.Model.ModelID
	}
	features := slices.Clone(d.features)
	slices.Sort(features)
	tool, _ := vllmargs.Value(d.args, "--tool-call-parser")
	reasoning, _ := vllmargs.Value(d.args, "--reasoning-parser")
	var modes map[string]string
	if len(d.modes) > 0 {
		modes = maps.Clone(d.modes)
	}
	m := &v1alpha1.ModelMaster{
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
				Recipe:       d.recipe.ID,
				Strategy:     d.strategy.Name,
				Features:     features,
				FeatureModes: modes,
				KVOffload:    d.kvName,
				Nodes:        int32(d.nodes),
			},
		},
	}
	if d.dp > 1 {
		m.Spec.DataParallelSize = int32(d.dp)
	}
	return m
}
