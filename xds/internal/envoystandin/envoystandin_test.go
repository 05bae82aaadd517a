package envoystandin_test

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/gateway"
	"github.com/inferplane/inferplane/gateway/keycheck"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/internal/envoystandin"
	"github.com/inferplane/inferplane/xds/resources"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// The stand-in does what the xDS server's configuration says, as Envoy would: here with the
// file source, a key check of its own and two replica doubles.
func TestStandInFollowsTheConfiguration(t *testing.T) {
	dir := t.TempDir()
	d0, err := replicadouble.Start(replicadouble.Options{Name: "r0"})
	require.NoError(t, err)
	defer d0.Close()
	d1, err := replicadouble.Start(replicadouble.Options{Name: "r1"})
	require.NoError(t, err)
	defer d1.Close()
	d2, err := replicadouble.Start(replicadouble.Options{Name: "r2"})
	require.NoError(t, err)
	defer d2.Close()
	d3, err := replicadouble.Start(replicadouble.Options{Name: "r3"})
	require.NoError(t, err)
	defer d3.Close()
	d3.SetHealthy(false)
	eps := filepath.Join(dir, "eps.yaml")
	require.NoError(t, os.WriteFile(eps, []byte("endpoints:\n"+
		"- {tenant: acme, job: chat, replicas: [{address: 127.0.0.1, port: "+port(d0)+"}, {address: 127.0.0.1, port: "+port(d1)+"}]}\n"+
		"- {tenant: acme, job: open, requireAPIKey: false, replicas: [{address: 127.0.0.1, port: "+port(d2)+"}]}\n"+
		"- {tenant: acme, job: empty, replicas: [{address: 127.0.0.1, port: "+port(d3)+"}]}\n"), 0o644))
	secret, err := keys.NewSecret()
	require.NoError(t, err)
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret), 0o600))
	raw, _ := keys.LoadSecret(secretFile)
	h, _ := keys.NewHasher(raw)
	key, id, err := keys.Generate(rand.Reader)
	require.NoError(t, err)
	storeFile := filepath.Join(dir, "keys.db")
	require.NoError(t, keys.NewFileStore(storeFile).Create(context.Background(), keys.Record{ID: id, Tenant: "acme", Hash: h.Hex(key), CreatedAt: time.Now()}))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	check := freeAddr(t)
	go func() {
		_ = keycheck.Run(ctx, keycheck.Config{GRPCAddress: check, AdminAddress: freeAddr(t), Store: keycheck.Store{File: storeFile},
			SecretFile: secretFile, DrainDelay: time.Millisecond, Logger: log})
	}()
	grpcAddr := freeAddr(t)
	gwErr := make(chan error, 1)
	go func() {
		gwErr <- gateway.Run(ctx, gateway.Config{
			XDS: xds.Config{GRPCAddress: grpcAddr, AdminAddress: freeAddr(t), Resources: resources.DefaultConfig("test"),
				Health: health.DefaultConfig(), Logger: log},
			Source:  gateway.Source{Kind: gateway.SourceFile, File: eps, FileInterval: time.Second},
			APIKeys: gateway.APIKeys{KeyChecks: []string{check}, ServicesAddress: grpcAddr, UsageFile: "-", UsageSaveInterval: time.Minute},
		})
	}()
	select {
	case err := <-gwErr:
		t.Fatalf("the xDS server stopped: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	e, err := envoystandin.Start(envoystandin.Options{XDS: []string{grpcAddr}, Delta: true, Logger: log})
	require.NoError(t, err)
	defer e.Close()
	require.NoError(t, e.WaitFor(ctx, func(st adstest.State) bool { return len(st.Endpoints["acme/chat"]) == 2 }))
	require.Eventually(t, func() bool { return len(e.HealthyChecks()) == 1 }, 10*time.Second, 10*time.Millisecond)

	send := func(host, path, key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, e.URL()+path, strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Host = host
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(replicadouble.ReplicaHeader) + " " + string(b)
	}
	replicas := map[string]bool{}
	for range 4 {
		code, body := send("chat.acme.test", "/v1/chat/completions", key)
		require.Equal(t, http.StatusOK, code, body)
		replicas[strings.Fields(body)[0]] = true
	}
	assert.Equal(t, map[string]bool{"r0": true, "r1": true}, replicas, "round robin over both replicas")
	code, body := send("chat.acme.test", "/v1/chat/completions", "")
	assert.Equal(t, http.StatusUnauthorized, code, body)
	assert.Contains(t, body, "invalid_api_key")
	code, _ = send("chat.acme.test", "/v2/secret", key)
	assert.Equal(t, http.StatusNotFound, code, "outside the allow-list")
	code, _ = send("nowhere.acme.test", "/v1/chat/completions", key)
	assert.Equal(t, http.StatusNotFound, code, "unknown host")
	code, _ = send("open.acme.test", "/v1/chat/completions", "")
	assert.Equal(t, http.StatusOK, code, "a job that requires no key")
	code, body = send("empty.acme.test", "/v1/chat/completions", key)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "no healthy upstream")

	// The key check goes: checks fail closed with the configured status (503).
	cancel()
	require.Eventually(t, func() bool { return len(e.HealthyChecks()) == 0 }, 10*time.Second, 10*time.Millisecond)
	code, _ = send("chat.acme.test", "/v1/chat/completions", key)
	assert.Equal(t, http.StatusServiceUnavailable, code, "no key check: refused, never let through")
}

func port(d *replicadouble.Double) string { return strings.TrimPrefix(d.Addr(), "127.0.0.1:") }
