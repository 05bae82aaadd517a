package recipe_test

import (
	"os"
	"testing"
	"testing/fstest"

	"github.com/inferplane/inferplane/generator/recipe"
)

// FuzzLoad feeds arbitrary bytes as a model file of an otherwise good tree: Load never panics,
// and when it accepts the file, deriving each of its variants on each profile never panics.
func FuzzLoad(f *testing.F) {
	seeds := []string{goodModel, "", "model: [", "variants: *a", "a: &a [*a, *a]", "model:\n  model_id: acme/Fuzz\nvariants: {default: {tp: {h100: 99999999999}}}\n"}
	for _, p := range []string{"Qwen/Qwen3-32B", "openai/gpt-oss-120b", "moonshotai/Kimi-K2-Instruct"} {
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
		"strategies/single_node_tp.yaml": full["strategies/single_node_tp.yaml"],
		"strategies/multi_node_tp.yaml":  full["strategies/multi_node_tp.yaml"],
		"taxonomy.yaml": {Data: []byte(`hardware_profiles:
  h100: {brand: NVIDIA, generation: hopper, gpu_count: 8, vram_gb: 640}
  h200: {brand: NVIDIA, generation: hopper, gpu_count: 8, vram_gb: 1128}
  b200: {brand: NVIDIA, generation: blackwell, gpu_count: 8, vram_gb: 1440}
  mi300x: {brand: AMD, generation: amd, gpu_count: 8, vram_gb: 1536}
  trillium: {brand: Google, generation: tpu, gpu_count: 8, vram_gb: 256, restricted: true}
  dgx_spark_gb10: {brand: NVIDIA, generation: blackwell, gpu_count: 1, vram_gb: 128, scalable: false}
strategies: [single_node_tp, single_node_tep, multi_node_tp, multi_node_tp_pp, pd_cluster]
`)},
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
		for _, v := range r.Variants.Keys {
			for _, p := range []string{"h100", "h200", "b200", "mi300x", "trillium", "dgx_spark_gb10"} {
				_, _ = b.Derive(recipe.Request{ModelID: "acme/Fuzz", Variant: v, Hardware: recipe.Hardware{Profile: p}})
				_, _ = b.Derive(recipe.Request{ModelID: "acme/Fuzz", Variant: v, Hardware: recipe.Hardware{Profile: p}, Features: features, Nodes: 2})
			}
		}
	})
}
