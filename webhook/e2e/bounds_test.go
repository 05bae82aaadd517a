package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
	"github.com/inferplane/inferplane/webhook"
)

// controllerRuntimeCut is past the timeouts controller-runtime fixes for its webhook, metrics
// and probe servers (a request's headers and the TLS handshake: 32 s), with room for a loaded
// machine: only a server without them reaches it.
const controllerRuntimeCut = 90 * time.Second

// TestWebhookHoldsAgainstHostileClients attacks the webhook's three servers (admission over
// TLS, /metrics, the probes) while the API server keeps calling it: every attack is answered
// or cut, admission goes on, and the peak memory stays bounded. What controller-runtime lets be
// set is set short here through ServeOptions (the guard's body timeout, the bounds of each
// request); its servers' own timeouts are its fixed ones (docs/servers.md).
func TestWebhookHoldsAgainstHostileClients(t *testing.T) {
	kubeenv.Require(t, env)
	applyPolicyData(t)
	srv := startServer(t, webhook.ServeOptions{Guard: webhook.GuardOptions{BodyTimeout: time.Second},
		Bounds: serve.HTTP{WriteTimeout: 2 * time.Second}})
	register(t, "inferplane-policy-bounds", srv.URL, srv.CA)
	admitted := func(ctx context.Context) error {
		err := env.DryRun(ctx, probeVM())
		if err == nil || !strings.Contains(err.Error(), "denied the request") {
			return fmt.Errorf("the API server's admission through the webhook: want the probe denied, got %v", err)
		}
		return nil
	}
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(srv.CA))
	hostOf := func(u string) string { p, _ := url.Parse(u); return p.Host }
	// The guard answers every refusal as an errored AdmissionReview, in HTTP 200.
	refused := []int{http.StatusOK}
	// The three servers are attacked side by side (their fixed 32 s would take three times as
	// long one after the other), so each case's peak memory is the process's, with the other
	// two's attacks in it: the 500 idle connections' bound is for all three servers' 1,500.
	const idleMemory = 64 << 20
	t.Run("admission", func(t *testing.T) {
		t.Parallel()
		target := servetest.Target{Addr: hostOf(srv.URL), TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
			Method: http.MethodPost, Path: "/validate/virtualmachines", ContentType: "application/json", Normal: admitted}
		servetest.Run(t, target, servetest.Options{Within: controllerRuntimeCut}, []servetest.Case{
			{Name: "slow header", Attack: servetest.SlowHeader(time.Second), Status: []int{400, 408}, Cut: true},
			{Name: "slow review", Attack: servetest.SlowBody(200 * time.Millisecond), Status: refused, Cut: true},
			{Name: "500 idle connections, no TLS handshake", Attack: servetest.IdleConns(500), Cut: true, Memory: idleMemory},
			{Name: "1 MiB header", Attack: servetest.BigHeader(1 << 20), Status: append([]int{431}, refused...), Cut: true},
			{Name: "10 MB reviews, four at once", Attack: servetest.BigBody(10_000_000, 4), Status: refused, Cut: true},
			{Name: "a review nested 100,000 deep", Attack: servetest.DeepJSON("request", 100_000), Status: refused},
		})
	})
	for name, base := range map[string]string{"metrics": srv.MetricsURL, "probes": srv.ProbeURL + "/readyz"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u, _ := url.Parse(base)
			target := servetest.Target{Addr: u.Host, Method: http.MethodPost, Path: u.Path, Normal: func(ctx context.Context) error {
				if err := admitted(ctx); err != nil {
					return err
				}
				return servetest.Get(base)(ctx)
			}}
			servetest.Run(t, target, servetest.Options{Within: controllerRuntimeCut}, []servetest.Case{
				{Name: "slow header", Attack: servetest.SlowHeader(time.Second), Status: []int{400, 408}, Cut: true},
				{Name: "500 idle connections", Attack: servetest.IdleConns(500), Cut: true, Memory: idleMemory},
				{Name: "1 MiB header", Attack: servetest.BigHeader(1 << 20), Status: []int{200, 405, 431}, Cut: true},
				{Name: "10 MB bodies, four at once", Attack: servetest.BigBody(10_000_000, 4), Status: []int{200, 405}, Cut: true},
			})
		})
	}
}
