package recipe_test

import (
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/vllmargs"
)

// bundledDir is the repo's own recipes tree, the one `inferplane generate` reads by default.
const bundledDir = "../../recipes"

func bundled(t testing.TB) *recipe.Book {
	t.Helper()
	b, err := recipe.Load(os.DirFS(bundledDir))
	require.NoError(t, err)
	return b
}

// bundledFS copies the bundled tree into memory, for tests that change a file of it.
func bundledFS(t testing.TB) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(os.DirFS(bundledDir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(os.DirFS(bundledDir), p)
		m[p] = &fstest.MapFile{Data: data}
		return err
	})
	require.NoError(t, err)
	return m
}

func hw(profile string) recipe.Hardware { return recipe.Hardware{Profile: profile} }

// The issue's three examples, asserted whole.
func TestDeriveIssueExamples(t *testing.T) {
	b := bundled(t)
	tests := []struct {
		name string
		req  recipe.Request
		want v1alpha1.ModelMaster
	}{{
		name: "Qwen3-32B on an H100 node: TP 1 with the hermes and qwen3 parsers",
		req:  recipe.Request{ModelID: "Qwen/Qwen3-32B", Hardware: hw("h100")},
		want: master("qwen3-32b-h100", v1alpha1.ModelMasterSpec{
			Runtime: v1alpha1.RuntimeVLLM,
			Model:   "Qwen/Qwen3-32B",
			Image:   "vllm/vllm-openai:v0.27.1",
			Args: []string{
				"--tensor-parallel-size", "1",
				"--enable-auto-tool-choice", "--tool-call-parser", "hermes",
				"--reasoning-parser", "qwen3",
			},
			ToolCallParser:       "hermes",
			ReasoningParser:      "qwen3",
			Variant:              "default",
			Precision:            "bf16",
			TensorParallelSize:   1,
			PipelineParallelSize: 1,
			PerReplicaGPUCount:   1,
			HardwareProfile:      "h100",
			Source: &v1alpha1.MasterSource{Recipe: "Qwen/Qwen3-32B", Strategy: "single_node_tp",
				Features: []string{"reasoning", "tool_calling"}, Nodes: 1},
		}),
	}, {
		name: "Llama-3.3-70B-Instruct on H200: 170 GB does not fit one 141 GB GPU, so TP 8",
		req:  recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Hardware: hw("h200")},
		want: master("llama-3.3-70b-instruct-h200", v1alpha1.ModelMasterSpec{
			Runtime: v1alpha1.RuntimeVLLM,
			Model:   "meta-llama/Llama-3.3-70B-Instruct",
			Image:   "vllm/vllm-openai:v0.27.1",
			Args: []string{
				"--tensor-parallel-size", "8",
				"--async-scheduling", "--no-enable-prefix-caching", "--max-num-batched-tokens", "8192",
			},
			Variant:              "default",
			Precision:            "bf16",
			TensorParallelSize:   8,
			PipelineParallelSize: 1,
			PerReplicaGPUCount:   8,
			HardwareProfile:      "h200",
			Source:               &v1alpha1.MasterSource{Recipe: "meta-llama/Llama-3.3-70B-Instruct", Strategy: "single_node_tp", Nodes: 1},
		}),
	}, {
		name: "Kimi-K2-Instruct on H200: 1200 GB over two nodes of 8, TP 16",
		req:  recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: hw("h200")},
		want: master("kimi-k2-instruct-h200", v1alpha1.ModelMasterSpec{
			Runtime: v1alpha1.RuntimeVLLM,
			Model:   "moonshotai/Kimi-K2-Instruct",
			Image:   "vllm/vllm-openai:v0.27.1",
			Args: []string{
				"--trust-remote-code", "--tokenizer-mode", "auto",
				"--tensor-parallel-size", "16",
				"--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2",
			},
			Env: []v1alpha1.EnvVar{
				{Name: "GLOO_SOCKET_IFNAME", Value: "$IFACE_NAME"},
				{Name: "NCCL_SOCKET_IFNAME", Value: "$IFACE_NAME"},
			},
			ToolCallParser:       "kimi_k2",
			Variant:              "default",
			Precision:            "fp8",
			TensorParallelSize:   16,
			PipelineParallelSize: 1,
			PerReplicaGPUCount:   16,
			HardwareProfile:      "h200",
			Source: &v1alpha1.MasterSource{Recipe: "moonshotai/Kimi-K2-Instruct", Strategy: "multi_node_tp",
				Features: []string{"tool_calling"}, Nodes: 2},
		}),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Derive(tc.req)
			require.NoError(t, err)
			assert.Equal(t, &tc.want, got)
		})
	}
}

func master(name string, spec v1alpha1.ModelMasterSpec) v1alpha1.ModelMaster {
	m := v1alpha1.ModelMaster{Spec: spec}
	m.APIVersion, m.Kind, m.Name = v1alpha1.APIVersion, v1alpha1.KindModelMaster, name
	return m
}

// The five recipes the first version was built on x each of their variants on h100 and h200,
// with the layout the rules give (conformance_test.go covers the whole corpus).
func TestDeriveEveryBundledRecipe(t *testing.T) {
	b := bundled(t)
	type layout struct {
		tp, nodes int32
		strategy  string
		err       string // a message fragment when the variant cannot run there
	}
	tp := func(n int32) layout { return layout{tp: n, nodes: 1, strategy: "single_node_tp"} }
	multi := func(nodes int32) layout { return layout{tp: 8 * nodes, nodes: nodes, strategy: "multi_node_tp"} }
	fp4 := layout{err: "(precision nvfp4) needs NVIDIA blackwell GPUs"}
	want := map[string]map[string][2]layout{ // recipe -> variant -> {h100, h200}
		"Qwen/Qwen3-32B": {
			"default": {tp(1), tp(1)}, // 77 GB fits one 80 GB GPU
			"fp8":     {tp(1), tp(1)},
			"awq":     {tp(1), tp(1)},
		},
		"meta-llama/Llama-3.3-70B-Instruct": {
			"default": {tp(8), tp(8)}, // 170 GB: more than one GPU, so the whole node
			"fp8":     {tp(8), tp(1)}, // 84 GB: > 80, <= 141
			"nvfp4":   {fp4, fp4},
		},
		"moonshotai/Kimi-K2-Instruct": {
			"default": {multi(2), multi(2)}, // 1200 GB > 640 and > 1128
		},
		"deepseek-ai/DeepSeek-R1": {
			"default": {multi(2), tp(8)}, // 805 GB > 640, <= 1128
			"r1_0528": {multi(2), tp(8)},
			"nvfp4":   {fp4, fp4},
		},
		"openai/gpt-oss-120b": {
			"default": {tp(8), tp(1)}, // 96 GB > 80, <= 141
			"amd_fp8": {tp(1), tp(1)}, // 80 GB fits one 80 GB GPU
		},
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		r, _, ok := b.Model(id)
		require.True(t, ok)
		require.ElementsMatch(t, r.Variants.Keys, slices.Collect(maps.Keys(want[id])), "variants of %s", id)
		for _, variant := range r.Variants.Keys {
			for i, profile := range []string{"h100", "h200"} {
				exp := want[id][variant][i]
				t.Run(id+"/"+variant+"/"+profile, func(t *testing.T) {
					m, err := b.Derive(recipe.Request{ModelID: id, Variant: variant, Hardware: hw(profile)})
					if exp.err != "" {
						require.Equal(t, recipe.ReasonUnsupportedHardware, recipe.Reason(err), "%v", err)
						assert.ErrorContains(t, err, exp.err)
						return
					}
					require.NoError(t, err)
					s := m.Spec
					assert.Equal(t, exp.tp, s.TensorParallelSize, "TP")
					assert.Equal(t, int32(1), s.PipelineParallelSize, "PP")
					assert.Equal(t, exp.nodes, s.Source.Nodes, "nodes")
					assert.Equal(t, exp.strategy, s.Source.Strategy, "strategy")
					checkInvariants(t, b, m, variant, profile)
				})
			}
		}
	}
}

// checkInvariants asserts what holds for every derived master.
func checkInvariants(t *testing.T, b *recipe.Book, m *v1alpha1.ModelMaster, variant, profile string) {
	t.Helper()
	s := m.Spec
	r, _, _ := b.Model(s.Source.Recipe)
	v := r.Variants.Values[variant]

	wantModel := v.ModelID
	if wantModel == "" {
		wantModel = r.Model.ModelID
	}
	assert.Equal(t, wantModel, s.Model)
	assert.Equal(t, v1alpha1.RuntimeVLLM, s.Runtime)
	assert.Equal(t, v1alpha1.DefaultVLLMImage, s.Image)
	assert.Equal(t, variant, s.Variant)
	assert.Equal(t, v.Precision, s.Precision)
	assert.Equal(t, profile, s.HardwareProfile)
	assert.Equal(t, s.TensorParallelSize*s.PipelineParallelSize, s.PerReplicaGPUCount, "perReplicaGPUCount = TP x PP")
	if s.Source.Nodes > 1 {
		assert.Equal(t, s.Source.Nodes*8, s.PerReplicaGPUCount, "multi-node replicas take whole nodes")
	}

	// The parallel flag is in the args, the launcher flags are not, and no flag repeats.
	got, ok := vllmargs.Value(s.Args, "--tensor-parallel-size")
	assert.True(t, ok)
	assert.Equal(t, strconv.Itoa(int(s.TensorParallelSize)), got)
	seen := map[string]bool{}
	for _, a := range s.Args {
		for _, f := range []string{"--nnodes", "--node-rank", "--master-addr", "--headless", "serve"} {
			assert.NotEqual(t, f, a, "launcher flag in the master's args")
		}
		if strings.HasPrefix(a, "-") {
			flag, _, _ := strings.Cut(a, "=")
			assert.False(t, seen[flag], "flag %s twice in %v", flag, s.Args)
			seen[flag] = true
		}
	}
	assert.Equal(t, s.Args, vllmargs.Merge(s.Args), "args are already deduplicated")

	// Parsers are read from the args.
	tool, _ := vllmargs.Value(s.Args, "--tool-call-parser")
	reasoning, _ := vllmargs.Value(s.Args, "--reasoning-parser")
	assert.Equal(t, tool, s.ToolCallParser)
	assert.Equal(t, reasoning, s.ReasoningParser)

	// Default features: every feature but the opt-in ones, sorted.
	var wantFeatures []string
	for _, f := range r.Features.Keys {
		if !slices.Contains(r.OptInFeatures, f) {
			wantFeatures = append(wantFeatures, f)
		}
	}
	slices.Sort(wantFeatures)
	assert.Equal(t, wantFeatures, s.Source.Features)

	assert.Empty(t, validation.IsDNS1123Subdomain(m.Name), m.Name)
	assert.Empty(t, validation.IsValidLabelValue(m.Name), m.Name)
	assert.NotContains(t, m.Name, "-default-", "the default variant is left out of the name")

	again, err := b.Derive(recipe.Request{ModelID: s.Source.Recipe, Variant: variant, Hardware: hw(profile)})
	require.NoError(t, err)
	assert.Equal(t, m, again, "derivation is deterministic")
}

// Whole argument lists and env for the cases where the sources interact.
func TestDeriveArgsAndEnv(t *testing.T) {
	b := bundled(t)
	tests := []struct {
		name     string
		req      recipe.Request
		args     []string
		env      []v1alpha1.EnvVar
		features []string
	}{{
		name: "Qwen3-32B awq adds the variant's --quantization awq before the features",
		req:  recipe.Request{ModelID: "Qwen/Qwen3-32B", Variant: "awq", Hardware: hw("h100")},
		args: []string{"--quantization", "awq", "--tensor-parallel-size", "1",
			"--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"},
		features: []string{"reasoning", "tool_calling"},
	}, {
		name: "Llama fp8 on H100: variant args, TP 8, then the hopper override",
		req:  recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Variant: "fp8", Hardware: hw("h100")},
		args: []string{"--kv-cache-dtype", "fp8", "--tensor-parallel-size", "8",
			"--async-scheduling", "--no-enable-prefix-caching", "--max-num-batched-tokens", "8192"},
	}, {
		name: "DeepSeek-R1 on H200 gets the hopper env and both parser features",
		req:  recipe.Request{ModelID: "deepseek-ai/DeepSeek-R1", Hardware: hw("h200")},
		args: []string{"--trust-remote-code", "--enable-expert-parallel", "--tensor-parallel-size", "8",
			"--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3",
			"--chat-template", "examples/tool_chat_template_deepseekr1.jinja",
			"--reasoning-parser", "deepseek_r1"},
		env:      []v1alpha1.EnvVar{{Name: "VLLM_USE_FLASHINFER_MOE_FP8", Value: "1"}},
		features: []string{"reasoning", "tool_calling"},
	}, {
		name: "DeepSeek-R1 on H100 spans two nodes: strategy env, then the hopper env",
		req:  recipe.Request{ModelID: "deepseek-ai/DeepSeek-R1", Hardware: hw("h100"), Features: map[string]bool{"reasoning": false}},
		args: []string{"--trust-remote-code", "--enable-expert-parallel",
			"--tensor-parallel-size", "16",
			"--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3",
			"--chat-template", "examples/tool_chat_template_deepseekr1.jinja"},
		env: []v1alpha1.EnvVar{
			{Name: "GLOO_SOCKET_IFNAME", Value: "$IFACE_NAME"},
			{Name: "NCCL_SOCKET_IFNAME", Value: "$IFACE_NAME"},
			{Name: "VLLM_USE_FLASHINFER_MOE_FP8", Value: "1"},
		},
		features: []string{"tool_calling"},
	}, {
		name:     "gpt-oss-120b: the opt-in spec_decoding feature is off by default",
		req:      recipe.Request{ModelID: "openai/gpt-oss-120b", Hardware: hw("h200")},
		args:     []string{"--tensor-parallel-size", "1", "--tool-call-parser", "openai", "--enable-auto-tool-choice"},
		features: []string{"tool_calling"},
	}, {
		name: "gpt-oss-120b: spec_decoding on when asked for",
		req:  recipe.Request{ModelID: "openai/gpt-oss-120b", Hardware: hw("h200"), Features: map[string]bool{"spec_decoding": true}},
		args: []string{"--tensor-parallel-size", "1", "--tool-call-parser", "openai", "--enable-auto-tool-choice",
			"--speculative-config", `{"model":"nvidia/gpt-oss-120b-Eagle3-v3","num_speculative_tokens":7,"method":"eagle3","draft_tensor_parallel_size":1}`},
		features: []string{"spec_decoding", "tool_calling"},
	}, {
		name:     "Qwen3-32B with both features off has no parsers",
		req:      recipe.Request{ModelID: "Qwen/Qwen3-32B", Hardware: hw("h200"), Features: map[string]bool{"reasoning": false, "tool_calling": false}},
		args:     []string{"--tensor-parallel-size", "1"},
		features: nil,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := b.Derive(tc.req)
			require.NoError(t, err)
			assert.Equal(t, tc.args, m.Spec.Args)
			assert.Equal(t, tc.env, m.Spec.Env)
			assert.Equal(t, tc.features, m.Spec.Source.Features)
			tool, _ := vllmargs.Value(tc.args, "--tool-call-parser")
			assert.Equal(t, tool, m.Spec.ToolCallParser)
		})
	}
}

// A recipe whose sources repeat flags: later sources win, in the position of the last one.
func TestDeriveLastWinsDedupe(t *testing.T) {
	fsys := bundledFS(t)
	fsys["models/acme/Dup-7B.yaml"] = &fstest.MapFile{Data: []byte(`
model:
  model_id: acme/Dup-7B
  base_args: ["--max-model-len", "4096", "--enforce-eager", "--gpu-memory-utilization=0.8"]
  base_env: {A: "base", B: "base"}
features:
  tool_calling:
    args: ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
  long_context:
    args: ["--max-model-len", "32768"]
variants:
  default:
    precision: bf16
    vram_minimum_gb: 14
    extra_args: ["--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--tool-call-parser", "pythonic"]
    extra_env: {B: "variant", C: "variant"}
compatible_strategies: [single_node_tp]
hardware_overrides:
  hopper:
    extra_args: ["--enforce-eager", "--gpu-memory-utilization=0.95"]
    extra_env: {A: "hopper"}
strategy_overrides:
  single_node_tp:
    tp: 2
`)}
	b, err := recipe.Load(fsys)
	require.NoError(t, err)
	m, err := b.Derive(recipe.Request{ModelID: "acme/Dup-7B", Hardware: hw("h100")})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"--tensor-parallel-size", "2", // strategy_overrides.single_node_tp.tp, not the fit rule's 1
		"--enforce-eager", "--gpu-memory-utilization=0.95", // hopper overrides base and variant
		"--enable-auto-tool-choice", "--tool-call-parser", "hermes", // the feature overrides the variant
		"--max-model-len", "32768", // the last feature wins over base and variant
	}, m.Spec.Args)
	assert.Equal(t, []v1alpha1.EnvVar{{Name: "A", Value: "hopper"}, {Name: "B", Value: "variant"}, {Name: "C", Value: "variant"}}, m.Spec.Env)
	assert.Equal(t, int32(2), m.Spec.PerReplicaGPUCount)
	assert.Equal(t, "hermes", m.Spec.ToolCallParser)
}

// Node types and forced node counts change the layout; the name says so.
func TestDeriveLayouts(t *testing.T) {
	b := bundled(t)
	tests := []struct {
		name         string
		req          recipe.Request
		tp, pp, gpus int32
		nodes        int32
		strategy     string
		nameHasHash  bool
		wantName     string
	}{{
		name: "a node type of the taxonomy's shape keeps the plain name",
		req:  recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Hardware: recipe.Hardware{Profile: "h200", GPUsPerNode: 8, GPUMemoryGB: 141}},
		tp:   8, pp: 1, gpus: 8, nodes: 1, strategy: "single_node_tp", wantName: "llama-3.3-70b-instruct-h200",
	}, {
		name: "a 4-GPU h100 node gives Llama the whole node: TP 4",
		req:  recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Hardware: recipe.Hardware{Profile: "h100", GPUsPerNode: 4}},
		tp:   4, pp: 1, gpus: 4, nodes: 1, strategy: "single_node_tp", nameHasHash: true,
	}, {
		name: "a 4-GPU h100 node changes nothing for a one-GPU model",
		req:  recipe.Request{ModelID: "Qwen/Qwen3-32B", Variant: "fp8", Hardware: recipe.Hardware{Profile: "h100", GPUsPerNode: 4}},
		tp:   1, pp: 1, gpus: 1, nodes: 1, strategy: "single_node_tp", wantName: "qwen3-32b-fp8-h100",
	}, {
		name: "Kimi on 4-GPU h200 nodes needs three of them (1200 GB > 2 x 564)",
		req:  recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: recipe.Hardware{Profile: "h200", GPUsPerNode: 4}},
		tp:   12, pp: 1, gpus: 12, nodes: 3, strategy: "multi_node_tp", nameHasHash: true,
	}, {
		name: "Kimi forced onto three nodes",
		req:  recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: hw("h200"), Nodes: 3},
		tp:   24, pp: 1, gpus: 24, nodes: 3, strategy: "multi_node_tp", nameHasHash: true,
	}, {
		name: "Kimi asked for its automatic layout explicitly keeps the plain name",
		req:  recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: hw("h200"), Nodes: 2, Strategy: "multi_node_tp"},
		tp:   16, pp: 1, gpus: 16, nodes: 2, strategy: "multi_node_tp", wantName: "kimi-k2-instruct-h200",
	}, {
		name: "Qwen on two nodes picks the multi-node strategy",
		req:  recipe.Request{ModelID: "Qwen/Qwen3-32B", Hardware: hw("h100"), Nodes: 2},
		tp:   16, pp: 1, gpus: 16, nodes: 2, strategy: "multi_node_tp", nameHasHash: true,
	}, {
		name: "Qwen with strategy multi_node_tp spans two nodes by default",
		req:  recipe.Request{ModelID: "Qwen/Qwen3-32B", Hardware: hw("h100"), Strategy: "multi_node_tp"},
		tp:   16, pp: 1, gpus: 16, nodes: 2, strategy: "multi_node_tp", nameHasHash: true,
	}, {
		name: "a variant's checkpoint id selects the recipe and the variant",
		req:  recipe.Request{ModelID: "Qwen/Qwen3-32B-FP8", Hardware: hw("h100")},
		tp:   1, pp: 1, gpus: 1, nodes: 1, strategy: "single_node_tp", wantName: "qwen3-32b-fp8-h100",
	}, {
		name: "recipe ids are case-insensitive, as upstream routes them",
		req:  recipe.Request{ModelID: "qwen/qwen3-32b", Hardware: hw("h100")},
		tp:   1, pp: 1, gpus: 1, nodes: 1, strategy: "single_node_tp", wantName: "qwen3-32b-h100",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := b.Derive(tc.req)
			require.NoError(t, err)
			s := m.Spec
			assert.Equal(t, tc.tp, s.TensorParallelSize, "TP")
			assert.Equal(t, tc.pp, s.PipelineParallelSize, "PP")
			assert.Equal(t, tc.gpus, s.PerReplicaGPUCount, "GPUs per replica")
			assert.Equal(t, tc.nodes, s.Source.Nodes, "nodes")
			assert.Equal(t, tc.strategy, s.Source.Strategy)
			v, _ := vllmargs.Value(s.Args, "--tensor-parallel-size")
			assert.Equal(t, strconv.Itoa(int(tc.tp)), v)
			if tc.wantName != "" {
				assert.Equal(t, tc.wantName, m.Name)
			}
			if tc.nameHasHash {
				assert.Regexp(t, `-[0-9a-f]{8}$`, m.Name)
			}
			assert.Empty(t, validation.IsDNS1123Subdomain(m.Name))
			assert.Empty(t, validation.IsValidLabelValue(m.Name))
		})
	}
}

// Same asks share a master; different asks never collide.
func TestMasterNames(t *testing.T) {
	b := bundled(t)
	names := map[string]string{} // name -> a description of the spec it stands for
	add := func(req recipe.Request) string {
		m, err := b.Derive(req)
		require.NoError(t, err)
		spec := strings.Join(append(slices.Clone(m.Spec.Args), m.Spec.Model, strconv.Itoa(int(m.Spec.PerReplicaGPUCount)), strings.Join(m.Spec.Source.Features, ",")), " ")
		if prev, ok := names[m.Name]; ok {
			assert.Equal(t, prev, spec, "name %s stands for two different masters", m.Name)
		}
		names[m.Name] = spec
		return m.Name
	}
	qwen := func(f map[string]bool) recipe.Request {
		return recipe.Request{ModelID: "Qwen/Qwen3-32B", Variant: "fp8", Hardware: hw("h100"), Features: f}
	}
	plain := add(qwen(nil))
	assert.Equal(t, "qwen3-32b-fp8-h100", plain)
	assert.Equal(t, plain, add(qwen(map[string]bool{"tool_calling": true})), "asking for a default changes nothing")
	noTools := add(qwen(map[string]bool{"tool_calling": false}))
	noReasoning := add(qwen(map[string]bool{"reasoning": false}))
	assert.NotEqual(t, plain, noTools)
	assert.NotEqual(t, noTools, noReasoning)
	assert.Equal(t, "qwen3-32b-fp8-h100-f7c7669f", noTools, "the name docs/recipes.md shows")
	assert.Equal(t, noTools, add(qwen(map[string]bool{"tool_calling": false})), "stable")
	for _, id := range b.Models() {
		r, _, _ := b.Model(id)
		for _, v := range r.Variants.Keys {
			for _, p := range []string{"h100", "h200"} {
				if _, err := b.Derive(recipe.Request{ModelID: id, Variant: v, Hardware: hw(p)}); err == nil {
					add(recipe.Request{ModelID: id, Variant: v, Hardware: hw(p)})
				}
			}
		}
	}
}

func TestParakeet(t *testing.T) {
	m := recipe.Parakeet()
	assert.Equal(t, "parakeet-tdt-0.6b-v3", m.Name)
	assert.Equal(t, v1alpha1.APIVersion, m.APIVersion)
	assert.Equal(t, v1alpha1.KindModelMaster, m.Kind)
	assert.Equal(t, v1alpha1.ModelMasterSpec{
		Runtime:              v1alpha1.RuntimeParakeet,
		Model:                v1alpha1.ParakeetModel,
		TensorParallelSize:   1,
		PipelineParallelSize: 1,
		PerReplicaGPUCount:   1,
	}, m.Spec)
	assert.Empty(t, validation.IsDNS1123Subdomain(m.Name))
	m.Spec.Args = append(m.Spec.Args, "x")
	assert.Empty(t, recipe.Parakeet().Spec.Args, "each call returns a fresh master")
}

func TestHasAndLookup(t *testing.T) {
	b := bundled(t)
	for _, id := range []string{"Qwen/Qwen3-32B", "qwen/QWEN3-32b", "Qwen/Qwen3-32B-AWQ", "nvidia/Llama-3.3-70B-Instruct-FP8", "moonshotai/Kimi-K2-Instruct"} {
		assert.True(t, b.Has(id), id)
	}
	for _, id := range []string{"", "Qwen/Qwen3-33B", "my-master", "nvidia/parakeet-tdt-0.6b-v3"} {
		assert.False(t, b.Has(id), id)
	}
	_, variant, ok := b.Model("nvidia/Llama-3.3-70B-Instruct-FP8")
	assert.True(t, ok)
	assert.Equal(t, "fp8", variant)
	assert.Equal(t, []string{
		`models/thinkingmachines/Inkling-Small.yaml: model.model_id "thinkingmachines/Inkling-Small-NVFP4" differs from the id its path gives ("thinkingmachines/Inkling-Small"): the recipe is known as "thinkingmachines/Inkling-Small" and serves "thinkingmachines/Inkling-Small-NVFP4"`,
		`models/thinkingmachines/Inkling.yaml: model.model_id "thinkingmachines/Inkling-NVFP4" differs from the id its path gives ("thinkingmachines/Inkling"): the recipe is known as "thinkingmachines/Inkling" and serves "thinkingmachines/Inkling-NVFP4"`,
	}, b.Warnings(), "upstream's recipes whose only checkpoint is quantised")
	assert.True(t, b.Has("thinkingmachines/Inkling-NVFP4"))
}

func TestDeriveErrors(t *testing.T) {
	b := bundled(t)
	extra := bundledFS(t)
	delete(extra, "strategies/multi_node_tp_pp.yaml")
	extra["models/acme/Single-Only.yaml"] = &fstest.MapFile{Data: []byte(`
model: {model_id: acme/Single-Only}
variants: {default: {precision: bf16, vram_minimum_gb: 2000}}
compatible_strategies: [single_node_tp]
`)}
	extra["models/acme/Omni.yaml"] = &fstest.MapFile{Data: []byte(`
meta: {tasks: [omni]}
model: {model_id: acme/Omni}
variants: {default: {precision: bf16, vram_minimum_gb: 20}}
compatible_strategies: [single_node_tp]
`)}
	extra["models/acme/Picky.yaml"] = &fstest.MapFile{Data: []byte(`
meta: {hardware: {h100: unsupported}}
model: {model_id: acme/Picky}
variants:
  default: {precision: bf16, vram_minimum_gb: 20}
  mi: {precision: fp8, vram_minimum_gb: 20, supported_hardware: [mi300x]}
compatible_strategies: [single_node_tp]
`)}
	extra["models/acme/Helper.yaml"] = &fstest.MapFile{Data: []byte(`
model: {model_id: acme/Helper}
features:
  cache: {args: [--kv-transfer-config, "{}"], companion: {label: Cache server, command: cache-server --port 1}}
variants: {default: {precision: bf16, vram_minimum_gb: 20}}
compatible_strategies: [single_node_tp]
`)}
	eb, err := recipe.Load(extra)
	require.NoError(t, err)

	tests := []struct {
		name  string
		book  *recipe.Book
		req   recipe.Request
		kind  string
		field string
		msg   string
	}{
		{"unknown model, with close ids", b, recipe.Request{ModelID: "Qwen/Qwen3-23B", Hardware: hw("h100")},
			recipe.ReasonUnknownModel, "model", `unknown model "Qwen/Qwen3-23B": the recipes tree has no models/Qwen/Qwen3-23B.yaml; did you mean Qwen/Qwen3-32B, Qwen/Qwen3-4B, Qwen/Qwen3-8B?`},
		{"unknown model, nothing close", b, recipe.Request{ModelID: "acme/zzzzzzzzzz", Hardware: hw("h100")},
			recipe.ReasonUnknownModel, "model", `unknown model "acme/zzzzzzzzzz": the recipes tree has no models/acme/zzzzzzzzzz.yaml and no recipe with a close id (173 recipes)`},
		{"unknown model, part of an id", b, recipe.Request{ModelID: "gpt-oss", Hardware: hw("h100")},
			recipe.ReasonUnknownModel, "model", `did you mean openai/gpt-oss-20b, openai/gpt-oss-120b?`},
		{"no model", b, recipe.Request{Hardware: hw("h100")},
			recipe.ReasonUnknownModel, "model", `no model given: name a recipe's model id (e.g. Qwen/Qwen3-32B)`},
		{"unknown variant lists the recipe's", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Variant: "fp9", Hardware: hw("h100")},
			recipe.ReasonUnknownVariant, "variant", `recipe Qwen/Qwen3-32B has no variant "fp9"; its variants: default, fp8, awq; did you mean fp8?`},
		{"checkpoint id and variant disagree", b, recipe.Request{ModelID: "Qwen/Qwen3-32B-FP8", Variant: "awq", Hardware: hw("h100")},
			recipe.ReasonUnknownVariant, "variant", `model Qwen/Qwen3-32B-FP8 is the checkpoint of variant "fp8" of recipe Qwen/Qwen3-32B, but variant "awq" was asked for`},
		{"unknown strategy lists compatible ones", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Strategy: "multi_node_tpp", Hardware: hw("h100")},
			recipe.ReasonUnknownStrategy, "strategy", `unknown strategy "multi_node_tpp"; recipe Qwen/Qwen3-32B is compatible with single_node_tp, multi_node_tp; did you mean multi_node_tep, multi_node_tp, multi_node_dep?`},
		{"incompatible strategy", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Strategy: "single_node_dep", Hardware: hw("h100")},
			recipe.ReasonIncompatibleStrategy, "strategy", `strategy single_node_dep is not compatible with recipe Qwen/Qwen3-32B on h100; compatible: single_node_tp, multi_node_tp`},
		{"strategy in the taxonomy without a file", eb, recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Strategy: "multi_node_tp_pp", Hardware: hw("h100")},
			recipe.ReasonStrategyUnavailable, "strategy", `strategy multi_node_tp_pp is not available in this recipes tree (no strategies/multi_node_tp_pp.yaml); available for recipe meta-llama/Llama-3.3-70B-Instruct: single_node_tp, multi_node_tp`},
		{"pd_cluster is not rendered by inferplane", b, recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Strategy: "pd_cluster", Hardware: hw("h200")},
			recipe.ReasonUnsupportedStrategy, "strategy", `strategy pd_cluster is not rendered by inferplane: disaggregated prefill/decode needs two pools of servers joined by a NIXL KV connector and a vllm-router in front of them, which inferplane does not render yet (docs/recipes.md); use instead: single_node_tp, single_node_tep, single_node_dep, multi_node_tp, multi_node_tp_pp, multi_node_dep, multi_node_tep`},
		{"below the recipe's GPU floor on this hardware (strategy_min_gpus)", b, recipe.Request{ModelID: "moonshotai/Kimi-K3", Strategy: "single_node_tp", Hardware: hw("h100")},
			recipe.ReasonDoesNotFit, "strategy", `strategy single_node_tp needs at least 32 GPUs for recipe moonshotai/Kimi-K3 on h100 (strategy_min_gpus), and one h100 node has 8; usable here: multi_node_tp`},
		{"nodes below the GPU floor", b, recipe.Request{ModelID: "moonshotai/Kimi-K3", Strategy: "multi_node_tp", Nodes: 3, Hardware: hw("h100")},
			recipe.ReasonDoesNotFit, "nodes", `strategy multi_node_tp needs at least 4 nodes of h100 per replica (strategy_min_gpus 32 GPUs;`},
		{"an override's TP that does not fill the nodes (MiniMax-M2's amd TP 2 under multi_node_tp)", b, recipe.Request{ModelID: "MiniMaxAI/MiniMax-M2", Strategy: "multi_node_tp", Hardware: hw("mi300x")},
			recipe.ReasonArgsMismatch, "strategy", `the serving args of recipe MiniMaxAI/MiniMax-M2 with strategy multi_node_tp on 2 mi300x nodes use tensor 2 x pipeline 1 x data 1 = 2 GPUs, not the 16 GPUs of the 2 nodes`},
		{"a base TP that multiplies DEP's ranks past the node", b, recipe.Request{ModelID: "inclusionAI/Ring-2.6-1T", Strategy: "multi_node_dep", Hardware: hw("h200")},
			recipe.ReasonArgsMismatch, "strategy", `use tensor 8 x pipeline 1 x data 16 = 128 GPUs with --data-parallel-size-local 8 on each node, not the 8 GPUs of each of the 2 nodes`},
		{"single-node strategy for a model that needs two nodes", b, recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Strategy: "single_node_tp", Hardware: hw("h200")},
			recipe.ReasonDoesNotFit, "strategy", `does not fit one node with strategy single_node_tp: variant "default" of moonshotai/Kimi-K2-Instruct needs 1200 GB; one h200 node has 8 GPUs x 141 GB = 1128 GB; a multi-node strategy over at least 2 nodes is needed (multi_node_tp, multi_node_tp_pp, multi_node_dep, multi_node_tep available)`},
		{"one node forced for a model that needs two", b, recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Nodes: 1, Hardware: hw("h200")},
			recipe.ReasonDoesNotFit, "nodes", `does not fit 1 node(s): variant "default" of moonshotai/Kimi-K2-Instruct needs 1200 GB; one h200 node has 8 GPUs x 141 GB = 1128 GB, so a replica needs at least 2 nodes`},
		{"single-node strategy on two nodes", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Strategy: "single_node_tp", Nodes: 2, Hardware: hw("h100")},
			recipe.ReasonIncompatibleStrategy, "strategy", `strategy single_node_tp runs on one node, but 2 nodes per replica were asked for`},
		{"multi-node strategy on one node", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Strategy: "multi_node_tp", Nodes: 1, Hardware: hw("h100")},
			recipe.ReasonIncompatibleStrategy, "strategy", `strategy multi_node_tp spans two or more nodes, but 1 node per replica was asked for`},
		{"too many nodes", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Nodes: 17, Hardware: hw("h100")},
			recipe.ReasonDoesNotFit, "nodes", `17 nodes per replica is more than the 16 a replica may span`},
		{"does not fit and the recipe allows no multi-node strategy", eb, recipe.Request{ModelID: "acme/Single-Only", Hardware: hw("h200")},
			recipe.ReasonDoesNotFit, "strategy", `does not fit: variant "default" of acme/Single-Only needs 2000 GB; one h200 node has 8 GPUs x 141 GB = 1128 GB, so a replica needs at least 2 nodes, and recipe acme/Single-Only has no multi-node strategy inferplane can use on h200 (compatible: single_node_tp; usable: single_node_tp)`},
		{"does not fit even on 16 nodes", b, recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: recipe.Hardware{Profile: "h100", GPUsPerNode: 1, GPUMemoryGB: 24}},
			recipe.ReasonDoesNotFit, "nodes", `does not fit: variant "default" of moonshotai/Kimi-K2-Instruct needs 1200 GB; one h100 node has 1 GPUs x 24 GB = 24 GB, so it would span 50 nodes, more than the 16 a replica may`},
		{"a profile that cannot be clustered names the variant that fits", b, recipe.Request{ModelID: "Google/gemma-4-26B-A4B-it", Hardware: hw("rtx_5090")},
			recipe.ReasonDoesNotFit, "nodes", `does not fit: variant "default" of Google/gemma-4-26B-A4B-it needs 64 GB; one rtx_5090 node has 1 GPUs x 32 GB = 32 GB, and rtx_5090 nodes cannot be joined into one deployment (taxonomy: scalable: false); variant "fp8" fits (32 GB)`},
		{"a restricted profile the recipe does not declare", b, recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Hardware: hw("rtx_pro_6000")},
			recipe.ReasonUnsupportedHardware, "hardware", `hardware rtx_pro_6000 is restricted in taxonomy.yaml (offered only for recipes that declare it) and recipe meta-llama/Llama-3.3-70B-Instruct does not list it in meta.hardware (it lists b200,`},
		{"unknown hardware profile lists the taxonomy's", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Hardware: hw("h800")},
			recipe.ReasonUnknownHardware, "hardware", `unknown hardware profile "h800"; taxonomy.yaml defines h100, h200, b200, gb200`},
		{"no hardware profile", b, recipe.Request{ModelID: "Qwen/Qwen3-32B"},
			recipe.ReasonUnknownHardware, "hardware", `no hardware profile given: the node type must name one of the taxonomy's (h100, h200,`},
		{"negative GPUs", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", Hardware: recipe.Hardware{Profile: "h100", GPUsPerNode: -1}},
			recipe.ReasonUnknownHardware, "hardware", `GPUs per node must be 0 (the taxonomy's) to 1024 and GPU memory not negative; got -1 GPUs of 0 GB`},
		{"nvfp4 on hopper", b, recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Variant: "nvfp4", Hardware: hw("h200")},
			recipe.ReasonUnsupportedHardware, "hardware", `variant "nvfp4" of recipe meta-llama/Llama-3.3-70B-Instruct (precision nvfp4) needs NVIDIA blackwell GPUs; hardware h200 is NVIDIA hopper`},
		{"hardware the recipe marks unsupported", eb, recipe.Request{ModelID: "acme/Picky", Hardware: hw("h100")},
			recipe.ReasonUnsupportedHardware, "hardware", `recipe acme/Picky marks hardware h100 unsupported (meta.hardware)`},
		{"a variant for other hardware", eb, recipe.Request{ModelID: "acme/Picky", Variant: "mi", Hardware: hw("h200")},
			recipe.ReasonUnsupportedHardware, "hardware", `variant "mi" of recipe acme/Picky runs only on mi300x, not on h200`},
		{"unknown feature lists the recipe's", b, recipe.Request{ModelID: "openai/gpt-oss-120b", Features: map[string]bool{"reasoning": true}, Hardware: hw("h200")},
			recipe.ReasonUnknownFeature, "features", `unknown feature "reasoning"; recipe openai/gpt-oss-120b has tool_calling (on by default) and spec_decoding (opt-in)`},
		{"a feature on a recipe without any", b, recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Features: map[string]bool{"tool_calling": true}, Hardware: hw("h200")},
			recipe.ReasonUnknownFeature, "features", `unknown feature "tool_calling": recipe meta-llama/Llama-3.3-70B-Instruct has no features`},
		{"features that exclude each other, both asked for", b, recipe.Request{ModelID: "Qwen/Qwen3.5-35B-A3B", Features: map[string]bool{"text_only": true, "encoder_parallel": true}, Hardware: hw("h200")},
			recipe.ReasonUnknownFeature, "features", `features text_only and encoder_parallel of recipe Qwen/Qwen3.5-35B-A3B exclude each other: turn one of them off`},
		{"a mode the feature does not have", b, recipe.Request{ModelID: "deepseek-ai/DeepSeek-V4-Pro", FeatureModes: map[string]string{"spec_decoding": "mpt"}, Hardware: hw("b200")},
			recipe.ReasonUnknownFeature, "featureModes", `feature spec_decoding of recipe deepseek-ai/DeepSeek-V4-Pro has no mode "mpt"; its modes: mtp, dspark; did you mean mtp?`},
		{"a mode of another variant", b, recipe.Request{ModelID: "deepseek-ai/DeepSeek-V4-Pro", FeatureModes: map[string]string{"spec_decoding": "mtp"}, Hardware: hw("b200")},
			recipe.ReasonUnknownFeature, "featureModes", `mode "mtp" of feature spec_decoding of recipe deepseek-ai/DeepSeek-V4-Pro does not run with variant "default" on b200; modes that do: dspark`},
		{"a mode for a feature without modes", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", FeatureModes: map[string]string{"reasoning": "on"}, Hardware: hw("h100")},
			recipe.ReasonUnknownFeature, "featureModes", `feature reasoning of recipe Qwen/Qwen3-32B has no modes: it is only turned on or off`},
		{"a mode for a feature turned off", b, recipe.Request{ModelID: "deepseek-ai/DeepSeek-V4-Pro", Features: map[string]bool{"spec_decoding": false}, FeatureModes: map[string]string{"spec_decoding": "dspark"}, Hardware: hw("b200")},
			recipe.ReasonUnknownFeature, "featureModes", `feature spec_decoding of recipe deepseek-ai/DeepSeek-V4-Pro is turned off, but its mode "dspark" was asked for`},
		{"a feature that needs a companion process", eb, recipe.Request{ModelID: "acme/Helper", Hardware: hw("h100")},
			recipe.ReasonUnsupportedFeature, "features", `feature cache of recipe acme/Helper needs its companion process "Cache server" running beside vllm serve on the node, which inferplane does not render; turn it off (features: {cache: false})`},
		{"unknown KV offload option", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", KVOffload: "simpel", Hardware: hw("h100")},
			recipe.ReasonUnknownKVOffload, "kvOffload", `unknown KV offload option "simpel"; taxonomy.yaml offers simple, offloading_cpu, offloading_fs, lmcache, kv_store_centralized_mooncake, kv_store_distributed_mooncake; did you mean simple?`},
		{"a Mooncake KV store", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", KVOffload: "kv_store_distributed_mooncake", Hardware: hw("h100")},
			recipe.ReasonUnsupportedKVOffload, "kvOffload", `KV offload kv_store_distributed_mooncake is a Mooncake KV-store deployment: it needs a mooncake_master, a shared Mooncake config file and, past one instance, a vllm-router in front, which inferplane does not render; the options inferplane renders here: simple`},
		{"an opt-in option the recipe has not verified", b, recipe.Request{ModelID: "Google/gemma-4-31B-it", KVOffload: "offloading_cpu", Hardware: hw("h100")},
			recipe.ReasonUnsupportedKVOffload, "kvOffload", `KV offload offloading_cpu is offered only for recipes that mark it verified (kv_offload_support), and recipe Google/gemma-4-31B-it does not; the options inferplane renders here: simple`},
		{"an option for single-node strategies only", b, recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", KVOffload: "lmcache", Hardware: hw("h200")},
			recipe.ReasonUnsupportedKVOffload, "kvOffload", `KV offload lmcache runs only under strategy single_node_tp, single_node_tep, single_node_dep, not multi_node_tp; the options inferplane renders here: simple`},
		{"an option with a companion process", b, recipe.Request{ModelID: "Qwen/Qwen3-32B", KVOffload: "lmcache", Hardware: hw("h100")},
			recipe.ReasonUnsupportedKVOffload, "kvOffload", `KV offload lmcache needs its companion process "LMCache Server" running beside vllm serve on the node (uv pip install "lmcache==0.5.1"), which inferplane does not render`},
		{"omni recipes", eb, recipe.Request{ModelID: "acme/Omni", Hardware: hw("h200")},
			recipe.ReasonUnsupportedRecipe, "model", `recipe acme/Omni is a vllm-omni recipe (meta.tasks lists omni): inferplane derives masters for ` + "`vllm serve`" + ` chat and completion models only, not ` + "`vllm serve --omni`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.book.Derive(tc.req)
			require.Error(t, err)
			assert.Nil(t, m)
			assert.Equal(t, tc.kind, recipe.Reason(err), "%v", err)
			assert.ErrorContains(t, err, tc.msg)
			assert.Equal(t, tc.field, recipe.Field(err))
		})
	}
}

// Strategies the bundled tree has no file for, as the upstream tree defines them.
func TestDeriveOtherStrategies(t *testing.T) {
	fsys := bundledFS(t)
	set("strategies/multi_node_tp_pp.yaml", "name: multi_node_tp_pp\ndeploy_type: multi_node\nparallelism: tp_pp\nparallel_flag: --tensor-parallel-size\nenv: {NCCL_SOCKET_IFNAME: $IFACE_NAME}\n")(fsys)
	set("strategies/single_node_tep.yaml", "name: single_node_tep\ndeploy_type: single_node\nvllm_args: [--enable-expert-parallel]\nparallel_flag: --tensor-parallel-size\n")(fsys)
	set("strategies/single_node_dep.yaml", "name: single_node_dep\ndeploy_type: single_node\nvllm_args: [--enable-expert-parallel]\nparallel_flag: --data-parallel-size\n")(fsys)
	b, err := recipe.Load(fsys)
	require.NoError(t, err)
	tests := []struct {
		name         string
		req          recipe.Request
		args         []string
		tp, pp, gpus int32
		nodes        int32
	}{{
		name: "TP inside the node, PP across two",
		req:  recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Strategy: "multi_node_tp_pp", Hardware: hw("h100")},
		args: []string{"--tensor-parallel-size", "8", "--pipeline-parallel-size", "2",
			"--async-scheduling", "--no-enable-prefix-caching", "--max-num-batched-tokens", "8192"},
		tp: 8, pp: 2, gpus: 16, nodes: 2,
	}, {
		name: "single-node TEP takes the whole node even where one GPU would do",
		req:  recipe.Request{ModelID: "deepseek-ai/DeepSeek-R1", Strategy: "single_node_tep", Hardware: hw("h200"), Features: map[string]bool{"tool_calling": false, "reasoning": false}},
		args: []string{"--trust-remote-code", "--enable-expert-parallel", "--tensor-parallel-size", "8"},
		tp:   8, pp: 1, gpus: 8, nodes: 1,
	}, {
		name: "single-node DEP: data parallel over the node, TP 1",
		req:  recipe.Request{ModelID: "deepseek-ai/DeepSeek-R1", Strategy: "single_node_dep", Hardware: hw("h200"), Features: map[string]bool{"tool_calling": false, "reasoning": false}},
		args: []string{"--trust-remote-code", "--enable-expert-parallel", "--data-parallel-size", "8"},
		tp:   1, pp: 1, gpus: 8, nodes: 1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := b.Derive(tc.req)
			require.NoError(t, err)
			s := m.Spec
			assert.Equal(t, tc.args, s.Args)
			assert.Equal(t, tc.tp, s.TensorParallelSize, "TP")
			assert.Equal(t, tc.pp, s.PipelineParallelSize, "PP")
			assert.Equal(t, tc.gpus, s.PerReplicaGPUCount)
			assert.Equal(t, tc.nodes, s.Source.Nodes)
			assert.Equal(t, tc.req.Strategy, s.Source.Strategy)
		})
	}
}
