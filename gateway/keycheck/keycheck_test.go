package keycheck

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

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/gateway/envoyfilters"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// fixture writes a secret and a key store file with one key of acme.
func fixture(t *testing.T) (secretFile, storeFile, key string) {
	t.Helper()
	dir := t.TempDir()
	secret, err := keys.NewSecret()
	require.NoError(t, err)
	secretFile = filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret), 0o600))
	raw, err := keys.LoadSecret(secretFile)
	require.NoError(t, err)
	h, err := keys.NewHasher(raw)
	require.NoError(t, err)
	key, id, err := keys.Generate(rand.Reader)
	require.NoError(t, err)
	storeFile = filepath.Join(dir, "keys.db")
	require.NoError(t, keys.NewFileStore(storeFile).Create(context.Background(),
		keys.Record{ID: id, Tenant: "acme", Hash: h.Hex(key), CreatedAt: time.Now().UTC().Truncate(time.Second)}))
	return secretFile, storeFile, key
}

func check(ctx context.Context, c authv3.AuthorizationClient, key string) (int32, error) {
	resp, err := c.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{extauthz.ContextTenant: "acme", extauthz.ContextJob: "chat"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Headers: map[string]string{"authorization": "Bearer " + key}}},
	}})
	return resp.GetStatus().GetCode(), err
}

// The key check serves once its keys are read, answers Envoy's gRPC health checks, and on
// stop fails them first while it keeps answering checks for the drain delay.
func TestKeyCheckServesAndDrains(t *testing.T) {
	secretFile, storeFile, key := fixture(t)
	grpcAddr, admin := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{GRPCAddress: grpcAddr, AdminAddress: admin, Store: Store{File: storeFile}, SecretFile: secretFile,
			DrainDelay: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	}()
	require.Eventually(t, func() bool { code, _ := get("http://" + admin + "/readyz"); return code == http.StatusOK },
		10*time.Second, 10*time.Millisecond)
	_, body := get("http://" + admin + "/readyz")
	assert.Equal(t, "ok: 1 keys\n", body)
	_, metrics := get("http://" + admin + "/metrics")
	assert.Contains(t, metrics, "inferplane_keycheck_index_keys 1")

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	authz, hc := authv3.NewAuthorizationClient(conn), healthpb.NewHealthClient(conn)
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: envoyfilters.HealthService})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return resp.GetStatus()
	}
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, serving())
	code, err := check(context.Background(), authz, key)
	require.NoError(t, err)
	assert.Equal(t, int32(codes.OK), code)
	code, err = check(context.Background(), authz, key[:len(key)-4]+"AAAA")
	require.NoError(t, err)
	assert.Equal(t, int32(codes.Unauthenticated), code)

	cancel()
	require.Eventually(t, func() bool { return serving() == healthpb.HealthCheckResponse_NOT_SERVING }, 5*time.Second, time.Millisecond)
	code, err = check(context.Background(), authz, key)
	require.NoError(t, err, "checks are still answered while draining")
	assert.Equal(t, int32(codes.OK), code)
	readyz, _ := get("http://" + admin + "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, readyz)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the key check did not stop")
	}
}

// A key store that cannot be read yet (here: not a bbolt file) keeps the process not ready, retrying; once it can be
// read, the process serves.
func TestKeyCheckWaitsForItsStore(t *testing.T) {
	secretFile, storeFile, _ := fixture(t)
	broken := filepath.Join(t.TempDir(), "later.db")
	require.NoError(t, os.WriteFile(broken, []byte("not a key store yet"), 0o600))
	admin := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{GRPCAddress: freeAddr(t), AdminAddress: admin, Store: Store{File: broken}, SecretFile: secretFile,
			DrainDelay: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	}()
	require.Eventually(t, func() bool {
		code, body := get("http://" + admin + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "not loaded yet")
	}, 10*time.Second, 10*time.Millisecond)
	data, err := os.ReadFile(storeFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(broken, data, 0o600))
	require.Eventually(t, func() bool { code, _ := get("http://" + admin + "/readyz"); return code == http.StatusOK },
		20*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no key store"},
		{Config{Store: Store{File: "a", Namespace: "b"}}, "choose different stores"},
		{Config{Store: Store{File: "a"}, DrainDelay: -time.Second}, "want durations of 0 or more"},
		{Config{Store: Store{File: "a"}, SecretFile: "/nonexistent/secret"}, "/nonexistent/secret"},
	} {
		err := Run(context.Background(), tc.cfg)
		assert.ErrorContains(t, err, tc.want)
	}
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
