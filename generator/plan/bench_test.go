package plan_test

import (
	"fmt"
	"testing"

	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/internal/gentest"
	"github.com/inferplane/inferplane/generator/plan"
)

// BenchmarkBuild plans 1,000 tenants of 5 jobs each (the bundled examples' node types, master
// and job shapes, repeated), the size of the render benchmark: loading and planning come
// before rendering in every generate run.
func BenchmarkBuild(b *testing.B) {
	in, err := inputs.Load(gentest.Copy(b, "../../tenants"), "tenants")
	if err != nil {
		b.Fatal(err)
	}
	var jobs []inputs.Job
	for _, t := range in.Tenants {
		jobs = append(jobs, t.Jobs...)
	}
	big := &inputs.Inputs{NodeTypes: in.NodeTypes, Masters: in.Masters}
	for i := range 1000 {
		t := in.Tenants[1] // globex: allowed metal3.*, so every job shape fits
		t.Object.Name = fmt.Sprintf("tenant-%04d", i)
		t.Object.Spec.Quota = nil
		t.Jobs = jobs
		big.Tenants = append(big.Tenants, t)
	}
	book := book(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := plan.Build(big, book, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Tenants) != 1000 || len(p.Tenants[0].Jobs) != 5 {
			b.Fatalf("planned %d tenants", len(p.Tenants))
		}
	}
}
