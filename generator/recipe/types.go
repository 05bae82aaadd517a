package recipe

import (
	"math"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The types below mirror the upstream vllm-project/recipes format. Only the keys the
// derivation uses (plus the descriptive ones `recipe show` prints) are declared; upstream keys
// not declared here (guide, dependencies, kv_offload_support, omni, ...) are read past.

// Recipe is one models/<org>/<repo>.yaml file.
type Recipe struct {
	// ID is the recipe's id, from its path: models/<org>/<repo>.yaml is "<org>/<repo>".
	ID string `yaml:"-"`
	// File is the file the recipe was read from, relative to the recipes root.
	File string `yaml:"-"`

	Meta                  Meta                         `yaml:"meta"`
	Model                 ModelInfo                    `yaml:"model" recipe:"required"`
	Features              Ordered[Feature]             `yaml:"features"`
	OptInFeatures         []string                     `yaml:"opt_in_features"`
	HardwareOptInFeatures map[string][]string          `yaml:"hardware_opt_in_features"`
	Variants              Ordered[Variant]             `yaml:"variants" recipe:"required"`
	CompatibleStrategies  []string                     `yaml:"compatible_strategies"`
	DefaultStrategy       string                       `yaml:"default_strategy"`
	StrategyHardware      map[string]map[string]string `yaml:"strategy_hardware"`
	// StrategyMinGPUs is the GPU floor of each strategy, as a number for all of them or a map
	// by strategy name and by exact profile id (upstream's strategy_min_gpus).
	StrategyMinGPUs   *MinGPUs                    `yaml:"strategy_min_gpus"`
	HardwareOverrides map[string]*Override        `yaml:"hardware_overrides"`
	StrategyOverrides map[string]StrategyOverride `yaml:"strategy_overrides"`
	// KVOffloadSupport marks taxonomy KV-offload options verified or unsupported for the recipe.
	KVOffloadSupport map[string]string `yaml:"kv_offload_support"`
}

// Meta is the recipe's descriptive header.
type Meta struct {
	Title       string   `yaml:"title"`
	Slug        string   `yaml:"slug"`
	Provider    string   `yaml:"provider"`
	Description string   `yaml:"description"`
	Tasks       []string `yaml:"tasks"`
	// Hardware maps hardware profile ids to verified or unsupported.
	Hardware map[string]string `yaml:"hardware"`
	// DefaultHardware is the profile the recipe's author picks first.
	DefaultHardware string `yaml:"default_hardware"`
}

// ModelInfo is the recipe's `model` block.
type ModelInfo struct {
	ModelID          string `yaml:"model_id" recipe:"required"`
	MinVLLMVersion   string `yaml:"min_vllm_version"`
	Architecture     string `yaml:"architecture"`
	ParameterCount   string `yaml:"parameter_count"`
	ActiveParameters string `yaml:"active_parameters"`
	ContextLength    int64  `yaml:"context_length"`
	BaseArgs         Args   `yaml:"base_args"`
	BaseEnv          Env    `yaml:"base_env"`
	DockerImage      *Image `yaml:"docker_image"`
	// NightlyRequired swaps the default images for their nightly tags.
	NightlyRequired bool `yaml:"nightly_required"`
}

// Feature is one toggle of the recipe (tool_calling, reasoning, spec_decoding, ...).
type Feature struct {
	Description string `yaml:"description"`
	Args        Args   `yaml:"args"`
	// HardwareOverrides, keyed by generation (or "nvidia"), replace Args on that hardware.
	HardwareOverrides map[string]*FeatureOverride `yaml:"hardware_overrides"`
	// Modes make the feature a pick-one (e.g. speculative decoding methods).
	Modes       Ordered[FeatureMode] `yaml:"modes"`
	DefaultMode string               `yaml:"default_mode"`
	// Strategies, when set, are the only strategies the feature applies under.
	Strategies []string `yaml:"strategies"`
	// Companion is a helper process the feature needs beside the model server.
	Companion *Companion `yaml:"companion"`
}

// Companion is a helper process that runs beside `vllm serve` on the same node.
type Companion struct {
	Label   string `yaml:"label"`
	Command string `yaml:"command"`
}

// FeatureOverride replaces a feature's or mode's args on some hardware.
type FeatureOverride struct {
	Args Args `yaml:"args"`
}

// FeatureMode is one choice of a pick-one feature.
type FeatureMode struct {
	Args Args `yaml:"args"`
	// Hardware marks a generation or profile id "unsupported" for this mode.
	Hardware map[string]string `yaml:"hardware"`
	// Variants, when set, are the only variants the mode exists for.
	Variants          []string                    `yaml:"variants"`
	HardwareOverrides map[string]*FeatureOverride `yaml:"hardware_overrides"`
}

// Variant is one checkpoint / precision of the model.
type Variant struct {
	// ModelID is the variant's own checkpoint (a quantised repo); empty means the model's.
	ModelID       string  `yaml:"model_id"`
	Precision     string  `yaml:"precision"`
	Description   string  `yaml:"description"`
	VRAMMinimumGB float64 `yaml:"vram_minimum_gb"`
	ExtraArgs     Args    `yaml:"extra_args"`
	ExtraEnv      Env     `yaml:"extra_env"`
	// TP pins the single-node tensor-parallel size, as a number or per hardware.
	TP *HardwareInt `yaml:"tp"`
	// HardwareOverrides are keyed by generation or "nvidia" (additive, after the recipe's) and
	// by exact profile id (applied with the variant's own args).
	HardwareOverrides map[string]*Override `yaml:"hardware_overrides"`
	DockerImage       *Image               `yaml:"docker_image"`
	// SupportedHardware, when set, lists the only profiles the variant runs on.
	SupportedHardware []string `yaml:"supported_hardware"`
	// PrecisionHardware overrides the hardware a precision needs (nvfp4: NVIDIA blackwell).
	PrecisionHardware *Constraint `yaml:"precision_hardware"`
	// DefaultModes picks a pick-one feature's mode for this variant, and turns it on.
	DefaultModes map[string]string `yaml:"default_modes"`
}

// Constraint restricts a variant to a brand and generation.
type Constraint struct {
	Brand      string `yaml:"brand"`
	Generation string `yaml:"generation"`
}

// Override is a hardware_overrides entry.
type Override struct {
	ExtraArgs   Args   `yaml:"extra_args"`
	ExtraEnv    Env    `yaml:"extra_env"`
	DockerImage *Image `yaml:"docker_image"`
}

// StrategyOverride is a strategy_overrides entry: the recipe's tweaks to one strategy.
type StrategyOverride struct {
	TP        *HardwareInt `yaml:"tp"`
	ExtraArgs Args         `yaml:"extra_args"`
	VLLMArgs  Args         `yaml:"vllm_args"`
	Env       Env          `yaml:"env"`
	ExtraEnv  Env          `yaml:"extra_env"`
	// HardwareOverrides keyed by generation replace the recipe's and the variant's hardware
	// args; keyed by exact profile id they add to them.
	HardwareOverrides map[string]*Override `yaml:"hardware_overrides"`
}

// Strategy is one strategies/<name>.yaml file.
type Strategy struct {
	// File is the file the strategy was read from, relative to the recipes root.
	File string `yaml:"-"`

	Name        string `yaml:"name" recipe:"required"`
	DeployType  string `yaml:"deploy_type" recipe:"required"`
	DisplayName string `yaml:"display_name"`
	Description string `yaml:"description"`
	// Parallelism is "" (TP over every GPU of every node), "tp_pp" or "tp_dp".
	Parallelism   string        `yaml:"parallelism"`
	HardwareMatch HardwareMatch `yaml:"hardware_match"`
	VLLMArgs      Args          `yaml:"vllm_args"`
	ParallelFlag  string        `yaml:"parallel_flag"`
	Env           Env           `yaml:"env"`
}

// HardwareMatch is what a strategy asks of the hardware.
type HardwareMatch struct {
	MinGPUs      int64  `yaml:"min_gpus"`
	MaxGPUs      int64  `yaml:"max_gpus"`
	MultiNode    bool   `yaml:"multi_node"`
	Architecture string `yaml:"architecture"`
}

// KVStore is one kv_store/<name>.yaml file: a Mooncake KV-store deployment, offered as a KV
// offload option (deploy_type kv_store_lb).
type KVStore struct {
	File        string `yaml:"-"`
	Name        string `yaml:"name" recipe:"required"`
	DeployType  string `yaml:"deploy_type" recipe:"required"`
	DisplayName string `yaml:"display_name"`
}

// Deploy types of strategies.
const (
	DeploySingleNode = "single_node"
	DeployMultiNode  = "multi_node"
	DeployPDCluster  = "pd_cluster"
	DeployKVStoreLB  = "kv_store_lb"
)

// Taxonomy is taxonomy.yaml: the hardware profiles and the strategy vocabulary.
type Taxonomy struct {
	HardwareProfiles Ordered[HardwareProfile] `yaml:"hardware_profiles" recipe:"required"`
	Strategies       []string                 `yaml:"strategies"`
	// KVOffload are the KV-cache offload options that compose with a serving strategy.
	KVOffload Ordered[KVOffloadOption] `yaml:"kv_offload"`
}

// KVOffloadOption is one taxonomy.kv_offload entry: args (a --kv-transfer-config) and env
// added after everything else, where its gates allow.
type KVOffloadOption struct {
	DisplayName string `yaml:"display_name"`
	Description string `yaml:"description"`
	Args        Args   `yaml:"args"`
	Env         Env    `yaml:"env"`
	// Strategies, when set, are the only strategies the option runs under.
	Strategies []string `yaml:"strategies"`
	// Brands, when set, are the only hardware brands the option runs on.
	Brands []string `yaml:"brands"`
	// RequiresOptIn: offered only where the recipe marks the option verified.
	RequiresOptIn bool       `yaml:"requires_opt_in"`
	Companion     *Companion `yaml:"companion"`
	Install       string     `yaml:"install"`
}

// HardwareProfile is one node class of the taxonomy (h100: eight 80 GB Hopper GPUs).
type HardwareProfile struct {
	Brand       string     `yaml:"brand"`
	Generation  Generation `yaml:"generation"`
	DisplayName string     `yaml:"display_name"`
	Description string     `yaml:"description"`
	// GPUCount is the number of GPUs of one node; VRAMGB the memory of all of them together.
	GPUCount int64   `yaml:"gpu_count" recipe:"required"`
	VRAMGB   float64 `yaml:"vram_gb" recipe:"required"`
	// Scalable false means the profile cannot be joined into a multi-node deployment.
	Scalable   *bool `yaml:"scalable"`
	Restricted bool  `yaml:"restricted"`
}

// Generation is a profile's GPU generation; upstream allows a list, whose first entry counts.
type Generation string

func (g *Generation) decodeNode(d *decoder, n *yaml.Node, path *field.Path) error {
	if n.Kind == yaml.SequenceNode {
		var list []string
		if err := d.decode(n, reflectValue(&list), path); err != nil {
			return err
		}
		if len(list) > 0 {
			*g = Generation(list[0])
		}
		return nil
	}
	s, err := d.scalarString(n, path)
	*g = Generation(s)
	return err
}

// Args is a list of command-line arguments. Numbers and booleans written unquoted are kept
// as written. A present but empty list ([]) is non-nil, which matters where upstream lets an
// empty list replace a default (feature hardware_overrides).
type Args []string

func (a *Args) decodeNode(d *decoder, n *yaml.Node, path *field.Path) error {
	*a = nil
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.errorf(n, path, "expected a list of arguments, got %s", describe(n))
	}
	out := make(Args, 0, len(n.Content))
	for i, c := range n.Content {
		c, err := d.resolve(c, index(path, i))
		if err != nil {
			return err
		}
		if c.Kind != yaml.ScalarNode || isNull(c) {
			return d.errorf(c, index(path, i), "expected an argument string, got %s", describe(c))
		}
		out = append(out, c.Value)
	}
	*a = out
	return nil
}

// Env is an ordered name → value mapping; unquoted numbers and booleans are kept as written.
type Env = Ordered[string]

// HardwareInt is a number, or a map of numbers: by exact profile id, generation, lowercase
// brand or "default" (upstream's variant `tp`), or by strategy (a profile's block of
// strategy_min_gpus).
type HardwareInt struct {
	Value      int64
	ByHardware map[string]int64
}

func (h *HardwareInt) decodeNode(d *decoder, n *yaml.Node, path *field.Path) error {
	if n.Kind == yaml.MappingNode {
		return d.decode(n, reflectValue(&h.ByHardware), path)
	}
	i, err := d.integer(n, path)
	if err != nil {
		return err
	}
	h.Value = i
	return nil
}

// For resolves the number for a profile: exact id, then generation, then brand, then default.
func (h *HardwareInt) For(profileID string, p HardwareProfile) (int64, bool) {
	if h == nil {
		return 0, false
	}
	if h.ByHardware == nil {
		return h.Value, true
	}
	for _, k := range hardwareKeys(profileID, p, true) {
		if v, ok := h.ByHardware[k]; ok {
			return v, true
		}
	}
	return 0, false
}

// hardwareKeys are the keys a hardware-keyed map is looked up by, most specific first.
func hardwareKeys(profileID string, p HardwareProfile, withDefault bool) []string {
	keys := []string{profileID}
	if p.Generation != "" {
		keys = append(keys, string(p.Generation))
	}
	if p.Brand != "" {
		keys = append(keys, strings.ToLower(p.Brand))
	}
	if withDefault {
		keys = append(keys, "default")
	}
	return keys
}

// Image is a `docker_image`: one image (NVIDIA), a map by brand (nvidia, amd, tpu, intel; the
// nvidia value may itself be a CUDA map), or a map by CUDA version (cu129, cu130).
type Image struct {
	Single  string
	ByBrand map[string]Image
	CUDA    map[string]string
}

func (im *Image) decodeNode(d *decoder, n *yaml.Node, path *field.Path) error {
	if n.Kind == yaml.ScalarNode {
		s, err := d.scalarString(n, path)
		im.Single = s
		return err
	}
	if n.Kind != yaml.MappingNode {
		return d.errorf(n, path, "expected an image name or a map by brand or CUDA version, got %s", describe(n))
	}
	brand, cuda := false, false
	err := d.eachPair(n, path, func(key string, _, _ *yaml.Node) error {
		switch {
		case imageBrands[key]:
			brand = true
		case strings.HasPrefix(key, "cu"):
			cuda = true
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case brand:
		return d.decode(n, reflectValue(&im.ByBrand), path)
	case cuda:
		return d.decode(n, reflectValue(&im.CUDA), path)
	}
	return d.errorf(n, path, "expected a map by brand (nvidia, amd, tpu, intel) or by CUDA version (cu129, cu130)")
}

// imageBrands are the keys of a brand-keyed docker_image.
var imageBrands = map[string]bool{"nvidia": true, "amd": true, "tpu": true, "intel": true}

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

// perGPU is a profile's memory per GPU.
func (p HardwareProfile) perGPU() float64 {
	if p.GPUCount <= 0 {
		return 0
	}
	return p.VRAMGB / float64(p.GPUCount)
}

// scalable reports whether nodes of the profile can be joined into one deployment.
func (p HardwareProfile) scalable() bool { return p.Scalable == nil || *p.Scalable }

func ceilDiv(a, b float64) int64 {
	if b <= 0 {
		return 0
	}
	return int64(math.Ceil(a/b - 1e-9))
}

// MinGPUs is upstream's strategy_min_gpus: one floor for every strategy (a number), or a map
// whose keys are strategy names (or their suffixes: tp, dep, ...) with a number each, and
// exact profile ids with a number or a map by strategy of their own.
type MinGPUs struct {
	All   int64
	ByKey map[string]HardwareInt
}

func (m *MinGPUs) decodeNode(d *decoder, n *yaml.Node, path *field.Path) error {
	if n.Kind == yaml.MappingNode {
		return d.decode(n, reflectValue(&m.ByKey), path)
	}
	i, err := d.integer(n, path)
	m.All = i
	return err
}

// For is the GPU floor of strategy key on profile: the strategy's bar, raised by the
// profile's own block when it has one (highest wins). Only exact profile ids count: GPUs of
// one generation differ in memory, which is what moves the floor.
func (m *MinGPUs) For(key, profileID string) int64 {
	if m == nil {
		return 0
	}
	if m.ByKey == nil {
		return m.All
	}
	var floor int64
	for _, k := range strategyKeys(key) {
		if v, ok := m.ByKey[k]; ok && v.ByHardware == nil {
			floor = v.Value
			break
		}
	}
	if hw, ok := m.ByKey[profileID]; ok {
		if hw.ByHardware == nil {
			return max(floor, hw.Value)
		}
		for _, k := range strategyKeys(key) {
			if v, ok := hw.ByHardware[k]; ok {
				return max(floor, v)
			}
		}
	}
	return floor
}

// strategyKeys are the keys a strategy's floor is looked up by: its name, or its multi-node or
// single-node form.
func strategyKeys(key string) []string {
	return []string{key, "multi_node_" + key, "single_node_" + key}
}
