package xds

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/resources"
)

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

// fastHealth probes often so tests see changes quickly.
var fastHealth = health.Config{Path: "/health", Interval: 50 * time.Millisecond, Timeout: 50 * time.Millisecond,
	UnhealthyThreshold: 2, HealthyThreshold: 2}

type process struct {
	Running
	cancel context.CancelFunc
	done   chan error
	conn   *grpc.ClientConn
}

// serve runs the whole xDS server process on loopback ports.
func serve(t *testing.T, cfg Config) *process {
	t.Helper()
	cfg.GRPCAddress, cfg.AdminAddress = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.Resources.Domain == "" {
		cfg.Resources = resources.DefaultConfig("example.test")
	}
	if cfg.Health.Interval == 0 {
		cfg.Health = fastHealth
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	started := make(chan Running, 1)
	cfg.Started = func(r Running) { started <- r }
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- Serve(ctx, cfg) }()
	select {
	case p.Running = <-started:
	case err := <-p.done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start")
	}
	conn, err := grpc.NewClient(p.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	p.conn = conn
	t.Cleanup(func() {
		conn.Close()
		cancel()
		<-p.done
	})
	return p
}

// testWriter sends the process's logs to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func startDoubles(t *testing.T, hosts ...string) []*replicadouble.Double {
	t.Helper()
	var out []*replicadouble.Double
	for i, h := range hosts {
		d, err := replicadouble.Start(replicadouble.Options{Name: fmt.Sprintf("double-%d", i), Addr: h + ":0"})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		out = append(out, d)
	}
	return out
}

func addrs(ds ...*replicadouble.Double) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Addr())
	}
	slices.Sort(out)
	return out
}

func endpointsAre(cluster string, want []string) func(adstest.State) bool {
	return func(s adstest.State) bool {
		got, ok := s.Endpoints[cluster]
		return ok && slices.Equal(got, want)
	}
}

func waitAll(t *testing.T, ctx context.Context, agents []*adstest.Agent, cond func(adstest.State) bool, msg string) {
	t.Helper()
	for _, a := range agents {
		require.NoError(t, a.WaitFor(ctx, cond), "%s (%s)", msg, a.NodeID)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeWithFileSource runs the process as `inferplane xds serve --source file` does, with
// replica doubles on loopback, and watches it through real ADS sessions (both protocols).
func TestServeWithFileSource(t *testing.T) {
	ds := startDoubles(t, "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1")
	chat, asr := ds[:3], ds[3]
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	write := func(extra string) {
		var b strings.Builder
		b.WriteString("endpoints:\n- tenant: acme\n  job: chat\n  replicas:\n")
		for _, d := range chat {
			fmt.Fprintf(&b, "  - {address: %s, port: %d}\n", d.Host(), d.Port())
		}
		fmt.Fprintf(&b, "- {tenant: acme, job: asr, runtime: parakeet, requireAPIKey: false, replicas: [{address: %s, port: %d}]}\n", asr.Host(), asr.Port())
		b.WriteString(extra)
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(b.String()), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	write("")

	extraHealth := grpchealth.NewServer()
	p := serve(t, Config{
		Source:       &discovery.File{Path: path, Interval: 20 * time.Millisecond},
		GRPCServices: []func(*grpc.Server){func(g *grpc.Server) { healthpb.RegisterHealthServer(g, extraHealth) }},
		HTTPHandlers: map[string]http.Handler{"GET /extra": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "extra handler")
		})},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sotw := &adstest.Agent{NodeID: "envoy-sotw"}
	delta := &adstest.Agent{NodeID: "envoy-delta", Delta: true}
	agents := []*adstest.Agent{sotw, delta}
	for _, a := range agents {
		require.NoError(t, adstest.Start(ctx, p.conn, a))
	}
	waitAll(t, ctx, agents, func(s adstest.State) bool {
		return endpointsAre("acme/chat", addrs(chat...))(s) && endpointsAre("acme/asr", addrs(asr))(s) && len(s.Routes) == 1
	}, "initial endpoints")

	admin := "http://" + p.AdminAddr.String()
	code, _ := get(t, admin+"/healthz")
	assert.Equal(t, 200, code)
	code, _ = get(t, admin+"/readyz")
	assert.Equal(t, 200, code)

	// A replica fails its health checks: it leaves; it recovers: it returns.
	chat[1].SetHealthy(false)
	waitAll(t, ctx, agents, endpointsAre("acme/chat", addrs(chat[0], chat[2])), "unhealthy replica removed")
	chat[1].SetHealthy(true)
	waitAll(t, ctx, agents, endpointsAre("acme/chat", addrs(chat...)), "recovered replica back")

	// A replica dies outright (connection refused).
	require.NoError(t, chat[2].Close())
	waitAll(t, ctx, agents, endpointsAre("acme/chat", addrs(chat[0], chat[1])), "dead replica removed")

	// The file changes: a new endpoint appears.
	embed := startDoubles(t, "127.0.0.1")[0]
	write(fmt.Sprintf("- {tenant: beta, job: embed, replicas: [{address: %s, port: %d}]}\n", embed.Host(), embed.Port()))
	waitAll(t, ctx, agents, func(s adstest.State) bool {
		return len(s.Clusters) == 3 && endpointsAre("beta/embed", addrs(embed))(s)
	}, "new endpoint from the reloaded file")

	// Admin: status, metrics and the extension points.
	code, body := get(t, admin+"/debug/endpoints")
	require.Equal(t, 200, code)
	var status struct {
		Version   string                     `json:"version"`
		Nodes     []string                   `json:"nodes"`
		Endpoints []gatewayv1.EndpointStatus `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &status))
	assert.Equal(t, []string{"envoy-delta", "envoy-sotw"}, status.Nodes)
	require.Len(t, status.Endpoints, 3)
	assert.Equal(t, "chat.acme.example.test", status.Endpoints[1].Host)
	assert.Equal(t, 2, status.Endpoints[1].Serving)
	assert.False(t, status.Endpoints[0].RequireAPIKey, "acme/asr requires no key")

	code, metrics := get(t, admin+"/metrics")
	require.Equal(t, 200, code)
	for _, m := range []string{
		`inferplane_xds_streams{protocol="sotw"} 1`, `inferplane_xds_streams{protocol="delta"} 1`,
		`inferplane_xds_nodes 2`, `inferplane_xds_replicas{state="serving"} 4`, `inferplane_xds_endpoints 3`,
		`inferplane_xds_health_probes_total{result="failure"}`, "inferplane_xds_health_publish_seconds_bucket",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		assert.Contains(t, metrics, m)
	}
	code, body = get(t, admin+"/extra")
	assert.Equal(t, 200, code)
	assert.Equal(t, "extra handler", body)
	hc, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "an extra gRPC service shares the ADS server")
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hc.Status)

	// Graceful shutdown: the process returns, the ADS streams end.
	p.cancel()
	select {
	case err := <-p.done:
		require.NoError(t, err)
		p.done <- nil // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	for _, a := range agents {
		select {
		case <-a.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: stream still open after shutdown", a.NodeID)
		}
	}
}

func TestServeStartErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no source", Config{}, "no replica source configured"},
		{"missing file", Config{Source: &discovery.File{Path: missing}}, "replica source: file source: open " + missing},
		{"no domain", Config{Source: &discovery.File{Path: missing}, Resources: resources.Config{}}, "domain: required"},
		{"bad grpc address", Config{Source: &discovery.File{Path: missing}, GRPCAddress: "127.0.0.1:99999"}, "grpc listen address"},
		{"bad probe settings", Config{Source: &discovery.File{Path: missing}, Health: health.Config{Path: "/health", Interval: time.Second}},
			"probe timeout 0s: must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if tc.name != "no domain" {
				cfg.Resources = resources.DefaultConfig("example.test")
			}
			if cfg.Health.Path == "" {
				cfg.Health = fastHealth
			}
			cfg.GRPCAddress = cmp.Or(cfg.GRPCAddress, "127.0.0.1:0")
			cfg.AdminAddress = "127.0.0.1:0"
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := Serve(ctx, cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
