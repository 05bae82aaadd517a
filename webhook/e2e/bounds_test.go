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

// TestWebhookHoldsAgainstHostileClients attacks the webhook's three servers (admission over
// TLS, /metrics, the probes) while the API server keeps calling it: every attack is answered
// or cut, admission goes on, and the peak memory stays bounded. The bounds are set short
// through ServeOptions: Bounds for admission (and the guard's body timeout), AdminBounds for
// /metrics and the probes.
func TestWebhookHoldsAgainstHostileClients(t *testing.T) {
	kubeenv.Require(t, env)
	applyPolicyData(t)
	srv := startServer(t, webhook.ServeOptions{Guard: webhook.GuardOptions{BodyTimeout: time.Second},
		Bounds: serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			IdleTimeout: 2 * time.Second},
		AdminBounds: serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			IdleTimeout: 2 * time.Second, Conns: serve.Conns{MaxPerClient: 50}}})
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
	t.Run("admission", func(t *testing.T) {
		target := servetest.Target{Addr: hostOf(srv.URL), TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
			Method: http.MethodPost, Path: "/validate/virtualmachines", ContentType: "application/json", Normal: admitted}
		servetest.Run(t, target, servetest.Options{}, []servetest.Case{
			{Name: "slow header", Attack: servetest.SlowHeader(200 * time.Millisecond), Status: []int{400, 408}, Cut: true},
			{Name: "slow review", Attack: servetest.SlowBody(200 * time.Millisecond), Status: refused, Cut: true},
			{Name: "500 idle connections, no TLS handshake", Attack: servetest.IdleConns(500), Cut: true},
			{Name: "1 MiB header", Attack: servetest.BigHeader(1 << 20), Status: append([]int{431}, refused...), Cut: true},
			{Name: "10 MB reviews, four at once", Attack: servetest.BigBody(10_000_000, 4), Status: refused, Cut: true},
			{Name: "a review nested 100,000 deep", Attack: servetest.DeepJSON("request", 100_000), Status: refused},
		})
	})
	for _, s := range []struct{ name, url string }{{"metrics", srv.MetricsURL}, {"probes", srv.ProbeURL + "/readyz"}} {
		t.Run(s.name, func(t *testing.T) {
			u, _ := url.Parse(s.url)
			target := servetest.Target{Addr: u.Host, Method: http.MethodPost, Path: u.Path, Normal: func(ctx context.Context) error {
				if err := admitted(ctx); err != nil {
					return err
				}
				return servetest.Get(s.url)(ctx)
			}}
			servetest.Run(t, target, servetest.Options{}, servetest.AdminCases())
		})
	}
}
