package render_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
)

var env *kubeenv.Env

func TestMain(m *testing.M) {
	// A fuzzing run (`go test -fuzz FuzzTenant`) starts one test process per worker; none of
	// them needs the API server, and a worker that starts one per restart only slows fuzzing.
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	os.Exit(kubeenv.Main(m, &env))
}

// fixtures are the tenants every proof runs over: a single-GPU model with two replicas and a
// Parakeet job (acme), a full-node model and a two-node Kimi-K2 replica (globex), and a tenant
// allowed nothing, without jobs (initech).
func fixtures() []plan.TenantPlan {
	return []plan.TenantPlan{rendertest.Acme(), rendertest.Globex(), rendertest.DataParallel(), rendertest.Initech()}
}

func mustRender(t testing.TB, tp plan.TenantPlan) render.Files {
	t.Helper()
	files, err := render.Tenant(tp, render.Options{})
	if err != nil {
		t.Fatalf("render %s: %v", tp.Tenant.Name, err)
	}
	return files
}

// sortedPaths lists a rendered tree's paths in order.

// isKubeObjectFile tells Kubernetes manifests from vcluster.yaml (Helm values) and
// kustomization.yaml (a kustomize input, not an object).
func isKubeObjectFile(p string) bool {
	return p != render.FileVCluster && !strings.HasSuffix(p, "/kustomization.yaml")
}
