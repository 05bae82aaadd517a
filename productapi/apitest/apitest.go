// Package apitest builds what the product API's tests and benchmarks run against: inputs
// repositories (the bundled examples, or a synthetic fleet) whose tenants push to bare
// repositories of their own, and product API replicas over them.
package apitest

import (
	"context"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/productapi"
)

// TokenEnv is the variable the tenants' spec.git.auth names for their repositories' token.
const TokenEnv = "INFERPLANE_TEST_GIT_TOKEN"

// Root is the checkout's root (where recipes/ and tenants/ are).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Bundled reads the checkout's recipes/ and tenants/ into a map of path to content.
func Bundled(t testing.TB) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, dir := range []string{"recipes", "tenants"} {
		err := filepath.WalkDir(filepath.Join(Root(), dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			rel, _ := filepath.Rel(Root(), p)
			files[filepath.ToSlash(rel)] = string(data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// Remotes says where tenant repositories live: a git server over HTTP (with its token, which
// the tenants' spec.git.auth names through TokenEnv), or file:// folders under Dir.
type Remotes struct {
	Server *gitserver.Server
	Dir    string
}

// URL is a repository's URL.
func (r Remotes) URL(name string) string {
	if r.Server != nil {
		return r.Server.RepoURL(name)
	}
	return "file://" + filepath.Join(r.Dir, name+".git")
}

// Path is a repository's folder.
func (r Remotes) Path(name string) string {
	if r.Server != nil {
		return r.Server.Dir(name)
	}
	return filepath.Join(r.Dir, name+".git")
}

// New creates a bare repository.
func (r Remotes) New(t testing.TB, name string, files map[string]string) string {
	gitserver.Init(t, r.Path(name), files)
	return r.URL(name)
}

// WithGit sets spec.git of a tenant.yaml to its repository (and the token's variable over
// HTTP).
func (r Remotes) WithGit(tenantYAML, tenant string) string {
	git := "  git:\n    url: " + r.URL(tenant) + "\n"
	if r.Server != nil {
		git += "    auth:\n      passwordEnv: " + TokenEnv + "\n"
	}
	return strings.Replace(tenantYAML, "\nspec:\n", "\nspec:\n"+git, 1)
}

// Getenv answers TokenEnv with the server's token.
func (r Remotes) Getenv(name string) string {
	if name == TokenEnv && r.Server != nil {
		return r.Server.Token
	}
	return ""
}

// BundledInputs creates the inputs repository "inputs" from the bundled examples, each tenant
// pushing to an empty repository of its own, and returns its URL; edits change the files first
// (a test's own tenant.yaml, as the operator would write it).
func BundledInputs(t testing.TB, r Remotes, edits ...func(files map[string]string)) string {
	files := Bundled(t)
	for _, edit := range edits {
		edit(files)
	}
	for p, content := range files {
		if tenant, ok := strings.CutSuffix(strings.TrimPrefix(p, "tenants/"), "/tenant.yaml"); ok && strings.HasPrefix(p, "tenants/") {
			files[p] = r.WithGit(content, tenant)
			r.New(t, tenant, nil)
		}
	}
	return r.New(t, "inputs", files)
}

// Fleet creates the inputs repository "inputs" of n synthetic tenants (fleet-0000, ...) with
// jobs jobs each (Qwen3-32B on one H100 GPU), beside the bundled recipes and node types;
// tenant repositories are created for the first `repos` tenants only (the ones a benchmark
// writes to; the others are never rendered).
func Fleet(t testing.TB, r Remotes, n, jobs, repos int) (url string, tenants []string) {
	files := map[string]string{}
	for p, c := range Bundled(t) {
		if strings.HasPrefix(p, "recipes/") || strings.HasPrefix(p, "tenants/nodetypes/") || strings.HasPrefix(p, "tenants/masters/") {
			files[p] = c
		}
	}
	for i := range n {
		name := fmt.Sprintf("fleet-%04d", i)
		tenants = append(tenants, name)
		files["tenants/"+name+"/tenant.yaml"] = r.WithGit(FleetTenant(name), name)
		for j := range jobs {
			files[fmt.Sprintf("tenants/%s/jobs/job-%02d.yaml", name, j)] = FleetJob(fmt.Sprintf("job-%02d", j))
		}
		if i < repos {
			r.New(t, name, nil)
		}
	}
	return r.New(t, "inputs", files), tenants
}

// FleetTenant is a synthetic tenant: H100s, room for 1,000 one-GPU jobs, the group <name>-dev
// as developers and <name>-ops as admins.
func FleetTenant(name string) string {
	return `apiVersion: inferplane.io/v1alpha1
kind: Tenant
metadata:
  name: ` + name + `
spec:
  tier: h100-dedicated
  allowedNodeTypes:
  - metal3.gpu-h100
  quota: {gpus: 1000}
  argoCD:
    connector: argocd-main
  access:
  - group: ` + name + `-dev
    role: developer
  - group: ` + name + `-ops
    role: admin
`
}

// FleetJob is a one-GPU Qwen3-32B job.
func FleetJob(name string) string {
	return `apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: ` + name + `
spec:
  model: Qwen/Qwen3-32B
  replicas: 1
  gpuCount: 1
  nodeType: metal3.gpu-h100
`
}

// Ctx is a context for tests.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Replica is a product API replica served over loopback HTTP: the API at URL and, with a peer
// token, the peer route at PeerURL (a listener of its own, as api serve's --peer-listen).
type Replica struct {
	Server  *productapi.Server
	URL     string
	PeerURL string
}

// StartReplica runs a replica over its own clone of the inputs at inputsURL (with the git
// server's token when r has one) and its own work folder, signed in by v, with o's other
// options; it has fetched the inputs once it returns. Its reconcile loop does not run unless o
// says so (tests call Reconcile). With a peer token it serves the peer route at a loopback
// listener of its own (Replica.PeerURL), where its peers reach it unless o names another peer
// URL (a proxy in front of it).
func StartReplica(t testing.TB, r Remotes, inputsURL string, v productapi.Verifier, o productapi.Options) Replica {
	t.Helper()
	return StartReplicaWith(t, r, inputsrepo.Options{URL: inputsURL}, v, o)
}

// StartReplicaWith is StartReplica with inputs options of its own (the benchmarks' group commit
// settings); the credentials file is written here.
func StartReplicaWith(t testing.TB, r Remotes, opts inputsrepo.Options, v productapi.Verifier, o productapi.Options) Replica {
	t.Helper()
	if r.Server != nil {
		opts.CredentialsFile = filepath.Join(t.TempDir(), "credentials")
		if err := os.WriteFile(opts.CredentialsFile, []byte(r.Server.Token), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := inputsrepo.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	o.Inputs, o.Verifier, o.WorkDir, o.Getenv = repo, v, t.TempDir(), r.Getenv
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = -1
	}
	if o.NoClusterReason == "" {
		o.NoClusterReason = "this API server runs without a host cluster (api serve without --kubeconfig)"
	}
	hs, peers := httptest.NewUnstartedServer(nil), httptest.NewUnstartedServer(nil)
	t.Cleanup(func() { hs.Close(); peers.Close() })
	if o.PeerToken != "" && o.PeerURL == "" { // its peers reach it at its peer listener
		o.PeerURL = "http://" + peers.Listener.Addr().String()
	}
	s, err := productapi.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler, peers.Config.Handler = s.Handler(), s.PeerHandler()
	hs.Start()
	rep := Replica{Server: s, URL: hs.URL}
	if o.PeerToken != "" {
		peers.Start()
		rep.PeerURL = peers.URL
	}
	return rep
}
