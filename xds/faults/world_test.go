package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/gateway"
	"github.com/inferplane/inferplane/gateway/keycheck"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/internal/envoystandin"
	"github.com/inferplane/inferplane/xds/internal/tenanttest"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
	"github.com/inferplane/inferplane/xds/resources"
)

const (
	domain   = "inference.test"
	keysNS   = "inferplane-system"
	acmeHost = "chat.acme." + domain
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// testWriter sends logs to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func logger(t *testing.T, name string) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("INFERPLANE_FAULTS_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level})).With("proc", name)
}

// proc is a process of the gateway run in the test binary: started, stopped (as SIGTERM stops
// it: its context ends and it shuts down gracefully) and started again on the same addresses.
// Others reach its gRPC port through a cutter (grpc is the cutter's address, inner the
// process's own), which can make it look crashed.
type proc struct {
	name        string
	grpc, admin string
	inner       string
	cutter      *cutter
	run         func(ctx context.Context) error
	cancel      context.CancelFunc
	done        chan error
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- p.run(ctx) }()
}

// stop ends the process and waits for it to exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if p.cancel == nil {
		return
	}
	p.cancel()
	select {
	case err := <-p.done:
		require.NoError(t, err, "%s stopped with an error", p.name)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop", p.name)
	}
	p.cancel = nil
}

// waitReady waits until the process's /readyz answers 200 and returns its text.
func (p *proc) waitReady(t *testing.T, within time.Duration) string {
	t.Helper()
	var body string
	require.Eventually(t, func() bool {
		select {
		case err := <-p.done:
			t.Fatalf("%s exited: %v", p.name, err)
		default:
		}
		code, b := httpGet("http://" + p.admin + "/readyz")
		body = b
		return code == http.StatusOK
	}, within, 50*time.Millisecond, "%s not ready", p.name)
	return body
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// clusterState is a tenant cluster as an xDS server's /debug/endpoints shows it.
func clusterState(p *proc, tenant string) (discovery.ClusterStatus, bool) {
	code, body := httpGet("http://" + p.admin + "/debug/endpoints")
	if code != http.StatusOK {
		return discovery.ClusterStatus{}, false
	}
	var doc struct {
		Source struct {
			TenantClusters []discovery.ClusterStatus `json:"tenantClusters"`
		} `json:"source"`
	}
	if json.Unmarshal([]byte(body), &doc) != nil {
		return discovery.ClusterStatus{}, false
	}
	for _, c := range doc.Source.TenantClusters {
		if c.Tenant == tenant {
			return c, true
		}
	}
	return discovery.ClusterStatus{}, false
}

// newXDS is an xDS server as gateway manifests runs it: every tenant cluster of the host's
// registry, the key checks at checks, its last known good replicas in its own file, the
// APIKey objects read for the keys' limits only.
func newXDS(t *testing.T, name string, host func() (*rest.Config, error), checks []string, dir string) *proc {
	p := newProc(t, name)
	known := filepath.Join(dir, name+"-known-good.json")
	p.run = func(ctx context.Context) error {
		cfg := gateway.Config{
			XDS: xds.Config{GRPCAddress: p.inner, AdminAddress: p.admin, Resources: resources.DefaultConfig(domain),
				Health: health.DefaultConfig(), ShutdownTimeout: 5 * time.Second, Logger: logger(t, name)},
			Source: gateway.Source{Kind: gateway.SourceClusters, Clusters: clusters.Options{ArgoCDNamespace: "argocd"},
				LastKnownGood: known},
			APIKeys: gateway.APIKeys{KeyChecks: checks, Namespace: keysNS, ServicesAddress: p.grpc, UsageFile: "-",
				UsageSaveInterval: 30 * time.Second},
			Kube: host,
		}
		return gateway.Run(ctx, cfg)
	}
	return p
}

func newProc(t *testing.T, name string) *proc {
	p := &proc{name: name, inner: freeAddr(t), admin: freeAddr(t)}
	p.cutter = newCutter(t, p.inner)
	p.grpc = p.cutter.front
	return p
}

// newKeyCheck is a key check as gateway manifests runs it: APIKey objects of the host.
func newKeyCheck(t *testing.T, name string, host func() (*rest.Config, error), secretFile string) *proc {
	p := newProc(t, name)
	p.run = func(ctx context.Context) error {
		return keycheck.Run(ctx, keycheck.Config{GRPCAddress: p.inner, AdminAddress: p.admin, Store: keycheck.Store{Namespace: keysNS},
			SecretFile: secretFile, Kube: host, Logger: logger(t, name)})
	}
	return p
}

// newKey stores a new key of tenant and returns it in the clear with its record.
func newKey(t *testing.T, ctx context.Context, store *keys.KubeStore, hasher *keys.Hasher, tenant string) (string, keys.Record, error) {
	t.Helper()
	key, id, err := keys.Generate(rand.Reader)
	require.NoError(t, err)
	rec := keys.Record{ID: id, Tenant: tenant, Hash: hasher.Hex(key), CreatedAt: time.Now().UTC().Truncate(time.Second)}
	return key, rec, store.Create(ctx, rec)
}

// result is one request of the load.
type result struct {
	at     time.Time
	host   string
	kind   string // valid, none, bad, revoked, other-tenant
	status int
	body   string // of an answer other than 200
	err    error
}

// load sends steady requests through the stand-in for Envoy until stopped, at most max
// requests: every tick a request with a valid key to each endpoint, and every fifth tick one
// that must be refused (no key, a wrong key, a revoked key, another tenant's key).
type load struct {
	url     string
	hosts   map[string]string // host -> valid key
	refused []struct{ kind, host, key string }
	every   time.Duration
	max     int

	mu       sync.Mutex
	results  []result
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func (l *load) start() {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.run()
}

func (l *load) run() {
	defer close(l.done)
	hc := &http.Client{Timeout: 10 * time.Second}
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		for host, key := range l.hosts {
			l.send(hc, host, "valid", key)
		}
		if n%5 == 0 && len(l.refused) > 0 {
			r := l.refused[(n/5)%len(l.refused)]
			l.send(hc, r.host, r.kind, r.key)
		}
		l.mu.Lock()
		full := len(l.results) >= l.max
		l.mu.Unlock()
		if full {
			return
		}
	}
}

func (l *load) send(hc *http.Client, host, kind, key string) {
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequest(http.MethodPost, l.url+"/v1/chat/completions", bytes.NewBufferString(body))
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res := result{at: time.Now(), host: host, kind: kind}
	resp, err := hc.Do(req)
	if err == nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		res.status = resp.StatusCode
		if res.status != http.StatusOK {
			res.body = strings.TrimSpace(string(b))
		}
	}
	res.err = err
	l.mu.Lock()
	l.results = append(l.results, res)
	l.mu.Unlock()
}

func (l *load) halt() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

// counts are the requests of a window of the load.
type counts struct {
	valid, failed int // with a valid key; of them, not answered 200
	refused       int // without a valid key
	leaked        int // of them, answered 2xx: let through
	failedClosed  int // of them, answered 5xx: the check failed and the request was refused anyway
	firstFailure  string
}

// window counts the requests sent in [from, to).
func (l *load) window(from, to time.Time) counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c counts
	note := func(r result, what string) {
		if c.firstFailure == "" {
			c.firstFailure = fmt.Sprintf("%s to %s at %s: %d %q %v", what, r.host, r.at.Format("15:04:05.000"), r.status, r.body, r.err)
		}
	}
	for _, r := range l.results {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		if r.kind == "valid" {
			c.valid++
			if r.status != http.StatusOK {
				c.failed++
				note(r, "valid key")
			}
			continue
		}
		c.refused++
		switch {
		case r.status >= 200 && r.status < 300:
			c.leaked++
			note(r, r.kind+" key")
		case r.status >= 500 || r.err != nil:
			c.failedClosed++
			note(r, r.kind+" key")
		}
	}
	return c
}

// seen records what reached the replicas.
type seen struct {
	mu       sync.Mutex
	byDouble map[string]int
	bad      []string // requests that reached a replica without a valid identity
	valid    map[string]string
}

func (s *seen) observe(double, tenant string) func(*http.Request) {
	return func(r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.byDouble[double]++
		id := r.Header.Get("X-Inferplane-Key-Id")
		switch {
		case r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "":
			s.bad = append(s.bad, double+": the key reached the replica")
		case s.valid[id] != tenant || r.Header.Get("X-Inferplane-Tenant") != tenant:
			s.bad = append(s.bad, fmt.Sprintf("%s: key id %q of tenant %q", double, id, r.Header.Get("X-Inferplane-Tenant")))
		}
	}
}

func (s *seen) allow(id, tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.valid[id] = tenant
}

func (s *seen) deny(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.valid, id)
}

func startDouble(t *testing.T, s *seen, name, tenant string) *replicadouble.Double {
	t.Helper()
	d, err := replicadouble.Start(replicadouble.Options{Name: name, Observe: s.observe(name, tenant)})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

// statusThrough is the status of one request with key to host through the stand-in.
func statusThrough(e *envoystandin.Envoy, host, key string) int {
	req, _ := http.NewRequest(http.MethodPost, e.URL()+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func dialXDS(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// loadavg is the machine's load average (1, 5 and 15 minutes), quoted beside each figure.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// firstTime polls cond every 10 ms (for at most 3 minutes) and sends the first time it holds.
func firstTime(cond func() bool) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if cond() {
				ch <- time.Now()
				return
			}
		}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan time.Time, what string) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(3 * time.Minute):
		t.Fatalf("never: %s", what)
		return time.Time{}
	}
}

// apiAnswers says whether the API server answers path (a list the gateway makes: the
// moment the cluster can be read; /readyz turns 200 only later, once every post-start hook
// has run).
func apiAnswers(cfg *rest.Config, path string) bool {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false
	}
	defer hc.CloseIdleConnections()
	hc.Timeout = time.Second
	resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// resyncs is how often a key check read its keys again after its store answered again.
func resyncs(k *proc) int {
	_, metrics := httpGet("http://" + k.admin + "/metrics")
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, "inferplane_keycheck_store_resyncs_total "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// world is the gateway under test and everything around it.
type world struct {
	ctx          context.Context
	host         *kubeenv.Env
	acme, globex *tenanttest.Cluster
	seen         *seen
	a0, a1, a2   *replicadouble.Double
	g0           *replicadouble.Double
	store        *keys.KubeStore
	hasher       *keys.Hasher
	secretFile   string
	k0, k1       *proc
	x0, x1, x2   *proc
	envoy        *envoystandin.Envoy
	load         *load
	// laterRevoked is a key of acme revoked after the host's outage.
	laterRevoked string
	laterRec     keys.Record
}

// newWorld starts the tenant clusters, the replicas, the keys, the gateway and the load.
func newWorld(t *testing.T, ctx context.Context, host *kubeenv.Env) *world {
	w := &world{ctx: ctx, host: host, seen: &seen{byDouble: map[string]int{}, valid: map[string]string{}}}
	w.acme, w.globex = tenanttest.New(t, ctx, "acme"), tenanttest.New(t, ctx, "globex")
	for _, ns := range []string{"argocd", keysNS} {
		require.NoError(t, host.EnsureNamespace(ctx, ns))
	}
	// acme's a0 and a1 serve; a2 runs and answers /health but its VMI is not Ready, so it must
	// never get a request. globex's g0 serves.
	node := func(tenant string, replica int, d *replicadouble.Double) vmitest.Node {
		return vmitest.Node{Tenant: tenant, Job: "chat", Runtime: "vllm", Replica: replica, ServingPort: d.Port(), RequireAPIKey: true}
	}
	w.a0, w.a1, w.a2 = startDouble(t, w.seen, "a0", "acme"), startDouble(t, w.seen, "a1", "acme"), startDouble(t, w.seen, "a2", "acme")
	w.g0 = startDouble(t, w.seen, "g0", "globex")
	tenanttest.StartVMI(t, ctx, w.acme.Env.Client, node("acme", 0, w.a0), w.a0, true)
	tenanttest.StartVMI(t, ctx, w.acme.Env.Client, node("acme", 1, w.a1), w.a1, true)
	tenanttest.StartVMI(t, ctx, w.acme.Env.Client, node("acme", 2, w.a2), w.a2, false)
	tenanttest.StartVMI(t, ctx, w.globex.Env.Client, node("globex", 0, w.g0), w.g0, true)
	for _, tc := range []*tenanttest.Cluster{w.acme, w.globex} {
		require.NoError(t, host.Client.Create(ctx, tc.Secret(t, ctx)))
	}
	keysFor := w.makeKeys(t)
	w.startGateway(t)
	l := &load{url: w.envoy.URL(), every: 50 * time.Millisecond, max: 40000,
		hosts: map[string]string{acmeHost: keysFor["acme"], "chat.globex." + domain: keysFor["globex"]},
		refused: []struct{ kind, host, key string }{
			{"none", acmeHost, ""}, {"bad", acmeHost, keysFor["acme"][:len(keysFor["acme"])-4] + "AAAA"},
			{"revoked", acmeHost, keysFor["revoked"]}, {"other-tenant", acmeHost, keysFor["globex"]},
		}}
	l.start()
	t.Cleanup(l.halt)
	w.load = l
	return w
}

// makeKeys writes the key secret and stores the keys: one per tenant for the load, one
// revoked, one to revoke after the host's outage.
func (w *world) makeKeys(t *testing.T) map[string]string {
	secret, err := keys.NewSecret()
	require.NoError(t, err)
	w.secretFile = filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(w.secretFile, []byte(secret), 0o600))
	raw, err := keys.LoadSecret(w.secretFile)
	require.NoError(t, err)
	w.hasher, err = keys.NewHasher(raw)
	require.NoError(t, err)
	w.store, err = keys.NewKubeStore(w.host.Config, keysNS)
	require.NoError(t, err)
	mustKey := func(tenant string) (string, keys.Record) {
		key, rec, err := newKey(t, w.ctx, w.store, w.hasher, tenant)
		require.NoError(t, err)
		w.seen.allow(rec.ID, tenant)
		return key, rec
	}
	out := map[string]string{}
	out["acme"], _ = mustKey("acme")
	out["globex"], _ = mustKey("globex")
	revokedKey, revoked := mustKey("acme")
	_, err = w.store.Revoke(w.ctx, revoked.ID, time.Now())
	require.NoError(t, err)
	w.seen.deny(revoked.ID)
	out["revoked"] = revokedKey
	w.laterRevoked, w.laterRec = mustKey("acme")
	return out
}

// startGateway starts two key checks, two xDS servers (a third is ready to start) and the
// stand-in for Envoy, and waits until they serve.
func (w *world) startGateway(t *testing.T) {
	hostCfg := func() (*rest.Config, error) { return rest.CopyConfig(w.host.Config), nil }
	dir := t.TempDir()
	w.k0, w.k1 = newKeyCheck(t, "k0", hostCfg, w.secretFile), newKeyCheck(t, "k1", hostCfg, w.secretFile)
	checks := []string{w.k0.grpc, w.k1.grpc}
	w.x0, w.x1, w.x2 = newXDS(t, "x0", hostCfg, checks, dir), newXDS(t, "x1", hostCfg, checks, dir), newXDS(t, "x2", hostCfg, checks, dir)
	t.Cleanup(func() { w.x2.stop(t) })
	for _, p := range []*proc{w.k0, w.k1, w.x0, w.x1} {
		p.start(t)
		t.Cleanup(func() { p.stop(t) })
	}
	for _, p := range []*proc{w.k0, w.k1, w.x0, w.x1} {
		p.waitReady(t, time.Minute)
	}
	var err error
	w.envoy, err = envoystandin.Start(envoystandin.Options{XDS: []string{w.x0.grpc, w.x1.grpc}, Delta: true, Logger: logger(t, "envoy")})
	require.NoError(t, err)
	t.Cleanup(w.envoy.Close)
	require.NoError(t, w.envoy.WaitFor(w.ctx, serving("acme/chat", w.a0, w.a1)), "acme's Ready replicas serve, not a2")
	require.NoError(t, w.envoy.WaitFor(w.ctx, serving("globex/chat", w.g0)))
	require.Eventually(t, func() bool { return len(w.envoy.HealthyChecks()) == 2 }, time.Minute, 50*time.Millisecond, "both key checks healthy")
}
