package argocd_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/inferplane/inferplane/e2e/argocd"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/toolbin"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/internal/manifest"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

// world is the whole GitOps path on this machine: a host cluster running Argo CD (the
// package's API server), one API server per tenant standing in for its vCluster (each tenant's
// VMs live in its own cluster), each with a kube-controller-manager for deletions, inferplane's
// webhook per tenant cluster in the test process, and the tenants' repositories as `generate`
// writes them, which Argo CD pulls by file:// URL.
type world struct {
	root, out string
	argo      *argocd.ArgoCD
	tenants   map[string]*tenant
}

// tenant is one tenant's inputs, cluster and webhook.
type tenant struct {
	name    string
	inputs  fstest.MapFS // tenants/ with only this tenant (and the shared node types, masters)
	cluster *kubeenv.Env
	kcm     *argocd.ControllerManager
	hook    hookServer
}

// hookServer is `inferplane webhook serve` for one tenant cluster, on 127.0.0.1.
type hookServer struct {
	url     string
	port    int
	certDir string
	ca      []byte
	stop    context.CancelFunc
	done    chan error
	probes  string // the address of /healthz and /readyz
	// held keeps the two ports bound from when generate writes them into the add-ons until
	// the webhook binds them, minutes later: closed, another process (a second make test
	// beside this one) could take one meanwhile.
	held []net.Listener
}

// release frees the held ports for the webhook to bind at once.
func (h *hookServer) release() {
	for _, l := range h.held {
		_ = l.Close()
	}
	h.held = nil
}

// bundledTenants are the example tenants in tenants/.
var bundledTenants = []string{"acme", "globex", "initech", "platform"}

func newWorld(t *testing.T) *world {
	t.Helper()
	kubeenv.Require(t, host)
	dirs := toolbin.Require(t, toolbin.ArgoCD, toolbin.Kustomize, toolbin.KubeControllerManager)
	argoDir, kustomizeDir, kcmDir := dirs[0], dirs[1], dirs[2]
	ctx := context.Background()
	w := &world{root: kubeenv.RepoRoot(), out: t.TempDir(), tenants: map[string]*tenant{}}
	ctrllog.SetLogger(testLogger())

	hostKCM, err := argocd.StartControllerManager(ctx, kcmDir, host.Config, "host")
	t.Cleanup(func() { _ = hostKCM.Stop() })
	require.NoError(t, err)
	w.startTenantClusters(t, kcmDir)

	for _, tn := range w.tenants {
		w.generate(t, tn)
	}
	w.argo, err = argocd.Start(ctx, host, argocd.Options{
		ArgoCDDir: argoDir, KustomizeDir: kustomizeDir, Settings: healthChecks(t, w.root),
		// The add-ons' CRD wave moves on at the controller's periodic refresh (see Resync):
		// every 5 s here rather than every 2 to 3 minutes.
		Resync: 5 * time.Second,
	})
	t.Cleanup(func() { require.NoError(t, w.argo.Stop()) })
	require.NoError(t, err)
	for _, tn := range w.tenants {
		// The destination name is the tenant's (spec.argoCD.destination, default its name).
		require.NoError(t, w.argo.AddCluster(ctx, tn.name, tn.cluster.Config))
		hookCtx, cancel := context.WithCancel(ctx)
		tn.hook.stop, tn.hook.done = cancel, make(chan error, 1)
		go tn.serveWebhookWhenCRDsExist(hookCtx)
		require.NoError(t, w.argo.Create(ctx, w.rootApp(tn.name)))
	}
	return w
}

// healthChecks are the argocd-cm settings docs/argocd.md asks for: the health checks in
// config/argocd that the sync waves of the rendered repositories rely on.
func healthChecks(t *testing.T, root string) map[string]string {
	t.Helper()
	settings := map[string]string{}
	for key, file := range map[string]string{
		"resource.customizations.health.argoproj.io_Application":                       "application-health.lua",
		"resource.customizations.health.apiextensions.k8s.io_CustomResourceDefinition": "crd-health.lua",
	} {
		lua, err := os.ReadFile(filepath.Join(root, "config", "argocd", file))
		require.NoError(t, err)
		settings[key] = string(lua)
	}
	return settings
}

// startTenantClusters starts the tenants' API servers in parallel, with KubeVirt's CRDs only:
// the KubeVirt install is the platform's, inferplane's CRDs come from the add-ons Argo CD syncs.
func (w *world) startTenantClusters(t *testing.T, kcmDir string) {
	t.Helper()
	kubevirtCRDs, err := filepath.Glob(filepath.Join(w.root, "e2e", "kubeenv", "testdata", "crds", "kubevirt", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, kubevirtCRDs)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, name := range bundledTenants {
		tn := &tenant{name: name, inputs: tenantInputs(t, filepath.Join(w.root, "tenants"), name)}
		w.tenants[name] = tn
		tn.hook = newHookServer(t)
		wg.Go(func() {
			ctx := context.Background()
			env, err := kubeenv.StartWithCRDs(ctx, kubevirtCRDs...)
			var kcm *argocd.ControllerManager
			if err == nil {
				kcm, err = argocd.StartControllerManager(ctx, kcmDir, env.Config, name)
			}
			mu.Lock()
			defer mu.Unlock()
			tn.cluster, tn.kcm = env, kcm
			if err != nil {
				errs = append(errs, fmt.Errorf("tenant cluster %s: %w", name, err))
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, tn := range w.tenants {
			tn.hook.Stop(t)
			_ = tn.kcm.Stop()
			if err := tn.cluster.Stop(); err != nil {
				t.Errorf("stop tenant cluster %s: %v", tn.name, err)
			}
		}
	})
	require.NoError(t, errors.Join(errs...))
}

// tenantInputs reads tenants/ into memory with only one tenant's folder beside the shared node
// types and masters: each tenant is generated on its own, because its add-ons point at its own
// webhook (a port of its own on 127.0.0.1).
func tenantInputs(t *testing.T, dir, name string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	src := os.DirFS(dir)
	require.NoError(t, fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		top, _, _ := strings.Cut(p, "/")
		if top != "nodetypes" && top != "masters" && top != name {
			return nil
		}
		data, err := fs.ReadFile(src, p)
		out[p] = &fstest.MapFile{Data: data}
		return err
	}))
	return out
}

// generate runs `inferplane generate` for one tenant into w.out, as the CLI does (the admission
// check included), with Argo CD pulling from the file:// URL of out/<tenant> and the add-ons
// registering the tenant's webhook by URL on 127.0.0.1 (an API server would reach a webhook
// Service at its ClusterIP, off loopback). It returns the new HEAD.
func (w *world) generate(t *testing.T, tn *tenant) string {
	t.Helper()
	_, err := generator.Generate(context.Background(), generator.Options{
		RecipesDir: filepath.Join(w.root, "recipes"),
		TenantsDir: "tenants", Tenants: tn.inputs,
		OutDir:  w.out,
		RepoURL: "file://" + w.out + "/{tenant}",
		Render:  render.Options{Webhook: install.ManifestOptions{URL: tn.hook.url, CABundle: tn.hook.ca}},
		Check:   admissionCheck,
	})
	require.NoError(t, err)
	return w.head(t, tn.name)
}

// admissionCheck is the CLI's: the webhook's policy over the rendered files, offline.
func admissionCheck(_ string, files render.Files) error {
	denied, err := policy.ReviewFiles(context.Background(), nil, files)
	if err != nil {
		return err
	}
	if lines := policy.DenialLines(denied); len(lines) > 0 {
		return errors.New(strings.Join(lines, "\n"))
	}
	return nil
}

// head is the commit out/<tenant> is at.
func (w *world) head(t *testing.T, tenant string) string {
	t.Helper()
	return strings.TrimSpace(w.git(t, tenant, "rev-parse", "HEAD"))
}

func (w *world) git(t *testing.T, tenant string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", filepath.Join(w.out, tenant)}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=operator", "GIT_AUTHOR_EMAIL=operator@localhost",
		"GIT_COMMITTER_NAME=operator", "GIT_COMMITTER_EMAIL=operator@localhost")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return string(out)
}

// rootApp is the operator's app-of-apps for a tenant: it syncs the repository's argocd/ folder
// (the AppProjects and Applications generate renders) into Argo CD's own namespace.
func (w *world) rootApp(tenant string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(argocd.ApplicationGVK)
	u.SetName(rootName(tenant))
	u.Object["spec"] = map[string]any{
		"project": "default",
		"source": map[string]any{
			"repoURL": "file://" + filepath.Join(w.out, tenant), "targetRevision": "main", "path": "argocd",
			"directory": map[string]any{"recurse": true},
		},
		"destination": map[string]any{"server": argocd.InClusterServer, "namespace": argocd.DefaultNamespace},
		"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true, "selfHeal": true}},
	}
	return u
}

func rootName(tenant string) string { return tenant + "-root" }

// renderedApps lists the Application names in a tenant repository's argocd/ folder.
func (w *world) renderedApps(t *testing.T, tenant string) []string {
	t.Helper()
	var names []string
	for _, o := range w.renderedObjects(t, tenant, "argocd") {
		if o.GetKind() == "Application" {
			names = append(names, o.GetName())
		}
	}
	require.NotEmpty(t, names)
	return names
}

// renderedObjects decodes every object under a folder of a tenant's repository.
func (w *world) renderedObjects(t *testing.T, tenant, dir string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	root := filepath.Join(w.out, tenant, dir)
	if _, err := os.Stat(root); os.IsNotExist(err) {
		return nil // a tenant without jobs has no jobs/
	}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Base(p) == "kustomization.yaml" || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		decoded, err := manifest.Decode(data)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		objs = append(objs, decoded...)
		return nil
	}))
	return objs
}

// waitAllSynced waits until every tenant's root app and every Application its repository
// renders exist, are Synced, and their last sync operation Succeeded, as long as they keep moving (idle without a move ends the wait) and at most max; never past
// the test binary's own deadline (-timeout), so that a failure lists the Applications' states.
// An Application whose sync Argo CD gave up on ends the wait at once: it will not be retried.
func (w *world) waitAllSynced(t *testing.T, idle, max time.Duration) map[string]*argocd.Application {
	t.Helper()
	var want []string
	for _, name := range bundledTenants {
		want = append(want, rootName(name))
		want = append(want, w.renderedApps(t, name)...)
	}
	if dl, ok := t.Deadline(); ok {
		max = min(max, time.Until(dl)-2*time.Minute)
	}
	start := time.Now()
	var got map[string]*argocd.Application
	require.NoError(t, w.argo.WaitForProgress(context.Background(), idle, max, "every Application Synced and Succeeded",
		func(apps map[string]*argocd.Application) (bool, error) {
			got = apps
			done := true
			for _, n := range want {
				app, ok := apps[n]
				switch {
				case ok && app.SyncedAndSucceeded():
				case ok && app.GaveUp():
					return false, fmt.Errorf("Argo CD gave up syncing %s (retries spent): %s", n, app.OperationMessages())
				default:
					done = false
				}
			}
			return done, nil
		}))
	t.Logf("every Application synced after %s (load %s)", time.Since(start).Round(time.Second), loadavg())
	return got
}

// loadavg is the machine's load averages, for the log.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// newHookServer prepares a webhook for one tenant cluster: a serving certificate for 127.0.0.1
// and a port, known before `generate` renders the add-ons that register it.
func newHookServer(t *testing.T) hookServer {
	t.Helper()
	ports := make([]int, 2)
	held := make([]net.Listener, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i], held[i] = l.Addr().(*net.TCPAddr).Port, l
		t.Cleanup(func() { _ = l.Close() })
	}
	b, err := webhook.SelfSigned([]string{"127.0.0.1"}, time.Now(), 24*time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, b.WriteDir(dir))
	return hookServer{
		url: fmt.Sprintf("https://127.0.0.1:%d", ports[0]), port: ports[0], certDir: dir, ca: b.CA,
		probes: fmt.Sprintf("127.0.0.1:%d", ports[1]), held: held,
	}
}

// serveWebhookWhenCRDsExist starts the tenant's webhook once the add-ons have installed
// inferplane's CRDs in its cluster and the API server serves them: the webhook watches Tenants,
// NodeTypes and ModelMasters and cannot start before their kinds are served (in a real tenant
// cluster its pod restarts until then). Until it serves, the API server refuses inferplane's
// objects (failurePolicy Fail) and Argo CD retries.
func (tn *tenant) serveWebhookWhenCRDsExist(ctx context.Context) {
	names := []string{"nodetypes.inferplane.io", "modelmasters.inferplane.io", "tenants.inferplane.io"}
	// Argo CD creates the CRDs when it syncs the add-ons, minutes from now on a busy machine:
	// wait for the objects, then until the API server serves their kinds.
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			if tn.cluster.Client.Get(ctx, client.ObjectKey{Name: n}, &apiextensionsv1.CustomResourceDefinition{}) != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err == nil {
		err = tn.cluster.WaitCRDsServed(ctx, names...)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = nil // stopped before the CRDs came
		}
		tn.hook.done <- err
		return
	}
	port := tn.hook.port
	tn.hook.release()
	tn.hook.done <- webhook.Serve(ctx, tn.cluster.Config, webhook.ServeOptions{
		Host: "127.0.0.1", Port: port, CertDir: tn.hook.certDir, MetricsAddr: "0",
		ProbeAddr: tn.hook.probes,
		Logger:    testLogger(),
	})
}

// testLogger writes warnings and errors to stderr; the webhook logs its denials at info.
func testLogger() logr.Logger {
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Stop stops the webhook and waits for it to drain.
func (h *hookServer) Stop(t *testing.T) {
	if h.stop == nil {
		return
	}
	h.stop()
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("webhook %s: %v", h.url, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("webhook %s did not stop", h.url)
	}
	h.stop = nil
}
