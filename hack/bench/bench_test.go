package bench_test

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/hack/bench"
)

// TestHelmMatchesRender is the fairness check of the benchmark: for a sample of tenants (every
// job shape, tenants with and without jobs, quota and node-type restrictions) Helm's engine and
// the Go render produce the same files with the same objects.
func TestHelmMatchesRender(t *testing.T) {
	c, err := bench.Chart()
	if err != nil {
		t.Fatal(err)
	}
	sample := append([]plan.TenantPlan{rendertest.Acme(), rendertest.Globex(), rendertest.DataParallel(), rendertest.Initech()}, rendertest.Many(8, 5)...)
	options := []render.Options{{}, {StorageClass: "fast-nvme", HFTokenSecret: "hf", FabricNetwork: "roce", ClusterDomain: "tenant.local",
		GuestImage: "registry.example.com/g:1", RepoURL: "ssh://git@git.example.com/x.git", Revision: "prod"}}
	for _, opts := range options {
		for _, tp := range sample {
			goDocs, helmDocs := renderBoth(t, c, tp, opts)
			if diffs := bench.Equivalent(helmDocs, goDocs); len(diffs) > 0 {
				t.Errorf("%s %+v: Helm and Go renders differ:\n%s", tp.Tenant.Name, opts, strings.Join(diffs, "\n"))
			}
			if len(goDocs) == 0 {
				t.Fatalf("%s: nothing rendered", tp.Tenant.Name)
			}
		}
	}
}

// TestEquivalentSeesDifferences: the check above is not vacuous.
func TestEquivalentSeesDifferences(t *testing.T) {
	c, err := bench.Chart()
	if err != nil {
		t.Fatal(err)
	}
	goDocs, helmDocs := renderBoth(t, c, rendertest.Globex(), render.Options{})
	if diffs := bench.Equivalent(helmDocs, goDocs); len(diffs) != 0 {
		t.Fatalf("baseline differs: %v", diffs)
	}
	// One changed value deep in a VM, one missing file, one extra document.
	vm := goDocs["jobs/kimi/r0-n1-vm.yaml"][0].(map[string]any)
	vm["spec"].(map[string]any)["runStrategy"] = "Manual"
	delete(goDocs, "jobs/llama/r0-service.yaml")
	goDocs[render.FileNodeTypes] = append(goDocs[render.FileNodeTypes], map[string]any{})
	if diffs := bench.Equivalent(helmDocs, goDocs); len(diffs) != 3 {
		t.Errorf("want 3 differences, got %d:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
}

func renderBoth(t *testing.T, c *chart.Chart, tp plan.TenantPlan, opts render.Options) (goDocs, helmDocs bench.Documents) {
	t.Helper()
	files, err := render.Tenant(tp, opts)
	if err != nil {
		t.Fatal(err)
	}
	if goDocs, err = bench.RenderDocuments(files); err != nil {
		t.Fatal(err)
	}
	vals, err := bench.Values(tp, opts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := bench.RenderHelm(c, vals, tp.Tenant.Name)
	if err != nil {
		t.Fatalf("%s: helm: %v", tp.Tenant.Name, err)
	}
	if helmDocs, err = bench.HelmDocuments(out); err != nil {
		t.Fatal(err)
	}
	return goDocs, helmDocs
}

func BenchmarkRenderTenant(b *testing.B) {
	tenants := rendertest.Many(64, 5)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := render.Tenant(tenants[i%len(tenants)], render.Options{}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkHelmTenant(b *testing.B) {
	tenants := rendertest.Many(64, 5)
	c, err := bench.Chart()
	if err != nil {
		b.Fatal(err)
	}
	vals, err := bench.ValuesOf(tenants, render.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % len(tenants)
		if _, err := bench.RenderHelm(c, vals[k], tenants[k].Tenant.Name); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
