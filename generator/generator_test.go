package generator

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/internal/gentest"
	"github.com/inferplane/inferplane/generator/publish"
	"github.com/inferplane/inferplane/generator/render"
)

var update = flag.Bool("update", false, "rewrite the golden trees in testdata/golden from the bundled examples")

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

var clock = func() time.Time { return time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC) }

func options(tree fs.FS, out string) Options {
	return Options{
		RecipesDir: "recipes", Recipes: os.DirFS("../recipes"),
		TenantsDir: "tenants", Tenants: tree,
		OutDir: out, Now: clock,
		Getenv: func(string) string { return "" },
	}
}

// text is the report as the CLI prints it: each tenant's summary, then its diff.
func text(rep *Report) string {
	if rep == nil {
		return ""
	}
	var b strings.Builder
	for _, tr := range rep.Tenants {
		b.WriteString(tr.Summary(rep.DryRun) + "\n" + tr.Diff)
	}
	return b.String()
}

func generate(t *testing.T, tree fs.FS, out string) (*Report, string) {
	t.Helper()
	rep, err := Generate(context.Background(), options(tree, out))
	require.NoError(t, err, text(rep))
	return rep, text(rep)
}

func statuses(rep *Report) map[string]publish.Status {
	out := map[string]publish.Status{}
	for _, t := range rep.Tenants {
		out[t.Tenant] = t.Status
	}
	return out
}

// TestGenerateGolden generates the bundled examples and compares every tenant's repository
// with testdata/golden/<tenant>/ byte for byte (go test ./generator/ -update rewrites them).
// A second run on the same inputs is then byte-identical and commits nothing.
func TestGenerateGolden(t *testing.T) {
	out := t.TempDir()
	rep, stdout := generate(t, gentest.Copy(t, "../tenants"), out)
	assert.Equal(t, map[string]publish.Status{"acme": publish.Created, "globex": publish.Created, "initech": publish.Created}, statuses(rep))
	assert.Contains(t, stdout, "acme: created ("+filepath.Join(out, "acme"))

	golden := filepath.Join("testdata", "golden")
	for _, tenant := range []string{"acme", "globex", "initech"} {
		got := gentest.WorkTree(t, filepath.Join(out, tenant))
		dir := filepath.Join(golden, tenant)
		if *update {
			require.NoError(t, os.RemoveAll(dir))
			for p, data := range got {
				full := filepath.Join(dir, filepath.FromSlash(p))
				require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
				require.NoError(t, os.WriteFile(full, data, 0o644))
			}
			continue
		}
		want := gentest.WorkTree(t, dir)
		require.NotEmpty(t, want, "no golden tree for %s: run go test ./generator/ -update", tenant)
		assert.ElementsMatch(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "%s: the files", tenant)
		for p, w := range want {
			if g, ok := got[p]; ok && !bytes.Equal(w, g) {
				t.Errorf("%s/%s differs from the golden file (go test ./generator/ -update rewrites it):\n%s", tenant, p,
					unifiedDiff(publish.Change{Path: p, Op: publish.Modified}, w, g))
			}
		}
		assert.Equal(t, 1, gentest.Commits(t, filepath.Join(out, tenant)))
	}

	before := gentest.Snapshot(t, out)
	rep, stdout = generate(t, gentest.Copy(t, "../tenants"), out)
	assert.Equal(t, map[string]publish.Status{"acme": publish.Unchanged, "globex": publish.Unchanged, "initech": publish.Unchanged}, statuses(rep))
	assert.Equal(t, before, gentest.Snapshot(t, out), "a second run writes nothing")
	assert.Contains(t, stdout, "globex: unchanged")
}

func TestGenerateOneJobChangeTouchesOnlyItsTenant(t *testing.T) {
	out := t.TempDir()
	in := gentest.Copy(t, "../tenants")
	generate(t, in, out)
	globex, initech := gentest.Snapshot(t, filepath.Join(out, "globex")), gentest.Snapshot(t, filepath.Join(out, "initech"))

	gentest.Edit(t, in, "acme/jobs/qwen3-32b.yaml", `  - "32768"`, `  - "16384"`)
	rep, stdout := generate(t, in, out)
	assert.Equal(t, map[string]publish.Status{"acme": publish.Updated, "globex": publish.Unchanged, "initech": publish.Unchanged}, statuses(rep))
	assert.Equal(t, globex, gentest.Snapshot(t, filepath.Join(out, "globex")))
	assert.Equal(t, initech, gentest.Snapshot(t, filepath.Join(out, "initech")))
	assert.Equal(t, 2, gentest.Commits(t, filepath.Join(out, "acme")))

	var acme TenantReport
	for _, tr := range rep.Tenants {
		if tr.Tenant == "acme" {
			acme = tr
		}
	}
	for _, c := range acme.Changes {
		assert.Equal(t, publish.Modified, c.Op)
		assert.True(t, strings.HasPrefix(c.Path, "jobs/qwen3-32b/"), "only the job's files change: %s", c.Path)
	}
	assert.Contains(t, stdout, "acme: updated (")
	repo, err := git.PlainOpen(filepath.Join(out, "acme"))
	require.NoError(t, err)
	head, err := repo.Head()
	require.NoError(t, err)
	c, err := repo.CommitObject(head.Hash())
	require.NoError(t, err)
	assert.Contains(t, c.Message, "inferplane: update tenant acme")
	assert.Contains(t, c.Message, "job qwen3-32b:\n  modified  jobs/qwen3-32b/")
}

func TestGenerateDryRunWritesNothing(t *testing.T) {
	ctx := context.Background()
	in := gentest.Copy(t, "../tenants")

	// Nothing generated yet: everything would be created, and no folder appears.
	fresh := filepath.Join(t.TempDir(), "out")
	o := options(in, fresh)
	o.DryRun = true
	rep, err := Generate(ctx, o)
	require.NoError(t, err)
	out1 := text(rep)
	assert.Equal(t, map[string]publish.Status{"acme": publish.Created, "globex": publish.Created, "initech": publish.Created}, statuses(rep))
	assert.NoDirExists(t, fresh)
	assert.Contains(t, out1, "acme: would be created (")
	assert.Contains(t, out1, "--- /dev/null\n+++ b/vcluster.yaml\n")

	// After a real run, a changed job shows as a diff of just what changed.
	out := t.TempDir()
	generate(t, in, out)
	before := gentest.Snapshot(t, out)
	gentest.Edit(t, in, "globex/jobs/llama-70b.yaml", "modelCacheSize: 400Gi", "modelCacheSize: 500Gi")
	o = options(in, out)
	o.DryRun = true
	rep, err = Generate(ctx, o)
	require.NoError(t, err)
	out2 := text(rep)
	assert.Equal(t, map[string]publish.Status{"acme": publish.Unchanged, "globex": publish.Updated, "initech": publish.Unchanged}, statuses(rep))
	assert.Equal(t, before, gentest.Snapshot(t, out), "a dry run writes nothing")
	assert.Contains(t, out2, "globex: would be updated (")
	assert.Contains(t, out2, "--- a/jobs/llama-70b/job.yaml\n+++ b/jobs/llama-70b/job.yaml\n")
	assert.Contains(t, out2, "-  modelCacheSize: 400Gi\n+  modelCacheSize: 500Gi\n")
}

type want = gentest.Want

// TestGenerateBadInputWritesNothing breaks the bundled examples one way at a time. Every run
// must fail with problems naming the file, the field and what was expected, and leave the
// output exactly as it was: nothing written, nothing committed.
func TestGenerateBadInputWritesNothing(t *testing.T) {
	const (
		qwen     = "acme/jobs/qwen3-32b.yaml"
		kimi     = "globex/jobs/kimi-k2.yaml"
		parakeet = "acme/jobs/transcribe.yaml"
		mistral  = "acme/jobs/mistral-small.yaml"
	)
	out := t.TempDir()
	generate(t, gentest.Copy(t, "../tenants"), out)
	good := gentest.Snapshot(t, out)

	cases := []struct {
		name   string
		mutate func(t *testing.T, m fstest.MapFS)
		opts   func(o *Options)
		want   []want
	}{
		{"malformed YAML", func(t *testing.T, m fstest.MapFS) { m[qwen] = gentest.File("spec:\n  replicas: 1\n nodeType: x\n") }, nil,
			[]want{{"tenants/" + qwen, "", "malformed YAML: line", "valid YAML"}}},
		{"unknown field", func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, qwen, "replicas: 2", "replica: 2") }, nil,
			[]want{{"tenants/" + qwen, "spec.replica", "unknown field", "replicas"}}},
		{"wrong apiVersion", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, qwen, "inferplane.io/v1alpha1", "inferplane.io/v2")
		}, nil,
			[]want{{"tenants/" + qwen, "apiVersion", `is "inferplane.io/v2"`, "inferplane.io/v1alpha1"}}},
		{"kind in the wrong folder", func(t *testing.T, m fstest.MapFS) {
			m["acme/jobs/h100.yaml"] = m["nodetypes/metal3.gpu-h100.yaml"]
		}, nil, []want{{"tenants/acme/jobs/h100.yaml", "kind", "belongs in nodetypes/", "ManagedInferenceJob"}}},
		{"tenant folder named nodetypes", func(t *testing.T, m fstest.MapFS) {
			m["nodetypes/tenant.yaml"] = gentest.File(strings.ReplaceAll(string(m["initech/tenant.yaml"].Data), "name: initech", "name: nodetypes"))
		}, nil, []want{{"tenants/nodetypes/tenant.yaml", "kind", "nodetypes/ holds NodeType files", "a tenant cannot be named nodetypes"}}},
		{"tenant name differs from its folder", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, "initech/tenant.yaml", "name: initech", "name: initech-inc")
		}, nil,
			[]want{{"tenants/initech/tenant.yaml", "metadata.name", `is "initech-inc"`, `"initech", the name of the tenant's folder`}}},
		{"duplicate tenant", func(t *testing.T, m fstest.MapFS) { m["initech/tenant.yml"] = m["initech/tenant.yaml"] }, nil,
			[]want{{"tenants/initech/tenant.yml", "metadata.name", `duplicate tenant name "initech"`, "a name no other tenant uses"}}},
		{"duplicate job", func(t *testing.T, m fstest.MapFS) { m["acme/jobs/qwen-copy.yaml"] = m[qwen] }, nil,
			[]want{{"tenants/" + qwen, "metadata.name", `duplicate job name "qwen3-32b"`, "a name no other job uses"}}},
		{"duplicate node type", func(t *testing.T, m fstest.MapFS) {
			m["nodetypes/h100-again.yaml"] = m["nodetypes/metal3.gpu-h100.yaml"]
		}, nil,
			[]want{{"tenants/nodetypes/metal3.gpu-h100.yaml", "metadata.name", `duplicate node type name "metal3.gpu-h100"`, "a name no other node type uses"}}},
		{"duplicate master", func(t *testing.T, m fstest.MapFS) { m["masters/copy.yaml"] = m["masters/mistral-small-24b.yaml"] }, nil,
			[]want{{"tenants/masters/mistral-small-24b.yaml", "metadata.name", `duplicate master name "mistral-small-24b"`, "a name no other master uses"}}},
		{"unknown model", func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, qwen, "Qwen/Qwen3-32B", "Qwen/Qwen9") }, nil,
			[]want{{"tenants/" + qwen, "spec.model", `unknown model "Qwen/Qwen9"`, "a recipe model id"}}},
		{"unknown variant", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, kimi, "  replicas:", "  variant: int4\n  replicas:")
		}, nil,
			[]want{{"tenants/" + kimi, "spec.variant", `no variant "int4"`, "a variant of the recipe"}}},
		{"unknown strategy", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, kimi, "  replicas:", "  strategy: ring\n  replicas:")
		}, nil,
			[]want{{"tenants/" + kimi, "spec.strategy", `unknown strategy "ring"`, "compatible with"}}},
		{"unknown node type", func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, kimi, "metal3.gpu-h200", "metal3.gpu-h300") }, nil,
			[]want{{"tenants/" + kimi, "spec.nodeType", `no NodeType "metal3.gpu-h300"`, "did you mean metal3.gpu-h100, metal3.gpu-h200?"}}},
		{"gpuCount differs from the master", func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, kimi, "gpuCount: 16", "gpuCount: 8") }, nil,
			[]want{{"tenants/" + kimi, "spec.gpuCount", "is 8", "must equal perReplicaGPUCount 16 of ModelMaster"}}},
		{"GPUs that do not split over whole nodes", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, "masters/mistral-small-24b.yaml", "tensorParallelSize: 1\n  perReplicaGPUCount: 1", "tensorParallelSize: 12\n  perReplicaGPUCount: 12")
			gentest.Edit(t, m, mistral, "gpuCount: 1", "gpuCount: 12")
		}, nil, []want{{"tenants/" + mistral, "spec.nodeType", "not a whole number of such nodes", "a multi-node replica takes whole nodes"}}},
		{"multi-node Parakeet job", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, parakeet, "gpuCount: 1", "gpuCount: 16")
			gentest.Edit(t, m, "acme/tenant.yaml", "gpus: 16", "gpus: 64")
		}, nil, []want{{"tenants/" + parakeet, "spec.gpuCount", "is 16", "must equal perReplicaGPUCount 1 of ModelMaster parakeet-tdt-0.6b-v3"}}},
		{"node type outside allowedNodeTypes", func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, qwen, "metal3.gpu-h100", "metal3.gpu-h200") }, nil,
			[]want{{"tenants/" + qwen, "spec.nodeType", "not allowed for Tenant acme", "Tenant acme may use: metal3.gpu-h100"}}},
		{"a tenant list wider than its tier's", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, "initech/tenant.yaml", "allowedNodeTypes: []", "allowedNodeTypes: [metal3.*]")
		}, nil, []want{{"tenants/initech/tenant.yaml", "spec.allowedNodeTypes[0]", `is "metal3.*": must be within Tier h100-dedicated's node types (metal3.gpu-h100)`, "never widen it"}}},
		{"a tier that does not exist", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, "globex/tenant.yaml", "tier: h200-dedicated", "tier: h300-dedicated")
		}, nil, []want{{"tenants/globex/tenant.yaml", "spec.tier", `"h300-dedicated": no Tier "h300-dedicated" in tenants/tiers/ (the tiers: h100-dedicated, h200-dedicated)`, "did you mean h100-dedicated, h200-dedicated?"}}},
		{"render problem: no Argo CD connector", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, "acme/tenant.yaml", "  argoCD:\n    connector: argocd-main\n", "")
		}, nil, []want{{"tenants/acme/tenant.yaml", "spec.argoCD.connector", "required when the tenant has jobs", "connector"}}},
		{"push credentials not in the environment", func(t *testing.T, m fstest.MapFS) {
			gentest.Edit(t, m, "initech/tenant.yaml", "  argoCD:", "  git:\n    url: https://git.example.com/initech.git\n    auth: {passwordEnv: INITECH_TOKEN}\n  argoCD:")
		}, nil, []want{{"tenants/initech/tenant.yaml", "spec.git.auth.passwordEnv", "INITECH_TOKEN is not set", "password or token"}}},
		{"the check refuses a tenant", nil, func(o *Options) {
			o.Check = func(tenant string, files render.Files) error {
				if tenant == "globex" && files["jobs/kimi-k2/r0-n1-vm.yaml"] != nil {
					return errors.New("VirtualMachine globex/kimi-k2-r0-n1: denied")
				}
				return nil
			}
		}, []want{{"globex", "", "refused by the check: VirtualMachine globex/kimi-k2-r0-n1: denied", "objects the admission policy admits"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := gentest.Copy(t, "../tenants")
			if tc.mutate != nil {
				tc.mutate(t, in)
			}
			for _, dir := range []string{out, filepath.Join(t.TempDir(), "fresh")} {
				o := options(in, dir)
				if tc.opts != nil {
					tc.opts(&o)
				}
				rep, err := Generate(context.Background(), o)
				require.Error(t, err)
				assert.Nil(t, rep, "nothing reported as done")
				gentest.AssertProblems(t, err, tc.want)
			}
			assert.Equal(t, good, gentest.Snapshot(t, out), "nothing written or committed")
		})
	}
}

// TestGenerateQuotaKeepsWhatRuns: a GPU quota lowered below what a tenant's repository runs
// is rendered and stops nothing (its cluster's ResourceQuota keeps room for what runs); a job
// that grows past what the repository runs is refused and nothing is written; a tenant with no
// repository yet runs nothing, so all its jobs are held to the quota.
func TestGenerateQuotaKeepsWhatRuns(t *testing.T) {
	out := t.TempDir()
	in := gentest.Copy(t, "../tenants")
	generate(t, in, out)

	gentest.Edit(t, in, "globex/tenant.yaml", "  argoCD:", "  quota: {gpus: 16}\n  argoCD:")
	rep, _ := generate(t, in, out)
	assert.Equal(t, publish.Updated, statuses(rep)["globex"])
	files := gentest.WorkTree(t, filepath.Join(out, "globex"))
	assert.Contains(t, string(files["addons/tenant.yaml"]), "gpus: 16")
	assert.Contains(t, string(files["vcluster.yaml"]), "requests.nvidia.com/gpu: 24", "room for the 24 GPUs that run")

	good := gentest.Snapshot(t, out)
	gentest.Edit(t, in, "globex/jobs/kimi-k2.yaml", "replicas: 1", "replicas: 2")
	_, err := Generate(context.Background(), options(in, out))
	gentest.AssertProblems(t, err, []want{{"tenants/globex/jobs/kimi-k2.yaml", "spec.replicas",
		"is 2: needs 32 GPUs (2 replicas x 16), but Tenant globex's GPU quota is 16 and its other jobs use 8 (llama-70b 1x8): 8 left", ""}})
	assert.Equal(t, good, gentest.Snapshot(t, out), "nothing written or committed")

	gentest.Edit(t, in, "globex/jobs/kimi-k2.yaml", "replicas: 2", "replicas: 1")
	_, err = Generate(context.Background(), options(in, filepath.Join(t.TempDir(), "fresh")))
	gentest.AssertProblems(t, err, []want{
		{"tenants/globex/jobs/kimi-k2.yaml", "spec.replicas", "is 1: needs 16 GPUs (1 replica x 16), but Tenant globex's GPU quota is 16 and its other jobs use 8 (llama-70b 1x8): 8 left", ""},
		{"tenants/globex/jobs/llama-70b.yaml", "spec.replicas", "is 1: needs 8 GPUs (1 replica x 8), but Tenant globex's GPU quota is 16 and its other jobs use 16 (kimi-k2 1x16): 0 left", ""},
	})
}

func TestGenerateMissingFolders(t *testing.T) {
	dir := t.TempDir()
	_, err := Generate(context.Background(), Options{TenantsDir: filepath.Join(dir, "nope"), OutDir: filepath.Join(dir, "out")})
	require.ErrorContains(t, err, "nope: does not exist or is not a folder; expected a folder with nodetypes/")

	// Without recipes, the recipe jobs fail and say why.
	_, err = Generate(context.Background(), Options{TenantsDir: "../tenants", RecipesDir: filepath.Join(dir, "no-recipes"), OutDir: filepath.Join(dir, "out")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-recipes: does not exist, so only hand-written masters and Parakeet resolve")
	assert.NoDirExists(t, filepath.Join(dir, "out"))
}

// bareRemote is a bare repository standing in for a git server.

func requireGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: go-git's file:// transport and the HTTP test server run git's own pack programs")
	}
}

func TestGeneratePushesToARemote(t *testing.T) {
	requireGit(t)
	bare := gentest.BareRepo(t)
	in := gentest.Copy(t, "../tenants")
	gentest.Edit(t, in, "globex/tenant.yaml", "  argoCD:", "  git:\n    url: file://"+bare+"\n    branch: gitops\n  argoCD:")
	out := t.TempDir()

	rep, stdout := generate(t, in, out)
	assert.Equal(t, publish.Created, statuses(rep)["globex"])
	assert.Contains(t, stdout, ", pushed)")
	pushed, _ := gentest.BranchFiles(t, bare, "gitops")
	assert.Equal(t, gentest.WorkTree(t, filepath.Join(out, "globex")), pushed)
	// The Application pulls from the tenant's own URL and branch.
	app := string(pushed["argocd/applications/kimi-k2.yaml"])
	assert.Contains(t, app, "repoURL: file://"+bare)
	assert.Contains(t, app, "targetRevision: gitops")

	rep, _ = generate(t, in, out)
	assert.Equal(t, publish.Unchanged, statuses(rep)["globex"])
}

func TestGeneratePublishFailureNamesTheTenant(t *testing.T) {
	in := gentest.Copy(t, "../tenants")
	gentest.Edit(t, in, "globex/tenant.yaml", "  argoCD:", "  git:\n    url: file://"+filepath.Join(t.TempDir(), "missing.git")+"\n  argoCD:")
	out := t.TempDir()
	rep, err := Generate(context.Background(), options(in, out))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tenant globex")
	// The other tenants' repositories are independent and were published.
	assert.Equal(t, map[string]publish.Status{"acme": publish.Created, "globex": "", "initech": publish.Created}, statuses(rep))
	assert.Contains(t, text(rep), "globex: failed:")
	assert.Empty(t, gentest.WorkTree(t, filepath.Join(out, "globex")), "no work tree written for the failed tenant")
}

// TestGeneratePushesOverHTTPWithCredentials pushes to a real git smart-HTTP server (git's own
// http-backend behind basic auth) with the credentials the tenant's spec.git.auth names, and
// checks the secret appears in no output, no error and no file of the repository.
func TestGeneratePushesOverHTTPWithCredentials(t *testing.T) {
	requireGit(t)
	root := t.TempDir()
	bare := filepath.Join(root, "globex.git")
	_, err := git.PlainInit(bare, true)
	require.NoError(t, err)
	const user, secret = "deploy-bot", "s3cret-token-0123456789"
	var sawAuth bool
	backend := &cgi.Handler{Path: mustLookPath(t, "git"), Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_COUNT=1",
			"GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != secret {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		sawAuth = true
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()

	in := gentest.Copy(t, "../tenants")
	gentest.Edit(t, in, "globex/tenant.yaml", "  argoCD:", fmt.Sprintf(
		"  git:\n    url: %s/globex.git\n    auth: {usernameEnv: GLOBEX_USER, passwordEnv: GLOBEX_TOKEN}\n  argoCD:", srv.URL))
	out := t.TempDir()
	o := options(in, out)
	o.Getenv = func(k string) string {
		return map[string]string{"GLOBEX_USER": user, "GLOBEX_TOKEN": secret}[k]
	}
	rep, err := Generate(context.Background(), o)
	require.NoError(t, err, text(rep))
	assert.True(t, sawAuth)
	assert.Equal(t, publish.Created, statuses(rep)["globex"])
	pushed, _ := gentest.BranchFiles(t, bare, "main")
	assert.Equal(t, gentest.WorkTree(t, filepath.Join(out, "globex")), pushed)

	// A wrong token fails the push, and the error does not echo it.
	gentest.Edit(t, in, "globex/jobs/kimi-k2.yaml", "modelCacheSize: 2Ti", "modelCacheSize: 3Ti")
	o.Getenv = func(k string) string {
		return map[string]string{"GLOBEX_USER": user, "GLOBEX_TOKEN": "wrong-" + secret}[k]
	}
	rep, err = Generate(context.Background(), o)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), secret)
	assert.NotContains(t, text(rep), secret)

	// The secret is nowhere in the repository, the work tree or its git metadata.
	require.NoError(t, filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s contains the secret", p)
		}
		return err
	}))
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err)
	return p
}

func TestGroup(t *testing.T) {
	assert.Equal(t, "job qwen", group("jobs/qwen/r0-n0-vm.yaml"))
	assert.Equal(t, "job qwen", group("argocd/applications/qwen.yaml"))
	assert.Equal(t, "tenant", group("vcluster.yaml"))
	assert.Equal(t, "tenant", group("argocd/appproject.yaml"))
}
