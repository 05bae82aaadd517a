package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/e2e/redistest"
	"github.com/inferplane/inferplane/gateway/keycheck"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/resources"
)

// Two key check processes of their own (keycheck.Run, as `keys serve` runs them) with the
// limits added (Limits.KeyCheck) share one real Redis: a key limited to 5 requests a minute
// gets exactly 5 across both, then 429 with Retry-After from each; /v1/limits and the
// limited-requests metric are on their admin port.
func TestKeyChecksEnforceLimitsThroughRedis(t *testing.T) {
	redis := redistest.Start(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte(testSecret), 0o600))
	raw, err := keys.LoadSecret(filepath.Join(dir, "secret"))
	require.NoError(t, err)
	hasher, err := keys.NewHasher(raw)
	require.NoError(t, err)
	key, id, err := keys.Generate(nil)
	require.NoError(t, err)
	store := keys.NewFileStore(filepath.Join(dir, "keys.db"))
	require.NoError(t, store.Create(context.Background(), keys.Record{ID: id, Tenant: "acme", Hash: hasher.Hex(key),
		CreatedAt: time.Now().Add(-time.Minute).UTC(),
		Limits:    &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 5}}}))
	clock := &fakeClock{}
	clock.Add(time.Duration(time.Date(2026, 12, 1, 10, 0, 1, 0, time.UTC).UnixNano()))

	ctx, cancel := context.WithCancel(context.Background())
	var clients []authv3.AuthorizationClient
	var admins []string
	for range 2 {
		started := make(chan keycheck.Running, 1)
		done := make(chan error, 1)
		go func() {
			done <- keycheck.Run(ctx, keycheck.Config{GRPCAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
				Store: keycheck.Store{File: store.Path}, SecretFile: filepath.Join(dir, "secret"),
				DrainDelay: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Extend:  Limits{Redis: redis.Addr(), Now: clock.Now, Timeout: 2 * time.Second}.KeyCheck(),
				Started: func(r keycheck.Running) { started <- r }})
		}()
		t.Cleanup(func() { <-done })
		var r keycheck.Running
		select {
		case r = <-started:
		case err := <-done:
			t.Fatalf("key check: %v", err)
		}
		conn, err := grpc.NewClient(r.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, authv3.NewAuthorizationClient(conn))
		admins = append(admins, "http://"+r.AdminAddr.String())
	}
	t.Cleanup(cancel)
	for _, a := range admins {
		require.Eventually(t, func() bool {
			resp, err := http.Get(a + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 20*time.Second, 20*time.Millisecond)
	}

	passed := 0
	for i := range 10 {
		resp, err := clients[i%2].Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			ContextExtensions: map[string]string{extauthz.ContextTenant: "acme", extauthz.ContextJob: "chat"},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Headers: map[string]string{"authorization": "Bearer " + key}}},
		}})
		require.NoError(t, err)
		if resp.GetStatus().GetCode() == 0 {
			passed++
			continue
		}
		denied := resp.GetDeniedResponse()
		require.NotNil(t, denied, "check %d", i)
		assert.Equal(t, typev3.StatusCode_TooManyRequests, denied.GetStatus().GetCode(), "check %d", i)
		var retry string
		for _, h := range denied.GetHeaders() {
			if strings.EqualFold(h.GetHeader().GetKey(), limits.HeaderRetryAfter) {
				retry = h.GetHeader().GetValue()
			}
		}
		assert.Equal(t, "59", retry, "check %d: Retry-After, the seconds left in the minute", i)
	}
	assert.Equal(t, 5, passed, "a key limited to 5 a minute, checked by two key checks sharing Redis")

	for _, a := range admins {
		body := httpBody(t, a+limits.Path)
		assert.Contains(t, body, id, "/v1/limits names the limited key")
	}
	assert.Contains(t, httpBody(t, admins[0]+"/metrics"), "inferplane_ratelimit_limited_total")
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, b)
	return string(b)
}

// With key checks of their own, an xDS server reads the keys for their limits only: it
// starts and is ready while the host API server (the key store) refuses connections, as in a
// restart during the host's outage, and checks no key itself.
func TestXDSServerStartsWithItsKeyStoreDown(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "endpoints.yaml"), "endpoints: []\n")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	ready := make(chan xds.Running, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			XDS: xds.Config{GRPCAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0", Resources: resources.DefaultConfig(testDomain),
				Health: health.DefaultConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Started: func(r xds.Running) { ready <- r }},
			Source: Source{Kind: SourceFile, File: filepath.Join(dir, "endpoints.yaml"), FileInterval: time.Second},
			APIKeys: APIKeys{KeyChecks: []string{"127.0.0.1:18001"}, Namespace: "inferplane-system", ServicesAddress: "127.0.0.1:18000",
				UsageFile: "-", UsageSaveInterval: time.Minute},
			Kube: func() (*rest.Config, error) { return &rest.Config{Host: "https://" + dead}, nil },
		})
	}()
	defer func() { cancel(); require.NoError(t, <-done) }()
	var r xds.Running
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("the xDS server did not start with its key store down: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the xDS server did not start with its key store down")
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + r.AdminAddr.String() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond)
}
