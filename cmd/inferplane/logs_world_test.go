package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/agent/guestlog"
	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/kubeletstandin"
	"github.com/inferplane/inferplane/e2e/lifecycletest"
	"github.com/inferplane/inferplane/e2e/proc"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/clientconfig"
)

// logsWorld is the whole log path on the real parts that run here: a real kube-apiserver
// (host and acme's cluster at once) configured to reach kubelets over TLS with a CA
// (--kubelet-certificate-authority) at their InternalIP; a Node whose InternalIP is 127.0.0.1
// and whose kubelet port is e2e/kubeletstandin's (a STAND-IN for the kubelet, virt-tail and
// the container runtime, which cannot run here); acme/mistral-small synced, its VMI running
// (written as KubeVirt would); the VMI's virt-launcher pod bound to that Node with the
// VMI's labels, as KubeVirt makes it; a console file for the VM's serial console, which the
// stand-in copies into the pod's guest-console-log; the real product API (productapi.Serve)
// with the clusters read from that API server; and the CLI's context signed in to it.
type logsWorld struct {
	env     *kubeenv.Env
	kubelet *kubeletstandin.Kubelet
	tree    jobsTree
	kc      string
	apiURL  string
	// console is the VM's serial console as a file: what the inference agent writes (its
	// records among the kernel's lines). writer writes it, or the real agent
	// (`inferplane agent --console FILE`).
	console string
	writer  *consoleWriter
	pod     string
	// api is the product API's process, when it runs in one.
	api *proc.Process
}

// testAPIConfig is the product API the world runs: the inputs, the host cluster (its
// kubeconfig, in a child), a work folder; it signs in staticTokens.
type testAPIConfig struct {
	Listen, Inputs, Kubeconfig, WorkDir string
}

func (c testAPIConfig) config(host *rest.Config) productapi.Config {
	return productapi.Config{Listen: c.Listen, Verifier: staticTokens{}, Inputs: inputsrepo.Options{URL: c.Inputs},
		Host: host, Registry: registry.Options{ArgoCDNamespace: registry.ArgoCDNamespace}, ReconcileInterval: -1,
		WorkDir: c.WorkDir, Logger: slog.New(slog.DiscardHandler)}
}

// serveTestAPI is a child's life (TestMain): serve the API of the configuration in file until
// SIGTERM.
func serveTestAPI(file string) int {
	b, err := os.ReadFile(file)
	var c testAPIConfig
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	var host *rest.Config
	if err == nil {
		host, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		cfg := c.config(host)
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		err = productapi.Serve(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "test API:", err)
		return 1
	}
	return 0
}

// startTestAPIProcess runs the API in a child of the test binary and waits until it is ready.
func startTestAPIProcess(t *testing.T, c testAPIConfig) (string, *proc.Process) {
	c.Listen = freePort(t)
	b, err := json.Marshal(c)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "api.json")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	p, err := proc.Start("product-api", os.Args[0], []string{"-test.run=^$"}, []string{testAPIEnv + "=" + file, "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(30 * time.Second) })
	u := "http://" + c.Listen
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if done, _ := p.Exited(); done || time.Now().After(deadline) {
			t.Fatalf("the API process did not become ready (ended: %v); its log ends:\n%s", done, p.Tail(30))
		}
		resp, err := http.Get(u + "/readyz")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return u, p
		}
	}
}

const (
	logsJob  = "mistral-small"
	logsVM   = "mistral-small-r0-n0"
	logsNode = "gpu-h100-01"
)

// staticTokens signs in "dana" (acme's developer) and "gina" (globex's admin).
type staticTokens struct{}

func (staticTokens) Verify(_ context.Context, raw string) (access.Identity, error) {
	for _, u := range apiUsers {
		if raw == strings.SplitN(u.Email, "@", 2)[0] {
			return access.Identity{Issuer: "https://idp.test", Subject: raw, Email: u.Email, EmailVerified: true, Name: u.Name, Groups: u.Groups}, nil
		}
	}
	return access.Identity{}, &access.TokenError{Kind: access.BadSignature, Err: errors.New("unknown test token")}
}

// startLogsWorld starts the world; apiProcess runs the product API in a process of its own (a
// child of the test binary, so that its memory is its own), else in the test's.
func startLogsWorld(t *testing.T, apiProcess bool) *logsWorld {
	ctx := context.Background()
	dir := t.TempDir()
	w := &logsWorld{tree: newJobsTree(t), console: filepath.Join(dir, "console-"+logsVM), pod: "virt-launcher-" + logsVM + "-x7k2p"}
	var err error
	w.kubelet, err = kubeletstandin.Start(filepath.Join(dir))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.kubelet.Close() })
	ca := filepath.Join(dir, "kubelet-ca.crt")
	require.NoError(t, os.WriteFile(ca, w.kubelet.CA, 0o600))
	if _, err := kubeenv.BinDir(); err != nil {
		if os.Getenv(kubeenv.EnvRequire) == "1" {
			t.Fatalf("kubeenv: %v", err)
		}
		t.Skipf("SKIPPED: no real API server: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	w.env, err = kubeenv.StartWith(sctx, kubeenv.Options{APIServerFlags: map[string]string{
		"kubelet-certificate-authority":   ca,
		"kubelet-preferred-address-types": "InternalIP",
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.env.Stop() })

	out, err := w.tree.run(t, "generate")
	require.NoError(t, err, out)
	world := &lifecycletest.World{Host: w.env, Cluster: w.env, Repo: filepath.Join(w.tree.out, "acme"), Tenant: "acme"}
	world.Sync(t, logsJob)
	now := time.Now().UTC().Truncate(time.Second)
	world.SetApplication(t, logsJob, lifecycletest.Synced(now, "0123abcd"))
	world.BindClaims(t, logsJob)
	world.PutVMI(t, logsVM, lifecycletest.All(lifecycletest.Phase(kubevirtv1.Running, logsNode, now), lifecycletest.Interface("10.244.1.7"),
		lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "", "HTTP probe failed with statuscode: 503", now)))
	w.nodeAndPod(t)

	cl, err := w.kubelet.Container("acme", w.pod, joblogs.Container)
	require.NoError(t, err)
	tctx, stop := context.WithCancel(ctx)
	tailed := make(chan error, 1)
	go func() { tailed <- kubeletstandin.Tail(tctx, w.console, cl) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-tailed) })
	w.writer = newConsoleWriter(t, w.console)

	// The registry: acme's Argo CD cluster Secret, its server this API server.
	require.NoError(t, w.env.EnsureNamespace(ctx, registry.ArgoCDNamespace))
	require.NoError(t, w.env.Client.Create(ctx, argoClusterSecret(t, "acme", w.env.Config)))
	w.kc = filepath.Join(dir, "kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(w.kc, "host", map[string]*rest.Config{"host": w.env.Config, "acme": w.env.Config}))

	r := apitest.Remotes{Dir: filepath.Join(dir, "git")}
	inputs := apitest.BundledInputs(t, r)
	if apiProcess {
		w.apiURL, w.api = startTestAPIProcess(t, testAPIConfig{Inputs: inputs, Kubeconfig: w.kc, WorkDir: filepath.Join(dir, "work")})
	} else {
		w.apiURL = startInProcessAPI(t, testAPIConfig{Inputs: inputs, WorkDir: filepath.Join(dir, "work")}.config(w.env.Config))
	}

	// The customer's CLI, signed in to the API as dana (the token the verifier above knows).
	cfgDir := filepath.Join(dir, "cli")
	t.Setenv(clientconfig.EnvDir, cfgDir)
	store, err := clientconfig.Open()
	require.NoError(t, err)
	cfg, err := store.Load()
	require.NoError(t, err)
	name := clientconfig.NameFor(w.apiURL)
	cfg.Set(clientconfig.Context{Name: name, Server: w.apiURL, Issuer: "https://idp.test", ClientID: "inferplane", Tenant: "acme", User: "dana@acme.example"})
	cfg.CurrentContext = name
	require.NoError(t, store.Save(cfg))
	require.NoError(t, store.SaveTokens(name, clientconfig.Tokens{IDToken: "dana", Expiry: time.Now().Add(24 * time.Hour)}))
	return w
}

// nodeAndPod writes what the kubelet and KubeVirt would: the Node (InternalIP 127.0.0.1, the
// kubelet stand-in's port) and the VMI's virt-launcher pod bound to it, labelled as KubeVirt
// labels it (kubevirt.io=virt-launcher, kubevirt.io/created-by the VMI's UID, and the VMI's
// own labels), with its guest-console-log container, Running.
func (w *logsWorld) nodeAndPod(t *testing.T) {
	ctx := context.Background()
	c := w.env.Client
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: logsNode}}
	require.NoError(t, c.Create(ctx, node))
	node.Status = corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(w.kubelet.Port)}}}
	require.NoError(t, c.Status().Update(ctx, node))

	var vmi kubevirtv1.VirtualMachineInstance
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "acme", Name: logsVM}, &vmi))
	labels := map[string]string{kubevirtv1.AppLabel: joblogs.LauncherValue, kubevirtv1.CreatedByLabel: string(vmi.UID)}
	for k, v := range vmi.Labels {
		labels[k] = v
	}
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "default"}}))
	no := false
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: w.pod, Labels: labels,
		Annotations: map[string]string{kubevirtv1.DomainAnnotation: logsVM}},
		Spec: corev1.PodSpec{NodeName: logsNode, AutomountServiceAccountToken: &no, Containers: []corev1.Container{
			{Name: "compute", Image: "quay.io/kubevirt/virt-launcher:v1.7.0"},
			{Name: joblogs.Container, Image: "quay.io/kubevirt/virt-launcher:v1.7.0"},
		}}}
	require.NoError(t, c.Create(ctx, pod))
	pod.Status.Phase = corev1.PodRunning
	require.NoError(t, c.Status().Update(ctx, pod))
}

// consoleWriter is a STAND-IN for the inference agent where a test needs records at moments of
// its choosing (a stream cut between two lines, a line a second for a benchmark): it appends to
// the VM's console file what the agent writes there, guestlog records among the lines of the
// guest's kernel and cloud-init. TestJobLogsRealAgentEndToEndKubeletStandIn runs the real
// agent (`inferplane agent --console FILE`) on the same file instead.
type consoleWriter struct {
	t   testing.TB
	mu  sync.Mutex
	f   *os.File
	seq uint64
}

func newConsoleWriter(t testing.TB, path string) *consoleWriter {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return &consoleWriter{t: t, f: f}
}

// raw appends console lines that are no records (the kernel's, cloud-init's), with the
// carriage returns a serial console adds.
func (c *consoleWriter) raw(lines ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range lines {
		_, err := c.f.WriteString(l + "\r\n")
		require.NoError(c.t, err)
	}
}

func (c *consoleWriter) record(r guestlog.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	r.Seq = c.seq
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	b, err := guestlog.Encode(r)
	require.NoError(c.t, err)
	_, err = c.f.Write(append(bytes.TrimSuffix(b, []byte("\n")), '\r', '\n'))
	require.NoError(c.t, err)
}

// lines appends many lines of the server's in one write (a fast printer).
func (c *consoleWriter) lines(stream guestlog.Stream, ls []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var buf bytes.Buffer
	now := time.Now()
	for _, l := range ls {
		c.seq++
		b, err := guestlog.Encode(guestlog.Record{Seq: c.seq, Time: now, Kind: guestlog.KindLine, Stream: stream, Line: l})
		require.NoError(c.t, err)
		buf.Write(bytes.TrimSuffix(b, []byte("\n")))
		buf.WriteString("\r\n")
	}
	_, err := c.f.Write(buf.Bytes())
	require.NoError(c.t, err)
}

func (c *consoleWriter) line(stream guestlog.Stream, s string) {
	c.record(guestlog.Record{Kind: guestlog.KindLine, Stream: stream, Line: s})
}

func (c *consoleWriter) status(s guestlog.Status) {
	c.record(guestlog.Record{Kind: guestlog.KindStatus, Status: &s})
}

// liveOutput is a command's standard output as it is written, for a test to wait on.
type liveOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
	// onLine, when set, sees each whole line as it arrives, with the time.
	onLine func(line string, at time.Time)
	part   []byte
}

func newLiveOutput() *liveOutput { return &liveOutput{wrote: make(chan struct{})} }

func (l *liveOutput) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if l.onLine != nil {
		l.part = append(l.part, p...)
		for {
			i := bytes.IndexByte(l.part, '\n')
			if i < 0 {
				break
			}
			l.onLine(string(l.part[:i]), now)
			l.part = l.part[i+1:]
		}
	}
	close(l.wrote)
	l.wrote = make(chan struct{})
	return len(p), nil
}

func (l *liveOutput) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the output holds s.
func (l *liveOutput) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		has, wrote := strings.Contains(l.buf.String(), s), l.wrote
		l.mu.Unlock()
		if has {
			return
		}
		select {
		case <-wrote:
		case <-deadline:
			t.Fatalf("the output never held %q; it is:\n%s", s, l.String())
		}
	}
}

// startCLI runs a command in the background with its standard output live; stop ends it (as
// Ctrl-C would) and returns its error and standard error.
func startCLI(args ...string) (out *liveOutput, stop func() (error, string)) {
	ctx, cancel := context.WithCancel(context.Background())
	out = newLiveOutput()
	var errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	return out, func() (error, string) {
		cancel()
		err := <-done
		return err, errOut.String()
	}
}
