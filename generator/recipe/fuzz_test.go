package recipe_test

import (
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/inferplane/inferplane/generator/recipe"
)

// FuzzLoad feeds arbitrary bytes as a model file of an otherwise good tree: Load never panics,
// and when it accepts the file, deriving each of its variants on each profile never panics.
func FuzzLoad(f *testing.F) {
	seeds := []string{goodModel, "", "model: [", "variants: *a", "a: &a [*a, *a]", "model:\n  model_id: acme/Fuzz\nvariants: {default: {tp: {h100: 99999999999}}}\n"}
	seeds = append(seeds, "guide: |\n  x\nmodel: {model_id: acme/Fuzz}\nvariants: {default: {}}\n", "guide: >\n", "guide: |",
		"model: {model_id: acme/Fuzz}\nvariants: {default: {vram_minimum_gb: 2000}}\nstrategy_min_gpus: {multi_node_dep: 64, h100: {tp: 32}}\ncompatible_strategies: [multi_node_dep, multi_node_tp_dp]\n")
	for _, p := range []string{"Qwen/Qwen3-32B", "openai/gpt-oss-120b", "moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K3", "deepseek-ai/DeepSeek-V4-Pro", "MiniMaxAI/MiniMax-M2"} {
		data, err := os.ReadFile(bundledDir + "/models/" + p + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, string(data))
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	// A small taxonomy keeps each run cheap; the strategies are the bundled ones.
	full := bundledFS(f)
	base := fstest.MapFS{
		"taxonomy.yaml": {Data: []byte(`hardware_profiles:
  h100: {brand: NVIDIA, generation: hopper, gpu_count: 8, vram_gb: 640}
  h200: {brand: NVIDIA, generation: hopper, gpu_count: 8, vram_gb: 1128}
  b200: {brand: NVIDIA, generation: blackwell, gpu_count: 8, vram_gb: 1440}
  mi300x: {brand: AMD, generation: amd, gpu_count: 8, vram_gb: 1536}
  trillium: {brand: Google, generation: tpu, gpu_count: 8, vram_gb: 256, restricted: true}
  dgx_spark_gb10: {brand: NVIDIA, generation: blackwell, gpu_count: 1, vram_gb: 128, scalable: false}
strategies: [single_node_tp, single_node_tep, single_node_dep, multi_node_tp, multi_node_tep, multi_node_dep, multi_node_tp_pp, multi_node_tp_dp, pd_cluster]
kv_offload:
  simple: {args: [--kv-transfer-config, "{}"]}
  gated: {args: [--kv-transfer-config, "{}"], requires_opt_in: true, brands: [NVIDIA], strategies: [single_node_tp]}
`)},
	}
	for name, file := range full {
		if strings.HasPrefix(name, "strategies/") || strings.HasPrefix(name, "kv_store/") {
			base[name] = file
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{}
		for k, v := range base {
			fsys[k] = v
		}
		fsys["models/acme/Fuzz.yaml"] = &fstest.MapFile{Data: data}
		b, err := recipe.Load(fsys)
		if err != nil {
			return
		}
		r, _, ok := b.Model("acme/Fuzz")
		if !ok {
			return
		}
		features := map[string]bool{}
		for _, name := range r.Features.Keys {
			features[name] = true
		}
		modes := map[string]string{}
		for _, name := range r.Features.Keys {
			if m := r.Features.Values[name].Modes; m.Len() > 0 {
				modes[name] = m.Keys[m.Len()-1]
			}
		}
		for _, v := range r.Variants.Keys {
			for _, p := range []string{"h100", "h200", "b200", "mi300x", "trillium", "dgx_spark_gb10"} {
				hw := recipe.Hardware{Profile: p}
				_, _ = b.Derive(recipe.Request{ModelID: "acme/Fuzz", Variant: v, Hardware: hw})
				_, _ = b.Derive(recipe.Request{ModelID: "acme/Fuzz", Variant: v, Hardware: hw, Features: features, Nodes: 2})
				_, _ = b.Derive(recipe.Request{ModelID: "acme/Fuzz", Variant: v, Hardware: hw, FeatureModes: modes, KVOffload: "gated"})
				for _, s := range b.Strategies() {
					_, _ = b.Derive(recipe.Request{ModelID: "acme/Fuzz", Variant: v, Hardware: hw, Strategy: s, KVOffload: "simple"})
				}
			}
		}
	})
}
