package recipe_test

import (
	"fmt"
	"os"
	"testing"
	"time"

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

// TestBenchRecipesReport (make bench-recipes) times the work of `recipe show` and `recipe
// list` against their baseline, the whole tree parsed, in one run, and prints the ratios; it
// asserts nothing about time.
func TestBenchRecipesReport(t *testing.T) {
	if os.Getenv("INFERPLANE_BENCH") != "1" {
		t.Skip("SKIPPED: set INFERPLANE_BENCH=1 (make bench-recipes) to time recipe loading")
	}
	show := testing.Benchmark(BenchmarkShow)
	whole := testing.Benchmark(BenchmarkShowWholeTree)
	list := testing.Benchmark(BenchmarkList)
	load := testing.Benchmark(BenchmarkLoadDir)
	line := func(what string, r testing.BenchmarkResult) {
		fmt.Printf("%-52s %10v/op %10d B/op\n", what, time.Duration(r.NsPerOp()), r.AllocedBytesPerOp())
	}
	line("recipe show's work (LoadFor + Derive)", show)
	line("  baseline: the whole tree parsed (Load + Derive)", whole)
	fmt.Printf("  ratio baseline / show: %.1fx\n", float64(whole.NsPerOp())/float64(show.NsPerOp()))
	line("recipe list's work (List)", list)
	line("  baseline: the whole tree parsed (Load)", load)
	fmt.Printf("  ratio baseline / list: %.1fx\n", float64(load.NsPerOp())/float64(list.NsPerOp()))
}
