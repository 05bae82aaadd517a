// Package argocd runs the real Argo CD for tests: argocd-repo-server and
// argocd-application-controller, built from Argo CD's own module by hack/gitopsbin.sh, against a
// test API server from e2e/kubeenv, with Redis in the test process (miniredis) and kustomize on
// the repo server's PATH. It installs what those two need and nothing else: Argo CD's CRDs, its
// settings (argocd-cm, argocd-secret) and the `default` AppProject (which only argocd-server, not
// run here, would create). Clusters are registered as Argo CD cluster Secrets pointing at
// 127.0.0.1, and repositories are served from file:// URLs: no traffic leaves loopback.
//
// Every process the harness starts is marked with proc.OwnerEnv, dies with the test binary, and is
// stopped by Stop.
package argocd

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/proc"
)

// DefaultNamespace is where Argo CD runs and keeps its Applications.
const DefaultNamespace = "argocd"

// InClusterServer is the destination server of the cluster Argo CD runs in. Argo CD maps it to
// its own client configuration (the kubeconfig, on 127.0.0.1): it is a name, never dialled.
const InClusterServer = "https://kubernetes.default.svc"

// Options configure Start.
type Options struct {
	// ArgoCDDir holds argocd, its argocd-repo-server and argocd-application-controller links and
	// crds/ (what `hack/gitopsbin.sh argocd` prints); KustomizeDir holds kustomize.
	ArgoCDDir, KustomizeDir string
	// Namespace is Argo CD's namespace. Empty: DefaultNamespace.
	Namespace string
	// Settings are added to argocd-cm (e.g. resource health customizations).
	Settings map[string]string
	// Resync is how often the controller refreshes every Application without an event (its
	// --app-resync; Argo CD's default is 120 s plus up to 60 s of jitter). A sync wave that waits
	// for a CRD to be established moves on only then: Argo CD does not track CRDs, so their
	// status changes wake no Application. Zero: Argo CD's default.
	Resync time.Duration
}

// ArgoCD is a running Argo CD.
type ArgoCD struct {
	Namespace string
	// Dir holds the kubeconfig, the processes' data folders and their logs.
	Dir string

	host  *kubeenv.Env
	redis *miniredis.Miniredis
	procs []*proc.Process
}

// Start installs Argo CD's CRDs and settings into host and starts its repo server and
// application controller. Stop it with Stop, also when Start fails halfway (it is nil-safe).
func Start(ctx context.Context, host *kubeenv.Env, o Options) (*ArgoCD, error) {
	proc.ReapOrphans()
	dir, err := os.MkdirTemp("", "inferplane-argocd-")
	if err != nil {
		return nil, err
	}
	a := &ArgoCD{Namespace: cmp.Or(o.Namespace, DefaultNamespace), Dir: dir, host: host}
	if err := a.start(ctx, o); err != nil {
		return a, errors.Join(err, a.Stop())
	}
	return a, nil
}

func (a *ArgoCD) start(ctx context.Context, o Options) error {
	crds, _ := filepath.Glob(filepath.Join(o.ArgoCDDir, "crds", "*.yaml"))
	if len(crds) == 0 {
		return fmt.Errorf("%s: no Argo CD CRDs in crds/ (rebuild with hack/gitopsbin.sh argocd)", o.ArgoCDDir)
	}
	if err := a.host.InstallCRDs(ctx, crds...); err != nil {
		return err
	}
	if err := a.installSettings(ctx, o.Settings); err != nil {
		return err
	}
	a.redis = miniredis.NewMiniRedis()
	if err := a.redis.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	kubeconfig := filepath.Join(a.Dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, a.host.Config, a.Namespace); err != nil {
		return err
	}
	env, err := a.processEnv(o.KustomizeDir, kubeconfig)
	if err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	repoAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	common := []string{"--redis", a.redis.Addr(), "--loglevel", "info", "--logformat", "text"}
	repo, err := proc.Start("argocd-repo-server", filepath.Join(o.ArgoCDDir, "argocd-repo-server"), append([]string{
		"--address", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
		"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(ports[1]), "--disable-tls",
	}, common...), env, a.Dir)
	if err != nil {
		return err
	}
	a.procs = append(a.procs, repo)
	if err := waitListening(ctx, repo, repoAddr); err != nil {
		return err
	}
	ctrlArgs := []string{"--repo-server", repoAddr, "--repo-server-plaintext", "--metrics-port", strconv.Itoa(ports[2])}
	if o.Resync > 0 {
		ctrlArgs = append(ctrlArgs, "--app-resync", strconv.Itoa(int(o.Resync.Seconds())), "--app-resync-jitter", "0")
	}
	ctrl, err := proc.Start("argocd-application-controller", filepath.Join(o.ArgoCDDir, "argocd-application-controller"),
		append(ctrlArgs, common...), env, a.Dir)
	if err != nil {
		return err
	}
	a.procs = append(a.procs, ctrl)
	return waitListening(ctx, ctrl, "127.0.0.1:"+strconv.Itoa(ports[2]))
}

// processEnv is the environment of both processes: Argo CD's "fake in cluster" mode (the
// kubeconfig stands in for a pod's service account), no GPG, every data path in a.Dir, and
// kustomize and git on PATH.
func (a *ArgoCD) processEnv(kustomizeDir, kubeconfig string) ([]string, error) {
	paths := map[string]string{
		"HOME": "home", "TMPDIR": "tmp", "ARGOCD_TLS_DATA_PATH": "tls", "ARGOCD_SSH_DATA_PATH": "ssh",
		"ARGOCD_GNUPGHOME": "gnupg", "ARGOCD_GPG_DATA_PATH": "gpg", "ARGOCD_APP_CONF_PATH": "conf",
	}
	env := []string{
		"PATH=" + kustomizeDir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"KUBECONFIG=" + kubeconfig,
		"ARGOCD_FAKE_IN_CLUSTER=true",
		"ARGOCD_GPG_ENABLED=false",
	}
	for k, sub := range paths {
		p := filepath.Join(a.Dir, sub)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, err
		}
		env = append(env, k+"="+p)
	}
	return env, nil
}

// installSettings creates Argo CD's namespace, argocd-cm, argocd-secret and the default project.
func (a *ArgoCD) installSettings(ctx context.Context, settings map[string]string) error {
	c := a.host.Client
	if err := a.host.EnsureNamespace(ctx, a.Namespace); err != nil {
		return err
	}
	// Argo CD reads only ConfigMaps and Secrets labelled as its own.
	labels := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Namespace: a.Namespace, Labels: labels}, Data: settings},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: a.Namespace, Labels: labels},
			StringData: map[string]string{"server.secretkey": hex.EncodeToString(key)}},
		defaultProject(a.Namespace),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// defaultProject is the AppProject argocd-server creates on start: anything goes.
func defaultProject(namespace string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": "default", "namespace": namespace},
		"spec": map[string]any{
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"server": "*", "namespace": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
		},
	}}
	return u
}

// AddCluster registers a cluster with Argo CD under name, by a cluster Secret carrying cfg's
// server address (127.0.0.1) and client certificate.
func (a *ArgoCD) AddCluster(ctx context.Context, name string, cfg *rest.Config) error {
	s, err := ClusterSecret(a.Namespace, name, cfg)
	if err != nil {
		return err
	}
	return a.host.Client.Create(ctx, s)
}

// ClusterSecret is Argo CD's cluster Secret (in namespace) of the cluster cfg reaches, under
// name: its server address and its TLS client credentials.
func ClusterSecret(namespace, name string, cfg *rest.Config) (*corev1.Secret, error) {
	c := map[string]any{"tlsClientConfig": map[string]any{"caData": cfg.CAData, "certData": cfg.CertData, "keyData": cfg.KeyData}}
	if cfg.BearerToken != "" {
		c["bearerToken"] = cfg.BearerToken
	}
	config, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "cluster-" + name, Namespace: namespace,
			Labels: map[string]string{"argocd.argoproj.io/secret-type": "cluster"},
		},
		Data: map[string][]byte{"name": []byte(name), "server": []byte(cfg.Host), "config": config},
	}, nil
}

// Check returns an error when a process has exited: a wait on Argo CD would otherwise only time
// out.
func (a *ArgoCD) Check() error {
	for _, p := range a.procs {
		if ok, _ := p.Exited(); ok {
			return proc.ErrExited(p)
		}
	}
	return nil
}

// Logs returns the last n lines of each process's log.
func (a *ArgoCD) Logs(n int) string {
	var s string
	for _, p := range a.procs {
		s += fmt.Sprintf("--- %s (%s)\n%s\n", p.Name, p.LogPath, p.Tail(n))
	}
	return s
}

// Stop stops the processes and Redis and removes the data folder (logs are kept when
// INFERPLANE_KEEP_ARGOCD is set, for debugging).
func (a *ArgoCD) Stop() error {
	if a == nil {
		return nil
	}
	for i := len(a.procs) - 1; i >= 0; i-- {
		a.procs[i].Stop(10 * time.Second)
	}
	a.procs = nil
	if a.redis != nil {
		a.redis.Close()
		a.redis = nil
	}
	if os.Getenv("INFERPLANE_KEEP_ARGOCD") != "" {
		fmt.Fprintf(os.Stderr, "argocd harness: logs kept in %s\n", a.Dir)
		return nil
	}
	return os.RemoveAll(a.Dir)
}

// writeKubeconfig writes a kubeconfig for cfg (a client certificate, as envtest makes) whose
// context namespace is namespace: Argo CD's processes take their namespace from it.
func writeKubeconfig(path string, cfg *rest.Config, namespace string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: namespace}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// freePorts reserves n loopback ports and releases them for the processes to take.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitListening waits until addr accepts connections, or p exits.
func waitListening(ctx context.Context, p *proc.Process, addr string) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		if ok, _ := p.Exited(); ok {
			return false, proc.ErrExited(p)
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s not listening on %s: %w\n%s", p.Name, addr, err, p.Tail(30))
	}
	return nil
}
