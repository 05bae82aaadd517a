package generator

import (
	"context"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/internal/gentest"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/internal/manifest"
)

// TestBundledExamplesPassTheAPIServer renders the bundled examples as generate does and sends
// every Kubernetes object to the real kube-apiserver of e2e/kubeenv (KubeVirt, Argo CD and
// inferplane CRDs installed) as a strict server-side dry run, and builds every job folder with
// kustomize. vcluster.yaml is Helm values, not an object; the Platform Project has no CRD
// available here (the render package proves it by a typed round trip).
func TestBundledExamplesPassTheAPIServer(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, runs, _, err := prepare(options(gentest.Copy(t, "../tenants"), t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range runs {
		tenant := r.tp.Tenant.Name
		paths := slices.Sorted(maps.Keys(r.files))
		mem := filesys.MakeFsInMemory()
		jobDirs := map[string]bool{}
		for _, p := range paths {
			if err := mem.WriteFile("/"+p, r.files[p]); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(p, "jobs/") {
				jobDirs[path.Dir(p)] = true
			}
			if p == render.FileVCluster || p == render.FileProject || strings.HasSuffix(p, "/kustomization.yaml") {
				continue
			}
			objs, err := manifest.Decode(r.files[p])
			if err != nil {
				t.Fatalf("%s/%s: %v", tenant, p, err)
			}
			for _, u := range objs {
				if err := env.DryRun(ctx, u); err != nil {
					t.Errorf("%s/%s: %s rejected: %v", tenant, p, kubeenv.Describe(u), err)
				}
				kinds[u.GetKind()]++
			}
		}
		for dir := range jobDirs {
			k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
			if _, err := k.Run(mem, "/"+dir); err != nil {
				t.Errorf("%s/%s: kustomize build: %v", tenant, dir, err)
			}
		}
	}
	for _, k := range []string{"Tenant", "NodeType", "AppProject", "Application", "ManagedInferenceJob",
		"ModelMaster", "VirtualMachine", "Secret", "PersistentVolumeClaim", "Service"} {
		if kinds[k] == 0 {
			t.Errorf("no %s was dry-run", k)
		}
	}
	t.Logf("dry-run objects by kind: %v", kinds)
}
