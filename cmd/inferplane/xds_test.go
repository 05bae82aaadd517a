package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/auth/extauthz"
)

func TestXDSBootstrapCommand(t *testing.T) {
	out, _, err := execCLI(context.Background(), "xds", "bootstrap", "--node-id", "envoy-7", "--xds-address", "xds.inferplane.svc:18000")
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON([]byte(out))
	require.NoError(t, err)
	var b bootstrapv3.Bootstrap
	require.NoError(t, protojson.Unmarshal(js, &b))
	assert.Equal(t, "envoy-7", b.Node.Id)
	assert.Equal(t, corev3.ApiConfigSource_DELTA_GRPC, b.DynamicResources.AdsConfig.ApiType, "delta is the default")

	path := filepath.Join(t.TempDir(), "envoy.yaml")
	_, _, err = execCLI(context.Background(), "xds", "bootstrap", "--node-id", "a", "--api", "sotw", "-o", path)
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), "api_type: GRPC")
}

func TestXDSCommandErrors(t *testing.T) {
	eps := filepath.Join(t.TempDir(), "eps.yaml")
	require.NoError(t, os.WriteFile(eps, []byte("endpoints: []\n"), 0o644))
	secret := writeKeySecret(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"xds", "serve", "--source", "file", "--domain", "x.test"}, 2, "--source file needs --file"},
		{[]string{"xds", "serve", "--source", "nfs", "--domain", "x.test"}, 2, `--source "nfs": expected kube or file`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "Bad_Domain"}, 2, `domain "Bad_Domain"`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--probe-timeout", "5s"}, 2, "probe timeout 5s: must not exceed the interval 2s"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--log-level", "loud"}, 2, `--log-level "loud"`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps + ".missing", "--domain", "x.test", "--insecure-no-api-keys",
			"--grpc-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}, 1, "no such file or directory"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", eps + ".missing"}, 1,
			"read the key secret"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", secret,
			"--keys-file", eps, "--keys-namespace", "keys"}, 1, "--keys-file and --keys-namespace choose different key stores"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", secret,
			"--keys-file", filepath.Join(filepath.Dir(eps), "keys.db"), "--grpc-address", "127.0.0.1:0"}, 1, "--services-address is needed"},
		{[]string{"xds", "bootstrap", "--api", "grpc"}, 2, `--api "grpc": expected sotw or delta`},
		{[]string{"xds", "bootstrap", "--node-id", "a", "--xds-address", "nohost"}, 2, `xds address "nohost": expected host:port`},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			_, _, err := execCLI(context.Background(), tc.args...)
			require.Error(t, err)
			assert.Equal(t, tc.code, exitCode(err))
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// writeKeySecret makes an API key secret file with `keys secret`.
func writeKeySecret(t *testing.T) string {
	t.Helper()
	out, _, err := execCLI(context.Background(), "keys", "secret")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, []byte(out), 0o600))
	return path
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// TestXDSServeCommand runs `xds serve --source file` with API keys on, as an operator would:
// a key made by `keys create` is accepted by the key check served on the xDS gRPC port, an
// unknown one is refused, the health view answers on the admin port, and the command stops
// the way SIGTERM stops it (its context ends) without error.
func TestXDSServeCommand(t *testing.T) {
	dir := t.TempDir()
	eps := filepath.Join(dir, "eps.yaml")
	require.NoError(t, os.WriteFile(eps, []byte("endpoints:\n- {tenant: acme, job: chat, replicas: [{address: 127.0.0.1, port: 9}]}\n"), 0o644))
	secret := writeKeySecret(t)
	store := filepath.Join(dir, "keys.db")
	key, _, err := execCLI(context.Background(), "keys", "create", "--store-file", store, "--secret-file", secret, "--tenant", "acme")
	require.NoError(t, err)
	key = strings.TrimSpace(key)
	admin, grpcAddr := freePort(t), freePort(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := execCLI(ctx, "xds", "serve", "--source", "file", "--file", eps, "--domain", "example.test",
			"--grpc-address", grpcAddr, "--admin-address", admin, "--log-level", "warn",
			"--keys-file", store, "--secret-file", secret)
		done <- err
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://%s/readyz", admin))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 50*time.Millisecond)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	authz := authv3.NewAuthorizationClient(conn)
	check := func(bearer string) int32 {
		resp, err := authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			ContextExtensions: map[string]string{extauthz.ContextTenant: "acme", extauthz.ContextJob: "chat"},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Headers: map[string]string{"authorization": "Bearer " + bearer},
			}},
		}})
		require.NoError(t, err)
		return resp.GetStatus().GetCode()
	}
	assert.Equal(t, int32(codes.OK), check(key), "a key made by `keys create` is accepted")
	assert.NotEqual(t, int32(codes.OK), check(key[:len(key)-2]+"xx"), "a wrong key is refused")

	resp, err := http.Get(fmt.Sprintf("http://%s/v1/health", admin))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("xds serve did not stop")
	}
}
