package render_test

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/internal/manifest"
	"github.com/inferplane/inferplane/webhook/install"
)

// TestTree: the rendered tree holds exactly the files of docs/design.md's "Rendered tree".
func TestTree(t *testing.T) {
	files := mustRender(t, rendertest.Globex())
	want := append(slices.Clone(addonFiles),
		"argocd/applications/kimi.yaml",
		"argocd/applications/llama.yaml",
		"argocd/appproject.yaml",
		"jobs/kimi/job.yaml",
		"jobs/kimi/kustomization.yaml",
		"jobs/kimi/modelmaster.yaml",
		"jobs/kimi/r0-n0-cloud-init.yaml",
		"jobs/kimi/r0-n0-model-cache.yaml",
		"jobs/kimi/r0-n0-vm.yaml",
		"jobs/kimi/r0-n1-cloud-init.yaml",
		"jobs/kimi/r0-n1-model-cache.yaml",
		"jobs/kimi/r0-n1-vm.yaml",
		"jobs/kimi/r0-service.yaml",
		"jobs/llama/job.yaml",
		"jobs/llama/kustomization.yaml",
		"jobs/llama/modelmaster.yaml",
		"jobs/llama/r0-n0-cloud-init.yaml",
		"jobs/llama/r0-n0-model-cache.yaml",
		"jobs/llama/r0-n0-vm.yaml",
		"jobs/llama/r0-service.yaml",
		"platform/project.yaml",
		"vcluster.yaml",
	)
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
		t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// initech has no jobs: no applications, no job folders, and a node type file that says so.
	files = mustRender(t, rendertest.Initech())
	want = append(slices.Clone(addonFiles), "argocd/appproject.yaml", "platform/project.yaml", "vcluster.yaml")
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
		t.Errorf("initech tree: %v", got)
	}
}

// addonFiles are in every tenant's tree, jobs or not.
var addonFiles = []string{
	render.FileAddonsApplication,
	render.FileAddonsAppProject,
	render.FileCRDs,
	render.FileAddonsKustomize,
	render.FileNodeTypes,
	render.FileTenant,
	render.FileWebhook,
}

// TestArgoCDObjects checks what the issue asks of the Application and AppProject.
func TestArgoCDObjects(t *testing.T) {
	files := mustRender(t, rendertest.Globex())
	objs, err := manifest.Decode(files[render.ApplicationFile("kimi")])
	if err != nil || len(objs) != 1 {
		t.Fatal(err)
	}
	app := objs[0]
	str := func(path ...string) string {
		v, _, _ := unstructuredString(app.Object, path...)
		return v
	}
	if app.GetName() != "globex-kimi" || app.GetNamespace() != "argocd" || !slices.Contains(app.GetFinalizers(), render.ResourcesFinalizer) {
		t.Errorf("application %s/%s finalizers %v", app.GetNamespace(), app.GetName(), app.GetFinalizers())
	}
	for path, want := range map[string]string{
		"spec.project":                              "globex",
		"spec.destination.name":                     "globex-cluster",
		"spec.destination.namespace":                "globex",
		"spec.source.repoURL":                       "https://git.example.com/tenants/globex.git",
		"spec.source.path":                          "jobs/kimi",
		"spec.source.targetRevision":                "main",
		"spec.syncPolicy.retry.backoff.duration":    "5s",
		"spec.syncPolicy.retry.backoff.maxDuration": "3m",
	} {
		if got := str(strings.Split(path, ".")...); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	auto, _ := app.Object["spec"].(map[string]any)["syncPolicy"].(map[string]any)["automated"].(map[string]any)
	if auto["prune"] != true || auto["selfHeal"] != true {
		t.Errorf("automated = %v, want prune and selfHeal", auto)
	}

	objs, err = manifest.Decode(files[render.FileAppProject])
	if err != nil || len(objs) != 1 {
		t.Fatal(err)
	}
	spec := objs[0].Object["spec"].(map[string]any)
	if repos := spec["sourceRepos"].([]any); len(repos) != 1 || repos[0] != "https://git.example.com/tenants/globex.git" {
		t.Errorf("sourceRepos = %v", repos)
	}
	cluster := spec["clusterResourceWhitelist"].([]any)
	if len(cluster) != 2 {
		t.Errorf("cluster allow-list = %v, want only Namespace and ModelMaster", cluster)
	}
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// TestDeterministic: the same plan gives the same bytes, also when its lists arrive in
// another order or the map-backed fields were built in another order.
func TestDeterministic(t *testing.T) {
	for _, tp := range append(fixtures(), rendertest.Many(5, 5)...) {
		first := mustRender(t, tp)
		for i := range 5 {
			shuffled := tp
			shuffled.Jobs = slices.Clone(tp.Jobs)
			shuffled.NodeTypes = slices.Clone(tp.NodeTypes)
			r := rand.New(rand.NewPCG(uint64(i), 7))
			r.Shuffle(len(shuffled.Jobs), func(a, b int) { shuffled.Jobs[a], shuffled.Jobs[b] = shuffled.Jobs[b], shuffled.Jobs[a] })
			r.Shuffle(len(shuffled.NodeTypes), func(a, b int) {
				shuffled.NodeTypes[a], shuffled.NodeTypes[b] = shuffled.NodeTypes[b], shuffled.NodeTypes[a]
			})
			again := mustRender(t, shuffled)
			if !maps.EqualFunc(first, again, bytes.Equal) {
				for p := range first {
					if !bytes.Equal(first[p], again[p]) {
						t.Fatalf("%s: %s differs between two renders of the same plan", tp.Tenant.Name, p)
					}
				}
				t.Fatalf("%s: the file sets differ", tp.Tenant.Name)
			}
		}
	}
}

// TestNothingSecretIsRendered: the render never reads credentials, and refuses a repository
// URL with a password in it rather than write it to the tenant's repository.
func TestNothingSecretIsRendered(t *testing.T) {
	const sentinel = "s3cr3t-value-never-rendered"
	t.Setenv("ACME_GIT_PASSWORD", sentinel)
	tp := rendertest.Acme()
	tp.Tenant.Spec.Git.Auth = &v1alpha1.GitAuth{UsernameEnv: "ACME_GIT_USER", PasswordEnv: "ACME_GIT_PASSWORD"}
	for p, b := range mustRender(t, tp) {
		if bytes.Contains(b, []byte(sentinel)) {
			t.Errorf("%s contains the password", p)
		}
	}
	// The HF token is only referenced: an optional Secret volume by name.
	files := mustRender(t, tp)
	if !bytes.Contains(files["jobs/qwen/r0-n0-vm.yaml"], []byte("secretName: "+render.DefaultHFTokenSecret)) {
		t.Error("the VM does not reference the HF token Secret")
	}

	tp.Tenant.Spec.Git.URL = "https://bot:" + sentinel + "@git.example.com/acme.git"
	files, err := render.Tenant(tp, render.Options{})
	if err == nil || files != nil {
		t.Fatalf("a URL with a password rendered: %v", err)
	}
	if strings.Contains(err.Error(), sentinel) {
		t.Errorf("the error repeats the password: %v", err)
	}
}

// TestBadPlans: a plan the render cannot turn into valid objects gets an error naming the
// input file and field, and no files at all.
func TestBadPlans(t *testing.T) {
	acme := func(mutate func(*plan.TenantPlan)) plan.TenantPlan {
		tp := rendertest.Acme()
		mutate(&tp)
		return tp
	}
	const jobFile = "tenants/acme/jobs/qwen.yaml"
	cases := []struct {
		name      string
		tp        plan.TenantPlan
		opts      render.Options
		file      string
		field     string
		mentioned string
	}{
		{"no repository URL", acme(func(tp *plan.TenantPlan) { tp.Tenant.Spec.Git.URL = "" }), render.Options{},
			"tenants/acme/tenant.yaml", "spec.git.url", "repository URL"},
		{"no Argo CD connector", acme(func(tp *plan.TenantPlan) { tp.Tenant.Spec.ArgoCD.Connector = "" }), render.Options{},
			"tenants/acme/tenant.yaml", "spec.argoCD.connector", "connector"},
		{"tenant name not a namespace", acme(func(tp *plan.TenantPlan) { tp.Tenant.Name = "Acme_Corp" }), render.Options{},
			"tenants/Acme_Corp/tenant.yaml", "metadata.name", "Acme_Corp"},
		{"zero GPUs per node", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].GPUsPerNode = 0 }), render.Options{},
			jobFile, "spec.gpuCount", "0 GPU"},
		{"layout differs from the master", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].Master.Spec.PerReplicaGPUCount = 2 }), render.Options{},
			jobFile, "spec.gpuCount", "the plan lays a replica out as 1 node(s) x 1 GPU(s); expected the policy's layout"},
		{"more GPUs on a node than it has", acme(func(tp *plan.TenantPlan) {
			tp.Jobs[0].GPUsPerNode, tp.Jobs[0].Master.Spec.PerReplicaGPUCount = 16, 16
		}), render.Options{}, jobFile, "spec.gpuCount", "the policy's layout of master qwen3-32b-h100 on metal3.gpu-h100: 2 node(s) x 8 GPU(s)"},
		{"multi-node Parakeet", acme(func(tp *plan.TenantPlan) {
			p := &tp.Jobs[1]
			p.NodesPerReplica, p.GPUsPerNode, p.Master.Spec.PerReplicaGPUCount = 2, 8, 16
		}), render.Options{}, "tenants/acme/jobs/transcribe.yaml", "spec.nodeType", "a Parakeet replica runs on one node"},
		{"zero replicas", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].Job.Spec.Replicas = 0 }), render.Options{},
			jobFile, "spec.replicas", "at least 1"},
		{"bad cache size", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].ModelCacheSize = "lots" }), render.Options{},
			jobFile, "spec.modelCacheSize", "lots"},
		{"bad node memory", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].NodeType.Spec.Memory = "much" }), render.Options{},
			jobFile, "spec.nodeType", "cannot size"},
		{"job name too long for its VMs", acme(func(tp *plan.TenantPlan) {
			tp.Jobs[0].Job.Name = strings.Repeat("q", 62)
			tp.Jobs[0].SourceFile = ""
		}), render.Options{}, "tenants/acme/jobs/" + strings.Repeat("q", 62) + ".yaml", "metadata.name", "must be at most 57 characters (it has 62)"},
		{"job name starting with a digit", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].Job.Name = "7b" }), render.Options{},
			jobFile, "metadata.name", "starting with a letter"},
		{"master name too long for a label", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].Master.Name = strings.Repeat("m", 64) }), render.Options{},
			jobFile, "spec.model", "label"},
		{"duplicate job", acme(func(tp *plan.TenantPlan) { tp.Jobs = append(tp.Jobs, tp.Jobs[0]) }), render.Options{},
			jobFile, "metadata.name", "duplicate"},
		{"one master name, two specs", acme(func(tp *plan.TenantPlan) {
			other := rendertest.Job("acme", "other", rendertest.ShapeSingleGPU)
			other.Master.Spec.Args = append(other.Master.Spec.Args, "--enforce-eager")
			tp.Jobs = append(tp.Jobs, other)
		}), render.Options{}, "tenants/acme/jobs/other.yaml", "spec.model", "differs"},
		{"control character in an argument", acme(func(tp *plan.TenantPlan) { tp.Jobs[0].Args = append(tp.Jobs[0].Args, "a\x00b") }), render.Options{},
			jobFile, "spec.extraArgs", "control"},
		{"env name with =", acme(func(tp *plan.TenantPlan) {
			tp.Jobs[0].Env = []v1alpha1.EnvVar{{Name: "A=B", Value: "c"}}
		}), render.Options{}, jobFile, "spec.model", "env"},
		{"bad HF token Secret option", rendertest.Acme(), render.Options{HFTokenSecret: "Not A Name"},
			"tenants/acme/tenant.yaml", "", "HF token"},
		{"unknown runtime", acme(func(tp *plan.TenantPlan) {
			tp.Jobs[0].Job.Spec.Runtime = "triton"
			tp.Jobs[0].Master.Spec.Runtime = "triton"
		}), render.Options{}, jobFile, "spec.model", `spec.runtime is "triton": must be "vllm" or "parakeet"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files, err := render.Tenant(c.tp, c.opts)
			if err == nil {
				t.Fatal("rendered without an error")
			}
			if files != nil {
				t.Errorf("returned %d files with the error", len(files))
			}
			probs := problem.Problems(err)
			if len(probs) == 0 {
				t.Fatalf("error is not a problem list: %v", err)
			}
			found := false
			for _, p := range probs {
				if p.File == c.file && p.Err.Field == c.field && strings.Contains(p.Error(), c.mentioned) {
					found = true
				}
			}
			if !found {
				t.Errorf("no problem for %s %s mentioning %q in:\n%v", c.file, c.field, c.mentioned, err)
			}
		})
	}
}

// FuzzTenant mutates the numbers, names and strings of a plan: the render never panics, and
// whatever it renders decodes as YAML.
func FuzzTenant(f *testing.F) {
	f.Add("qwen", int32(2), int32(1), int32(1), "1800Gi", "200Gi", "--max-model-len", "$IFACE_NAME", uint8(0))
	f.Add("kimi", int32(1), int32(2), int32(8), "2000Gi", "2Ti", "-cc.x=y", "v", uint8(1))
	f.Add("", int32(-1), int32(0), int32(0), "", "", "", "", uint8(2))
	f.Fuzz(func(t *testing.T, name string, replicas, nodes, gpus int32, mem, cache, arg, env string, shape uint8) {
		tp := rendertest.Tenant("fuzz", "t", nil, 8, [2]string{"job", rendertest.Shapes[int(shape)%len(rendertest.Shapes)]})
		jp := &tp.Jobs[0]
		jp.Job.Name = name
		jp.Job.Spec.Replicas = replicas
		jp.NodesPerReplica, jp.GPUsPerNode = nodes, gpus
		jp.Master.Spec.PerReplicaGPUCount = nodes * gpus
		jp.NodeType.Spec.Memory = mem
		jp.ModelCacheSize = cache
		jp.Args = append(slices.Clone(jp.Args), arg)
		jp.Env = append(slices.Clone(jp.Env), v1alpha1.EnvVar{Name: "X", Value: env})
		if replicas > 16 || nodes > 16 {
			return // the render would be right, only slow
		}
		files, err := render.Tenant(tp, render.Options{})
		if err != nil {
			if files != nil || len(problem.Problems(err)) == 0 {
				t.Fatalf("error %v came with files or without problems", err)
			}
			return
		}
		for p, b := range files {
			if _, err := manifest.Decode(b); err != nil && p != render.FileVCluster {
				t.Fatalf("%s does not decode: %v\n%s", p, err, b)
			}
		}
	})
}

// TestAddonsWithWebhookOutsideTheCluster: with Options.Webhook.URL the webhook runs outside the
// tenant cluster (the Argo CD e2e tests run it in the test process on 127.0.0.1): the add-ons
// hold its configuration pointing at the URL with the CA from git, no Deployment or Service;
// their AppProject allows no namespaced kind at all (an empty list, which Argo CD reads as
// none, where an absent one would mean all); and nothing is left for ignoreDifferences.
func TestAddonsWithWebhookOutsideTheCluster(t *testing.T) {
	opts := render.Options{Webhook: install.ManifestOptions{URL: "https://127.0.0.1:9443", CABundle: []byte("ca")}}
	files, err := render.Tenant(rendertest.Acme(), opts)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(files[render.FileWebhook])
	if err != nil || len(objs) != 1 || objs[0].GetKind() != "ValidatingWebhookConfiguration" {
		t.Fatalf("webhook.yaml: %v %v", objs, err)
	}
	if !strings.Contains(string(files[render.FileWebhook]), "url: https://127.0.0.1:9443/") {
		t.Errorf("webhook.yaml does not point at the URL:\n%s", files[render.FileWebhook])
	}
	project := string(files[render.FileAddonsAppProject])
	if !strings.Contains(project, "namespaceResourceWhitelist: []\n") {
		t.Errorf("add-ons project must allow no namespaced kind:\n%s", project)
	}
	app := string(files[render.FileAddonsApplication])
	if strings.Contains(app, "ignoreDifferences") || !strings.Contains(app, "namespace: "+install.DefaultNamespace) {
		t.Errorf("add-ons application:\n%s", app)
	}
}
