package render_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/internal/manifest"
)

// TestRenderedObjectsPassStrictDryRun sends every rendered Kubernetes object to the real
// kube-apiserver of e2e/kubeenv (KubeVirt, Argo CD and inferplane CRDs installed) as a
// server-side dry-run create with strict field validation: the upstream schemas, not our
// reading of them, decide. vCluster Platform's Project has no CRD we can install here (it
// ships inside the Platform); TestProjectTypedRoundTrip covers it instead.
func TestRenderedObjectsPassStrictDryRun(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	kinds := map[string]int{}
	for _, tp := range fixtures() {
		files := mustRender(t, tp)
		for _, p := range slices.Sorted(maps.Keys(files)) {
			if !isKubeObjectFile(p) || p == render.FileProject {
				continue
			}
			objs, err := manifest.Decode(files[p])
			if err != nil {
				t.Fatalf("%s/%s: %v", tp.Tenant.Name, p, err)
			}
			for _, u := range objs {
				if err := env.DryRun(ctx, u); err != nil {
					t.Errorf("%s/%s: %s rejected: %v", tp.Tenant.Name, p, kubeenv.Describe(u), err)
				}
				kinds[u.GetKind()]++
			}
		}
	}
	// Every kind of the tree went through the API server.
	for _, k := range []string{"Tenant", "NodeType", "AppProject", "Application", "ManagedInferenceJob",
		"ModelMaster", "VirtualMachine", "Secret", "PersistentVolumeClaim", "Service"} {
		if kinds[k] == 0 {
			t.Errorf("no %s was dry-run", k)
		}
	}
	t.Logf("dry-run objects by kind: %v", kinds)
}

// TestStrictValidationRejectsUnknownFields shows the dry-run above is a real check: the same
// server refuses a rendered VM, Application and job once a field the schema lacks is added.
func TestStrictValidationRejectsUnknownFields(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	files := mustRender(t, fixtures()[1])
	for _, c := range []struct {
		file  string
		field []string
	}{
		{"jobs/kimi/r0-n0-vm.yaml", []string{"spec", "template", "spec", "domain", "devices", "gpuz"}},
		{render.ApplicationFile("kimi"), []string{"spec", "syncPolicy", "retries"}},
		{"jobs/kimi/job.yaml", []string{"spec", "gpus"}},
	} {
		objs, err := manifest.Decode(files[c.file])
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %v", c.file, err)
		}
		u := objs[0]
		if err := unstructured.SetNestedField(u.Object, "x", c.field...); err != nil {
			t.Fatal(err)
		}
		err = env.DryRun(ctx, u)
		if err == nil || !strings.Contains(err.Error(), c.field[len(c.field)-1]) {
			t.Errorf("%s with unknown field %s: got %v, want a strict-validation error naming it",
				c.file, strings.Join(c.field, "."), err)
		}
	}
}
