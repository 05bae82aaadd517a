package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/usage"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/resources"
)

// startGateway runs the real xDS server with replicas from a file, its own /health probes,
// and the endpoint health view on its admin address as `xds serve` mounts it.
func startGateway(t *testing.T, endpoints string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	require.NoError(t, os.WriteFile(file, []byte(endpoints), 0o644))
	var ctrl atomic.Pointer[xds.Controller]
	agg := usage.NewAggregator(usage.Options{Replicas: usage.ReplicaFunc(func() []usage.ReplicaCount {
		var out []usage.ReplicaCount
		if c := ctrl.Load(); c != nil {
			c.EachReplicaCount(func(tenant, job string, ready, total int) {
				out = append(out, usage.ReplicaCount{Tenant: tenant, Job: job, Ready: ready, Total: total})
			})
		}
		return out
	})})
	started := make(chan xds.Running, 1)
	cfg := xds.Config{
		GRPCAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
		Resources: resources.DefaultConfig("models.example.test"),
		Health: health.Config{Path: "/health", Interval: 50 * time.Millisecond, Timeout: 50 * time.Millisecond,
			UnhealthyThreshold: 2, HealthyThreshold: 2},
		Source:       &discovery.File{Path: file, Interval: 50 * time.Millisecond},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		HTTPHandlers: map[string]http.Handler{"/v1/": usage.Handler(agg)},
		Started: func(r xds.Running) {
			ctrl.Store(r.Controller)
			started <- r
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- xds.Serve(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case r := <-started:
		return "http://" + r.AdminAddr.String()
	case err := <-done:
		t.Fatalf("xds serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("xds serve did not start")
	}
	return ""
}

// The gateway's own view, read from the real xDS server: its /v1/health counts and the
// replicas its probes put in rotation, by name.
func TestRotationsFromTheGateway(t *testing.T) {
	up, err := replicadouble.Start(replicadouble.Options{Name: "up"})
	require.NoError(t, err)
	t.Cleanup(func() { up.Close() })
	down, err := replicadouble.Start(replicadouble.Options{Name: "down"})
	require.NoError(t, err)
	t.Cleanup(func() { down.Close() })
	down.SetHealthy(false)
	other, err := replicadouble.Start(replicadouble.Options{Name: "other"})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	base := startGateway(t, fmt.Sprintf(`endpoints:
- tenant: acme
  job: chat
  replicas:
  - {name: chat-r0-n0, address: 127.0.0.1, port: %d}
  - {name: chat-r1-n0, address: 127.0.0.1, port: %d}
- tenant: globex
  job: llama
  replicas: [{name: llama-r0-n0, address: 127.0.0.1, port: %d}]
`, up.Port(), down.Port(), other.Port()))

	c := Client{BaseURL: base}
	var got map[string]*lifecycle.Rotation
	require.Eventually(t, func() bool {
		got, err = c.Rotations(context.Background(), "acme")
		return err == nil && got["chat"] != nil && got["chat"].Ready == 1
	}, 20*time.Second, 50*time.Millisecond, "the gateway's probes take the healthy replica in: %v %v", got, err)
	assert.Equal(t, map[string]bool{"chat-r0-n0": true}, got["chat"].InRotation)
	assert.Equal(t, 2, got["chat"].Total)
	assert.Equal(t, "degraded", got["chat"].Status)
	assert.NotContains(t, got, "llama", "another tenant's endpoints are left out")
}

func TestGatewayUnreachable(t *testing.T) {
	_, err := Client{BaseURL: "http://127.0.0.1:1"}.Rotations(context.Background(), "acme")
	assert.ErrorContains(t, err, "gateway http://127.0.0.1:1/v1/health?tenant=acme: dial tcp 127.0.0.1:1: connect: connection refused")
	_, err = Client{BaseURL: "127.0.0.1:9090"}.Rotations(context.Background(), "acme")
	assert.ErrorContains(t, err, `gateway "127.0.0.1:9090": want the xDS server's admin URL`)
}
