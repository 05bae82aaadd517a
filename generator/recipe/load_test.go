package recipe_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/generator/recipe"
)

const goodModel = `
model:
  model_id: acme/Good-7B
variants:
  default: {precision: bf16, vram_minimum_gb: 14}
compatible_strategies: [single_node_tp]
`

func TestLoadBundled(t *testing.T) {
	b := bundled(t)
	assert.Len(t, b.Models(), 173, "upstream's whole corpus at 8959cf6 (recipes/PROVENANCE.md)")
	assert.Subset(t, b.Models(), []string{
		"Qwen/Qwen3-32B",
		"deepseek-ai/DeepSeek-R1",
		"meta-llama/Llama-3.3-70B-Instruct",
		"moonshotai/Kimi-K2-Instruct",
		"openai/gpt-oss-120b",
	})
	assert.Equal(t, []string{"multi_node_dep", "multi_node_tep", "multi_node_tp", "multi_node_tp_dp", "multi_node_tp_pp",
		"pd_cluster", "single_node_dep", "single_node_tep", "single_node_tp"}, b.Strategies())
	assert.Equal(t, []string{"simple", "offloading_cpu", "offloading_fs", "lmcache"}, b.Taxonomy().KVOffload.Keys)
	r, _, ok := b.Model("openai/gpt-oss-120b")
	require.True(t, ok)
	assert.Equal(t, "models/openai/gpt-oss-120b.yaml", r.File)
	assert.Equal(t, []string{"tool_calling", "spec_decoding"}, r.Features.Keys, "features keep the recipe's order")
	assert.Equal(t, []string{"default", "amd_fp8"}, r.Variants.Keys)
	assert.Equal(t, "moe", r.Model.Architecture)
	assert.Equal(t, int64(131072), r.Model.ContextLength)
	amd := r.HardwareOverrides["amd"]
	assert.Equal(t, []string{"VLLM_ROCM_USE_AITER", "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION", "HSA_NO_SCRATCH_RECLAIM", "AMDGCN_USE_BUFFER_OPS"}, amd.ExtraEnv.Keys)
	s, ok := b.Strategy("multi_node_tp")
	require.True(t, ok)
	assert.Equal(t, "multi_node", s.DeployType)
	assert.Equal(t, "--tensor-parallel-size", s.ParallelFlag)
	h200, ok := b.Taxonomy().HardwareProfiles.Get("h200")
	require.True(t, ok)
	assert.Equal(t, int64(8), h200.GPUCount)
	assert.Equal(t, recipe.Generation("hopper"), h200.Generation)
}

// Each broken tree is the bundled one with one file replaced; the error names file and field.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(fstest.MapFS)
		probs []problem.Problem
	}{{
		name:  "malformed YAML",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B\nvariants: ["),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "", "malformed YAML: line 1: did not find expected ',' or '}'", "")},
	}, {
		name: "a number written as a word",
		edit: set("models/acme/Good-7B.yaml", `
model: {model_id: acme/Good-7B}
variants:
  default: {precision: bf16, vram_minimum_gb: lots}
`),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "variants.default.vram_minimum_gb", `expected a number, got string "lots" (line 4)`, "")},
	}, {
		name: "args that are not a list",
		edit: set("models/acme/Good-7B.yaml", `
model: {model_id: acme/Good-7B, base_args: "--trust-remote-code"}
variants: {default: {precision: bf16}}
`),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "model.base_args", `expected a list of arguments, got string "--trust-remote-code" (line 2)`, "")},
	}, {
		name: "an argument that is a mapping",
		edit: set("models/acme/Good-7B.yaml", `
model: {model_id: acme/Good-7B}
variants: {default: {precision: bf16, extra_args: ["--x", {a: b}]}}
`),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "variants.default.extra_args[1]", `expected an argument string, got a mapping (line 3)`, "")},
	}, {
		name:  "model_id missing",
		edit:  set("models/acme/Good-7B.yaml", "model: {architecture: dense}\nvariants: {default: {precision: bf16}}\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "model.model_id", "is required but missing (line 1)", "")},
	}, {
		name:  "model block missing",
		edit:  set("models/acme/Good-7B.yaml", "variants: {default: {precision: bf16}}\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "model", "is required but missing (line 1)", "")},
	}, {
		name:  "variants missing",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B}\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "variants", "is required but missing (line 1)", "")},
	}, {
		name:  "variants empty",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B}\nvariants: {}\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "variants", "is empty", "at least one variant (e.g. default)")},
	}, {
		name:  "variants null",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B}\nvariants:\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "variants", "is required but empty (line 2)", "")},
	}, {
		name:  "a duplicate key",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B}\nvariants: {default: {precision: bf16}}\nvariants: {}\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "variants", "duplicate key (line 3)", "")},
	}, {
		name:  "an empty file",
		edit:  set("models/acme/Good-7B.yaml", "# nothing yet\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "", "file is empty", "a YAML mapping")},
	}, {
		name:  "two documents",
		edit:  set("models/acme/Good-7B.yaml", goodModel+"---\n"+goodModel),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "", "malformed YAML: expected one document, found a second one at line 7", "")},
	}, {
		name:  "a file outside models/<org>/<repo>.yaml",
		edit:  set("models/Good-7B.yaml", goodModel),
		probs: []problem.Problem{prob("models/Good-7B.yaml", "", "is not where a recipe file goes", "models/<org>/<repo>.yaml")},
	}, {
		name:  "a strategy the taxonomy does not know",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B}\nvariants: {default: {precision: bf16}}\ncompatible_strategies: [single_node_tp, warp_drive]\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "compatible_strategies[1]", `names unknown strategy "warp_drive"`, "a strategy of taxonomy.yaml (multi_node_dep, multi_node_tep, multi_node_tp, multi_node_tp_dp, multi_node_tp_pp, pd_cluster, single_node_dep, single_node_tep, single_node_tp)")},
	}, {
		name:  "an opt-in feature the recipe does not have",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B}\nvariants: {default: {precision: bf16}}\nopt_in_features: [mtp]\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "opt_in_features[0]", `names unknown feature "mtp"`, "one of the recipe's features ()")},
	}, {
		name:  "a tp of zero",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B}\nvariants: {default: {precision: bf16, tp: {h100: 0}}}\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "variants.default.tp.h100", "is 0", "a whole number of at least 1")},
	}, {
		name: "two files for one model id",
		edit: func(m fstest.MapFS) {
			m["models/acme/Good-7B.yaml"] = &fstest.MapFile{Data: []byte(goodModel)}
			m["models/ACME/good-7b.yaml"] = &fstest.MapFile{Data: []byte(goodModel)}
		},
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "", `model "acme/Good-7B" is also defined in models/ACME/good-7b.yaml (ids are case-insensitive)`, "one file per model id")},
	}, {
		name:  "a strategy whose name is not its file's",
		edit:  set("strategies/single_node_tp.yaml", "name: single_node\ndeploy_type: single_node\n"),
		probs: []problem.Problem{prob("strategies/single_node_tp.yaml", "name", `is "single_node"`, `"single_node_tp", the file's name`)},
	}, {
		name:  "a strategy without deploy_type",
		edit:  set("strategies/single_node_tp.yaml", "name: single_node_tp\n"),
		probs: []problem.Problem{prob("strategies/single_node_tp.yaml", "deploy_type", "is required but missing (line 1)", "")},
	}, {
		name:  "no taxonomy",
		edit:  func(m fstest.MapFS) { delete(m, "taxonomy.yaml") },
		probs: []problem.Problem{prob("taxonomy.yaml", "", "missing: the recipes tree has no taxonomy", "the upstream vllm-project/recipes layout: models/<org>/<repo>.yaml, strategies/*.yaml, taxonomy.yaml")},
	}, {
		name:  "a profile without GPUs",
		edit:  set("taxonomy.yaml", "hardware_profiles:\n  h100: {brand: NVIDIA, generation: hopper, gpu_count: 0, vram_gb: 640}\nstrategies: [single_node_tp, multi_node_tp]\n"),
		probs: []problem.Problem{prob("taxonomy.yaml", "hardware_profiles.h100.gpu_count", "is 0", "a whole number from 1 to 1024")},
	}, {
		name:  "a profile's generation written as a mapping",
		edit:  set("taxonomy.yaml", "hardware_profiles:\n  h100: {brand: NVIDIA, generation: {a: b}, gpu_count: 8, vram_gb: 640}\n"),
		probs: []problem.Problem{prob("taxonomy.yaml", "hardware_profiles.h100.generation", "expected a string, got a mapping (line 2)", "")},
	}, {
		name:  "a bad docker_image",
		edit:  set("models/acme/Good-7B.yaml", "model: {model_id: acme/Good-7B, docker_image: {rocm7: x}}\nvariants: {default: {precision: bf16}}\n"),
		probs: []problem.Problem{prob("models/acme/Good-7B.yaml", "model.docker_image", "expected a map by brand (nvidia, amd, tpu, intel) or by CUDA version (cu129, cu130) (line 1)", "")},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := bundledFS(t)
			tc.edit(fsys)
			b, err := recipe.Load(fsys)
			require.Error(t, err)
			assert.Nil(t, b)
			assert.Equal(t, tc.probs, problem.Problems(err))
		})
	}
}

// prob is the problem the loader reports: file, field, message (ending in " (line N)" when it
// is at a line), what was expected.
func prob(file, path, message, expected string) problem.Problem {
	line := 0
	if m := lineRE.FindStringSubmatch(message); m != nil {
		line, _ = strconv.Atoi(m[1])
		message = strings.TrimSuffix(message, m[0])
	}
	if expected != "" {
		message += "; expected " + expected
	}
	return problem.Problem{File: file, Line: line, Err: &field.Error{Type: field.ErrorTypeInvalid, Field: path, BadValue: field.OmitValueType{}, Detail: message}}
}

var lineRE = regexp.MustCompile(` \(line (\d+)\)$`)

func set(file, content string) func(fstest.MapFS) {
	return func(m fstest.MapFS) { m[file] = &fstest.MapFile{Data: []byte(content)} }
}

// One run reports every problem of the tree, sorted by file.
func TestLoadReportsEveryProblem(t *testing.T) {
	fsys := bundledFS(t)
	set("models/acme/A.yaml", "model: {model_id: acme/A}\n")(fsys)
	set("models/acme/B.yaml", "model: {model_id: acme/B}\nvariants: {default: {vram_minimum_gb: [1]}}\n")(fsys)
	_, err := recipe.Load(fsys)
	require.Error(t, err)
	probs := problem.Problems(err)
	require.Len(t, probs, 2)
	assert.Equal(t, "models/acme/A.yaml", probs[0].File)
	assert.Equal(t, "models/acme/B.yaml", probs[1].File)
	assert.Equal(t, "variants.default.vram_minimum_gb", probs[1].Err.Field)
	assert.Contains(t, err.Error(), "2 problems:")
}

// Upstream evolves: keys we do not know are read past, wherever they are.
func TestLoadIgnoresUnknownKeys(t *testing.T) {
	fsys := bundledFS(t)
	set("models/acme/Good-7B.yaml", `
future_top_level_key: {anything: [1, 2]}
meta: {title: Good, new_meta: true}
model:
  model_id: acme/Good-7B
  brand_new: 42
  base_args: [--max-model-len, 8192]
  base_env: {HF_HUB_OFFLINE: 1}
variants:
  default: {precision: bf16, vram_minimum_gb: 14, label: "Default", future: {x: y}}
compatible_strategies: [single_node_tp]
guide: |
  Long prose.
`)(fsys)
	set("README.md", "not YAML at all: [")(fsys)
	set("models/acme/notes.txt", "also ignored")(fsys)
	b, err := recipe.Load(fsys)
	require.NoError(t, err)
	m, err := b.Derive(recipe.Request{ModelID: "acme/Good-7B", Hardware: hw("h100")})
	require.NoError(t, err)
	assert.Equal(t, []string{"--max-model-len", "8192", "--tensor-parallel-size", "1"}, m.Spec.Args)
	assert.Equal(t, "1", m.Spec.Env[0].Value, "an unquoted number is kept as written")
	assert.Equal(t, "good-7b-h100", m.Name)
}

// A recipe whose model_id differs from its path loads (upstream has such files) with a warning.
func TestLoadWarnsOnPathMismatch(t *testing.T) {
	fsys := bundledFS(t)
	for name := range fsys {
		if strings.HasPrefix(name, "models/thinkingmachines/") {
			delete(fsys, name) // upstream's own two cases, asserted in TestHasAndLookup
		}
	}
	set("models/acme/Good-7B.yaml", goodModel)(fsys)
	set("models/acme/Other.yaml", "model: {model_id: acme/Other-NVFP4}\nvariants: {default: {precision: bf16}}\n")(fsys)
	set("models/Acme/Cased.yaml", "model: {model_id: acme/cased}\nvariants: {default: {precision: bf16}}\n")(fsys)
	b, err := recipe.Load(fsys)
	require.NoError(t, err)
	assert.Equal(t, []string{
		`models/acme/Other.yaml: model.model_id "acme/Other-NVFP4" differs from the id its path gives ("acme/Other"): the recipe is known as "acme/Other" and serves "acme/Other-NVFP4"`,
	}, b.Warnings(), "a difference in case only is not worth a warning")
	m, err := b.Derive(recipe.Request{ModelID: "acme/Other", Hardware: hw("h100")})
	require.NoError(t, err)
	assert.Equal(t, "acme/Other-NVFP4", m.Spec.Model)
	assert.Equal(t, "acme/Other", m.Spec.Source.Recipe)
	assert.True(t, b.Has("acme/Other-NVFP4"), "the served checkpoint names the recipe too")
}

// Docker images: a string, a brand map, a CUDA map, or the default.
func TestDeriveImage(t *testing.T) {
	tests := []struct{ image, want string }{
		{"", "vllm/vllm-openai:v0.27.1"},
		{"docker_image: vllm/vllm-openai:v0.12.0", "vllm/vllm-openai:v0.12.0"},
		{"docker_image: {nvidia: vllm/vllm-openai:gptoss, amd: rocm/vllm:gptoss}", "vllm/vllm-openai:gptoss"},
		{"docker_image: {amd: rocm/vllm:gptoss}", "vllm/vllm-openai:v0.27.1"},
		{"docker_image: {cu129: vllm/vllm-openai:v0.12-cu129, cu130: vllm/vllm-openai:v0.12-cu130}", "vllm/vllm-openai:v0.12-cu130"},
		{"docker_image: {nvidia: {cu129: a:cu129}}", "a:cu129"},
		{"nightly_required: true", "vllm/vllm-openai:nightly"},
	}
	for _, tc := range tests {
		t.Run(tc.image, func(t *testing.T) {
			fsys := bundledFS(t)
			set("models/acme/Img.yaml", "model: {model_id: acme/Img}\nvariants: {default: {precision: bf16, vram_minimum_gb: 1}}\ncompatible_strategies: [single_node_tp]\n")(fsys)
			if tc.image != "" {
				set("models/acme/Img.yaml", "model:\n  model_id: acme/Img\n  "+tc.image+"\nvariants: {default: {precision: bf16, vram_minimum_gb: 1}}\ncompatible_strategies: [single_node_tp]\n")(fsys)
			}
			b, err := recipe.Load(fsys)
			require.NoError(t, err)
			m, err := b.Derive(recipe.Request{ModelID: "acme/Img", Hardware: hw("h100")})
			require.NoError(t, err)
			assert.Equal(t, tc.want, m.Spec.Image)
		})
	}
}

// The whole upstream repository, when a checkout is at hand: it loads, and every recipe x
// variant on h100, h200 and b200 either derives a master or says why not. Not a default test:
// the project does not ship the upstream tree (set INFERPLANE_UPSTREAM_RECIPES to a checkout).
func TestLoadUpstreamTree(t *testing.T) {
	dir := os.Getenv("INFERPLANE_UPSTREAM_RECIPES")
	if dir == "" {
		t.Skip("SKIPPED: INFERPLANE_UPSTREAM_RECIPES is not set: no checkout of github.com/vllm-project/recipes to load")
	}
	b, err := recipe.Load(os.DirFS(dir))
	require.NoError(t, err)
	derived, refused := 0, 0
	for _, id := range b.Models() {
		r, _, _ := b.Model(id)
		for _, v := range r.Variants.Keys {
			for _, p := range []string{"h100", "h200", "b200"} {
				m, err := b.Derive(recipe.Request{ModelID: id, Variant: v, Hardware: hw(p)})
				if err != nil {
					require.NotEmpty(t, recipe.Reason(err), "%s %s %s: %v", id, v, p, err)
					refused++
					continue
				}
				derived++
				assert.Positive(t, m.Spec.PerReplicaGPUCount)
			}
		}
	}
	t.Logf("%d recipes, %d masters derived, %d refused with a reason, %d warnings", len(b.Models()), derived, refused, len(b.Warnings()))
}

// LoadFor parses one recipe and gives the same master, name included, as the whole tree.
func TestLoadForMatchesLoad(t *testing.T) {
	whole := bundled(t)
	for _, id := range whole.Models() {
		for _, asked := range []string{id, strings.ToUpper(id)} {
			one, err := recipe.LoadFor(os.DirFS(bundledDir), asked)
			require.NoError(t, err)
			require.Equal(t, []string{id}, one.Models(), "only the recipe asked for is parsed")
			req := recipe.Request{ModelID: asked, Hardware: hw("h200")}
			want, wantErr := whole.Derive(req)
			got, gotErr := one.Derive(req)
			assert.Equal(t, wantErr, gotErr, id)
			assert.Equal(t, want, got, id)
		}
	}
	// A variant's checkpoint id is not a file name: the whole tree is read to resolve it.
	b, err := recipe.LoadFor(os.DirFS(bundledDir), "Qwen/Qwen3-32B-FP8")
	require.NoError(t, err)
	assert.Len(t, b.Models(), 173)
	m, err := b.Derive(recipe.Request{ModelID: "Qwen/Qwen3-32B-FP8", Hardware: hw("h100")})
	require.NoError(t, err)
	assert.Equal(t, "qwen3-32b-fp8-h100", m.Name)
}

// The guide prose is not parsed, and lines after it keep their numbers in messages.
func TestLoadSkipsTheGuide(t *testing.T) {
	fsys := bundledFS(t)
	set("models/acme/Guided.yaml", `model:
  model_id: acme/Guided
guide: |
  ## Prose

  - with: [unbalanced, yaml
    key: that would not parse
variants:
  default: {precision: bf16, vram_minimum_gb: lots}
`)(fsys)
	_, err := recipe.Load(fsys)
	require.Error(t, err)
	assert.ErrorContains(t, err, `models/acme/Guided.yaml:9: variants.default.vram_minimum_gb: expected a number, got string "lots"`)

	set("models/acme/Guided.yaml", "model:\n  model_id: acme/Guided\nguide: |\n  text\n\n  more\nvariants:\n  default: {precision: bf16}\ncompatible_strategies: [single_node_tp]\n")(fsys)
	b, err := recipe.Load(fsys)
	require.NoError(t, err)
	_, err = b.Derive(recipe.Request{ModelID: "acme/Guided", Hardware: hw("h100")})
	require.NoError(t, err)
}

// List reads only a recipe's variants and strategies, and says what Load would.
func TestListMatchesLoad(t *testing.T) {
	b := bundled(t)
	listings, err := recipe.List(os.DirFS(bundledDir))
	require.NoError(t, err)
	require.Len(t, listings, len(b.Models()))
	for i, id := range b.Models() {
		r, _, _ := b.Model(id)
		rendered, refused := b.RecipeStrategies(id)
		assert.Equal(t, recipe.Listing{ID: id, Variants: r.Variants.Keys, Omni: slices.Contains(r.Meta.Tasks, "omni"),
			Rendered: rendered, Refused: refused}, listings[i])
	}
}

// Blocks the decoder does not read are not parsed; an anchor one of them defines still
// resolves (the file is then parsed as written), and line numbers stay right.
func TestLoadSkipsUnreadBlocks(t *testing.T) {
	fsys := bundledFS(t)
	set("models/acme/Anchored.yaml", `dependencies:
  - &args [--max-model-len, "4096"]
model:
  model_id: acme/Anchored
  base_args: *args
variants:
  default: {precision: bf16}
compatible_strategies: [single_node_tp]
`)(fsys)
	set("models/acme/Late.yaml", `omni:
  tasks: [t2i, {unbalanced
model:
  model_id: acme/Late
variants:
  default: {precision: bf16, vram_minimum_gb: lots}
`)(fsys)
	_, err := recipe.Load(fsys)
	require.Error(t, err)
	assert.ErrorContains(t, err, `models/acme/Late.yaml:6: variants.default.vram_minimum_gb: expected a number, got string "lots"`,
		"the unread omni block is not parsed, and the line is the file's")
	delete(fsys, "models/acme/Late.yaml")
	b, err := recipe.Load(fsys)
	require.NoError(t, err)
	m, err := b.Derive(recipe.Request{ModelID: "acme/Anchored", Hardware: hw("h100")})
	require.NoError(t, err)
	assert.Equal(t, []string{"--max-model-len", "4096", "--tensor-parallel-size", "8"}, m.Spec.Args)
}
