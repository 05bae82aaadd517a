package recipe_test

import (
	"os"
	"testing"

	"github.com/inferplane/inferplane/generator/recipe"
)

// BenchmarkLoad reads the bundled tree (taxonomy, two strategies, five recipes).
func BenchmarkLoad(b *testing.B) {
	fsys := bundledFS(b)
	for b.Loop() {
		if _, err := recipe.Load(fsys); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadDir is the same from disk, as the CLI reads it.
func BenchmarkLoadDir(b *testing.B) {
	fsys := os.DirFS(bundledDir)
	for b.Loop() {
		if _, err := recipe.Load(fsys); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDerive derives the three masters (name included).
func BenchmarkDerive(b *testing.B) {
	book := bundled(b)
	reqs := []recipe.Request{
		{ModelID: "Qwen/Qwen3-32B", Hardware: hw("h100")},
		{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Hardware: hw("h200")},
		{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: hw("h200")},
	}
	for b.Loop() {
		for _, r := range reqs {
			if _, err := book.Derive(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}
