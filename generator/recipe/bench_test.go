package recipe_test

import (
	"os"
	"testing"

	"github.com/inferplane/inferplane/generator/recipe"
)

// BenchmarkLoad reads the bundled tree (upstream's whole corpus) from memory.
func BenchmarkLoad(b *testing.B) {
	fsys := bundledFS(b)
	for b.Loop() {
		if _, err := recipe.Load(fsys); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadDir is the same from disk, as `recipe list` and `generate` read it.
func BenchmarkLoadDir(b *testing.B) {
	fsys := os.DirFS(bundledDir)
	for b.Loop() {
		if _, err := recipe.Load(fsys); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList is what `recipe list` does: every recipe's variants and strategies.
func BenchmarkList(b *testing.B) {
	fsys := os.DirFS(bundledDir)
	for b.Loop() {
		if _, err := recipe.List(fsys); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShow is what `recipe show` does: parse what one model needs, derive its master.
func BenchmarkShow(b *testing.B) {
	fsys := os.DirFS(bundledDir)
	for b.Loop() {
		book, err := recipe.LoadFor(fsys, "moonshotai/Kimi-K2-Instruct")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := book.Derive(recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: hw("h200")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShowWholeTree is the baseline: the same master from the whole tree parsed, as a
// library user calling Load would get it.
func BenchmarkShowWholeTree(b *testing.B) {
	fsys := os.DirFS(bundledDir)
	for b.Loop() {
		book, err := recipe.Load(fsys)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := book.Derive(recipe.Request{ModelID: "moonshotai/Kimi-K2-Instruct", Hardware: hw("h200")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDerive derives three masters (name included) from a loaded book, past the memo.
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

// BenchmarkDeriveEveryOffer derives every combination upstream offers (10,719) from a fresh
// book each time, without the memo's help.
func BenchmarkDeriveEveryOffer(b *testing.B) {
	fsys := bundledFS(b)
	for b.Loop() {
		b.StopTimer()
		book, err := recipe.Load(fsys)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, id := range book.Models() {
			for _, o := range book.Offers(id) {
				_, _ = book.Derive(recipe.Request{ModelID: id, Variant: o.Variant, Strategy: o.Strategy, Hardware: hw(o.Hardware)})
			}
		}
	}
}
