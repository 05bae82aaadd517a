// Package kubeenv runs a real etcd and kube-apiserver for tests, the way controller-runtime's
// envtest does, from binaries that hack/kubebin.sh compiles from the Go module proxy (no
// container engine or binary download exists on our machines).
//
// A test package starts one API server in TestMain:
//
//	var env *kubeenv.Env
//
//	func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }
//
// and each test that needs it calls kubeenv.Require(t, env). When the binaries are missing,
// Require skips with the reason, unless INFERPLANE_REQUIRE_KUBE=1 (set by `make test`), in
// which case Main fails the whole package: a CI run never passes by skipping.
package kubeenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/manifest"
)

// Environment variables the harness reads.
const (
	// EnvBinDir names the folder holding kube-apiserver and etcd (what hack/kubebin.sh prints).
	EnvBinDir = "INFERPLANE_KUBEBIN"
	// EnvRequire, when "1", turns missing binaries into a failure instead of a skip.
	EnvRequire = "INFERPLANE_REQUIRE_KUBE"
)

// FieldManager is the field owner of everything the harness applies.
const FieldManager = "inferplane-e2e"

// Env is a running API server and a client for it. The client validates strictly: an unknown
// or duplicate field in any object it creates or updates is an error, not a warning.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme

	testEnv *envtest.Environment
	// mapper is Client's REST mapper, reset once InstallCRDs has new kinds served.
	mapper *resettableMapper
	// work holds the servers' certificates and data (removed by Stop).
	work     string
	stopOnce sync.Once
	stopErr  error
}

// Scheme returns a scheme with the built-in kinds, CRDs, KubeVirt and inferplane's own types.
// Argo CD and vCluster objects are handled as unstructured (we do not import their modules).
func NewScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		kubevirtv1.AddToScheme,
		v1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err) // only a programming error in the static list above gets here
		}
	}
	return s
}

// RepoRoot is the folder of inferplane's go.mod, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// NewestBuild is the folder of the newest file pattern matches (a glob such as
// <cache>/<tool>/*/<binary>: the build scripts keep one folder per pin), or "" when none does.
func NewestBuild(pattern string) string {
	builds, _ := filepath.Glob(pattern)
	var newest string
	var newestMod time.Time
	for _, b := range builds {
		if st, err := os.Stat(b); err == nil && st.ModTime().After(newestMod) {
			newest, newestMod = filepath.Dir(b), st.ModTime()
		}
	}
	return newest
}

// BinDir finds the folder with kube-apiserver and etcd: $INFERPLANE_KUBEBIN, else the newest
// build in the repository's .cache/kubebin. It says what to run when there is none.
func BinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return dir, checkBins(dir)
	}
	newest := NewestBuild(filepath.Join(RepoRoot(), ".cache", "kubebin", "*", "kube-apiserver"))
	if newest == "" {
		return "", errors.New("no kube-apiserver/etcd build found: run `make kubebin` (or `make test`), " +
			"or set " + EnvBinDir + " to a folder holding both binaries")
	}
	return newest, checkBins(newest)
}

func checkBins(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.IsDir() {
			return fmt.Errorf("%s: %s missing (run `make kubebin`)", dir, name)
		}
	}
	return nil
}

// Options change how Start runs the API server.
type Options struct {
	// APIServerFlags are set on kube-apiserver's command line, e.g.
	// {"admission-control-config-file": path}.
	APIServerFlags map[string]string
	// CRDPaths are the CRD files installed; nil: every CRD the project knows (CRDPaths()).
	CRDPaths []string
	// WorkDir is a new folder for the servers' certificates and data. Empty: a temporary folder
	// named with the harness's marker, which the tests' reaper of orphans and make test's stray
	// check recognise; a program that is not a test and outlives test runs beside it (the
	// demo) names its own, so that neither takes its servers for a dead test's.
	WorkDir string
}

// Start starts etcd and kube-apiserver and installs every CRD the project knows (KubeVirt,
// Argo CD and inferplane's own), server-side.
func Start(ctx context.Context) (*Env, error) { return StartWith(ctx, Options{}) }

// StartWithCRDs is Start with only the CRDs in the given files installed (e.g. a tenant cluster
// that gets inferplane's own CRDs from Argo CD).
func StartWithCRDs(ctx context.Context, crdPaths ...string) (*Env, error) {
	return StartWith(ctx, Options{CRDPaths: crdPaths})
}

// StartWith is Start with options.
func StartWith(ctx context.Context, o Options) (*Env, error) {
	crdPaths := o.CRDPaths
	if crdPaths == nil {
		crdPaths = CRDPaths()
	}
	dir, err := BinDir()
	if err != nil {
		return nil, err
	}
	// The servers' folders carry the harness's marker: it reaches their command lines
	// (--cert-dir, --data-dir), which is how reapOrphans knows what the harness started.
	work := o.WorkDir
	if work == "" {
		work, err = os.MkdirTemp("", processMarker)
	} else {
		err = os.Mkdir(work, 0o700)
	}
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	te.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(work, "etcd")}
	api := te.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(work, "apiserver")
	for k, v := range o.APIServerFlags {
		api.Configure().Set(k, v)
	}
	for _, d := range []string{te.ControlPlane.Etcd.DataDir, api.CertDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	cfg, err := te.Start()
	if err != nil {
		_ = te.Stop()
		_ = os.RemoveAll(work)
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", dir, err)
	}
	env, err := newEnv(cfg, te)
	if env != nil {
		env.work = work
	}
	if err == nil {
		err = env.InstallCRDs(ctx, crdPaths...)
	}
	if err != nil {
		_ = te.Stop()
		_ = os.RemoveAll(work)
		return nil, err
	}
	return env, nil
}

func newEnv(cfg *rest.Config, te *envtest.Environment) (*Env, error) {
	// The default 5 QPS throttles bulk dry-runs of a few hundred rendered objects for no gain.
	cfg.QPS, cfg.Burst = 500, 1000
	s := NewScheme()
	mapper, err := newResettableMapper(cfg)
	if err != nil {
		return nil, fmt.Errorf("REST mapper for the test API server: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s, Mapper: mapper, FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		return nil, fmt.Errorf("client for the test API server: %w", err)
	}
	return &Env{Config: cfg, Client: c, Scheme: s, testEnv: te, mapper: mapper}, nil
}

// Connect is an Env for an API server that runs already (started by someone else): its
// client and InstallCRDs; Stop does nothing.
func Connect(cfg *rest.Config) (*Env, error) { return newEnv(rest.CopyConfig(cfg), nil) }

// Stop stops the API server and etcd and removes their data. Later calls do nothing (a test
// may stop a server on purpose before its cleanup runs).
func (e *Env) Stop() error {
	if e == nil || e.testEnv == nil {
		return nil
	}
	e.stopOnce.Do(func() {
		e.stopErr = e.testEnv.Stop()
		if e.work != "" {
			_ = os.RemoveAll(e.work)
		}
	})
	return e.stopErr
}

// StopAPIServer kills the kube-apiserver process (SIGKILL, as when it crashes or its machine
// goes away: a graceful stop can take envtest's whole 30-s stop timeout while watches are
// open); etcd and its data stay. StartAPIServer starts it again on the same port with the
// same certificates and service account keys, so every client configuration and token made
// before still works: tests of an API server outage use the pair.
func (e *Env) StopAPIServer() error {
	api := e.testEnv.ControlPlane.GetAPIServer()
	if pid, ok := childWithArg(api.Path, "--cert-dir="+api.CertDir); ok {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill kube-apiserver (pid %d): %w", pid, err)
		}
	}
	return api.Stop() // reaps it
}

// StartAPIServer starts the API server StopAPIServer stopped and waits until it is healthy.
func (e *Env) StartAPIServer() error {
	if err := e.testEnv.ControlPlane.GetAPIServer().Start(); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	return nil
}

// Another starts one more API server and etcd, with the same CRDs, for tests that need several
// clusters at once (a host cluster and tenant clusters); it is stopped when the test ends. It
// fails the test when Main's server could not start either (Require skips first).
func Another(t testing.TB) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, err := Start(ctx)
	if err != nil {
		t.Fatalf("kubeenv: another API server: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Logf("kubeenv: stop: %v", err)
		}
	})
	stopBeforeTimeout(e)
	return e
}

// Environment exposes envtest's environment, e.g. for its WebhookInstallOptions.
func (e *Env) Environment() *envtest.Environment { return e.testEnv }

// CRDPaths lists the CRD files the harness installs: upstream copies in testdata (see its
// PROVENANCE.md) and inferplane's generated CRDs in config/crd.
func CRDPaths() []string {
	root := RepoRoot()
	var paths []string
	for _, pattern := range []string{
		filepath.Join(root, "e2e", "kubeenv", "testdata", "crds", "*", "*.yaml"),
		filepath.Join(root, "config", "crd", "*.yaml"),
	} {
		m, _ := filepath.Glob(pattern)
		paths = append(paths, m...)
	}
	return paths
}

// InstallCRDs applies the CRDs in the given files server-side (the KubeVirt VMI CRD is too
// large for a client-side apply's last-applied annotation), waits until each is established
// and served (crdserved.go), and then resets the client's REST mapping, so that the caller can
// create objects of the new kinds at once.
func (e *Env) InstallCRDs(ctx context.Context, paths ...string) error {
	var names []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		objs, err := manifest.Decode(data)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, u := range objs {
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if err := e.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
				client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
				return fmt.Errorf("install CRD %s from %s: %w", u.GetName(), p, err)
			}
			names = append(names, u.GetName())
		}
	}
	return e.WaitCRDsServed(ctx, names...)
}

// EnsureNamespace creates a namespace if it does not exist yet.
func (e *Env) EnsureNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// DryRun asks the API server to create obj without storing it (dryRun=All, strict field
// validation): the schema, defaulting and admission (webhooks included) all run. The
// object's namespace is created first when missing, since a dry-run cannot do that. An object
// that already exists (a CRD the harness installed, a namespace an earlier dry-run needed) is
// dry-run as a server-side apply instead, which validates just as strictly.
func (e *Env) DryRun(ctx context.Context, obj client.Object) error {
	if ns := obj.GetNamespace(); ns != "" {
		if err := e.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	err := e.Client.Create(ctx, obj, client.DryRunAll)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return err
	}
	return e.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(FieldManager), client.ForceOwnership, client.DryRunAll)
}

// DryRunYAML dry-runs every object of a (multi-document) YAML stream and returns one error
// per rejected object, naming it.
func (e *Env) DryRunYAML(ctx context.Context, data []byte) []error {
	objs, err := manifest.Decode(data)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, u := range objs {
		if err := e.DryRun(ctx, u); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", Describe(u), err))
		}
	}
	return errs
}

// Describe names an object as kind/namespace/name for messages.
func Describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + "/" + u.GetName()
	}
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

// Main is TestMain's body: it starts the API server (when the binaries exist), stores it in
// *env, runs the tests and always stops it, so no process outlives the test binary's run.
func Main(m *testing.M, env **Env) int {
	// Flags are parsed here rather than in m.Run so the -test.timeout value is known below.
	flag.Parse()
	if dir, err := BinDir(); err == nil {
		reapOrphans(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	started, err := Start(ctx)
	cancel()
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			fmt.Fprintf(os.Stderr, "kubeenv: %v\n", err)
			return 1
		}
		startErr = err
	}
	*env = started
	if started != nil {
		stopBeforeTimeout(started)
	}
	defer func() {
		if err := started.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubeenv: stop: %v\n", err)
		}
	}()
	return m.Run()
}

// startErr is why Main could not start the server, for Require's skip message.
var startErr error

// Require skips the test when the API server is not running, saying why.
func Require(t testing.TB, env *Env) {
	t.Helper()
	if env == nil {
		t.Skipf("SKIPPED: no real API server: %v", startErr)
	}
}
