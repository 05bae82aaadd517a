package main

import (
	"context"
	"encoding/json"
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
	"github.com/inferplane/inferplane/usage"
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
	_, _, err = execCLI(context.Background(), "xds", "bootstrap", "--node-id", "a", "--api", "sotw", "--file", path)
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
		{[]string{"xds", "serve", "--source", "file", "--domain", "x.test"}, 2, "--endpoints-file is required: the file source reads replicas from one"},
		{[]string{"xds", "serve", "--source", "nfs", "--domain", "x.test"}, 2, `--source "nfs": expected one of kube, clusters, file`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "Bad_Domain"}, 2, `domain "Bad_Domain"`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--probe-timeout", "5s"}, 2, "probe timeout 5s: must not exceed the interval 2s"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--log-level", "loud"}, 2, `--log-level "loud"`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps + ".missing", "--domain", "x.test", "--insecure-no-api-keys",
			"--grpc-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}, 1, "no such file or directory"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", eps + ".missing"}, 1,
			"read the key secret"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", secret,
			"--keys-file", eps, "--keys-namespace", "keys"}, 2, "--keys-namespace: a key store file and a key store namespace choose different stores"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", secret,
			"--keys-file", filepath.Join(filepath.Dir(eps), "keys.db"), "--grpc-address", "127.0.0.1:0"}, 2, "--services-address is required: needed when the gRPC address picks a free port (:0)"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", secret,
			"--usage-save-interval", "0s"}, 2, `--usage-save-interval "0s": want a positive duration`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--secret-file", secret,
			"--key-check-address", "127.0.0.1:18001"}, 2, "--secret-file: with key check processes of their own"},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--insecure-no-api-keys",
			"--last-known-good-file", filepath.Join(filepath.Dir(eps), "known.json")}, 2, "--last-known-good-file: only the clusters source keeps a last known good file"},
		{[]string{"keys", "serve", "--store-file", eps, "--namespace", "keys"}, 2, "--store-file and --namespace choose different stores"},
		{[]string{"keys", "serve", "--store-file", eps, "--drain-delay", "-1s"}, 2, "--drain-delay and --shutdown-timeout"},
		{[]string{"keys", "serve", "--store-file", eps, "--limits-grace", "-1s"}, 2, `--limits-grace "-1s": must not be negative`},
		{[]string{"xds", "serve", "--source", "file", "--file", eps, "--domain", "x.test", "--limits-timeout", "-1s"}, 2, `--limits-timeout "-1s": must not be negative`},
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
	eps, secret, store, key := serveFixture(t)
	admin, grpcAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := startServe(t, ctx, admin, "--source", "file", "--file", eps, "--domain", "example.test",
		"--grpc-address", grpcAddr, "--admin-address", admin, "--log-level", "warn",
		"--keys-file", store, "--secret-file", secret)

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
	require.NoError(t, waitServe(t, done))
}

// serveFixture is what `xds serve` with keys needs: an endpoints file with one endpoint
// (acme/chat), a key secret, and a key store holding one key of acme (returned in the clear).
func serveFixture(t *testing.T) (eps, secret, store, key string) {
	t.Helper()
	dir := t.TempDir()
	eps = filepath.Join(dir, "eps.yaml")
	require.NoError(t, os.WriteFile(eps, []byte("endpoints:\n- {tenant: acme, job: chat, replicas: [{address: 127.0.0.1, port: 9}]}\n"), 0o644))
	secret = writeKeySecret(t)
	store = filepath.Join(dir, "keys.db")
	key, _, err := execCLI(context.Background(), "keys", "create", "--store-file", store, "--secret-file", secret, "--tenant", "acme", "--force")
	require.NoError(t, err)
	return eps, secret, store, strings.TrimSpace(key)
}

// startServe runs `xds serve args...` until ctx ends and waits until its /readyz at admin
// answers 200 (or the command fails first).
func startServe(t *testing.T, ctx context.Context, admin string, args ...string) chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := execCLI(ctx, append([]string{"xds", "serve"}, args...)...)
		done <- err
	}()
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://%s/readyz", admin))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 50*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("xds serve stopped before it was ready: %v", err)
	default:
	}
	return done
}

// waitServe returns the command's result once its context has ended.
func waitServe(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute): // a bound for a hang, on a machine that may be loaded
		t.Fatal("xds serve did not stop")
		return nil
	}
}

// Per-key usage outlives a restart of the server: it is read back from --usage-file at start
// and written again on shutdown; a second server may not share it; a file it cannot read stops
// the start, untouched.
func TestXDSServeKeepsUsageAcrossRestarts(t *testing.T) {
	eps, secret, store, _ := serveFixture(t)
	dir := filepath.Dir(store)

	// What an earlier run of the server saved: the default file sits next to the key store.
	ledgerPath := filepath.Join(dir, "keys.usage.json")
	hour := time.Now().UTC().Truncate(time.Hour)
	earlier := usage.Ledger{Version: usage.LedgerVersion, SavedAt: time.Now().UTC(), Keys: []usage.KeyUsage{{
		KeyID: "00112233aabbccdd", Tenant: "acme", Endpoints: []string{"chat"}, Total: usage.Hour{Requests: 3, TokensIn: 30, TokensOut: 300},
		Hours: []usage.HourSlot{{Hour: hour, Requests: 3, TokensIn: 30, TokensOut: 300}},
	}}}
	require.NoError(t, usage.LedgerFile{Path: ledgerPath}.Save(earlier))

	serve := func(ctx context.Context, admin string) chan error {
		return startServe(t, ctx, admin, "--source", "file", "--file", eps, "--domain", "example.test",
			"--grpc-address", freePort(t), "--admin-address", admin, "--log-level", "warn",
			"--keys-file", store, "--secret-file", secret)
	}
	admin := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := serve(ctx, admin)
	out, _, err := execCLI(context.Background(), "keys", "usage", "--server", "http://"+admin, "-o", "json")
	require.NoError(t, err)
	var rep usage.UsageReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Keys, 1, "the usage saved by the earlier run is served again")
	assert.Equal(t, earlier.Keys[0].Total, rep.Keys[0].Total)
	// A second server on the same ledger would overwrite this one's usage: it may not start.
	_, _, err = execCLI(context.Background(), "xds", "serve", "--source", "file", "--file", eps, "--domain", "example.test",
		"--grpc-address", freePort(t), "--admin-address", freePort(t), "--log-level", "warn",
		"--keys-file", store, "--secret-file", secret)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another server")

	cancel()
	require.NoError(t, waitServe(t, done))
	l, err := usage.LedgerFile{Path: ledgerPath}.Load()
	require.NoError(t, err)
	assert.Equal(t, earlier.Keys, l.Keys, "the file still holds the usage after a shutdown")

	// A file this build cannot read: the server refuses to start and leaves it alone.
	require.NoError(t, os.WriteFile(ledgerPath, []byte("{not json"), 0o600))
	_, _, err = execCLI(context.Background(), "xds", "serve", "--source", "file", "--file", eps, "--domain", "example.test",
		"--grpc-address", freePort(t), "--admin-address", freePort(t), "--log-level", "warn",
		"--keys-file", store, "--secret-file", secret)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "usage file")
	assert.Contains(t, err.Error(), ledgerPath)
	b, _ := os.ReadFile(ledgerPath)
	assert.Equal(t, "{not json", string(b))
}

// The help of `xds serve` and `xds bootstrap` reads as a user expects: no type name made from
// backquoted words, the same --kubeconfig and --context as the other commands that talk to a
// cluster, one default per flag.
func TestXDSHelp(t *testing.T) {
	serve, _, err := execCLI(context.Background(), "xds", "serve", "--help")
	require.NoError(t, err)
	assert.Regexp(t, `--keys-file string\s`, serve)
	assert.Regexp(t, `--kubeconfig string\s`, serve)
	assert.Regexp(t, `--context string\s`, serve)
	boot, _, err := execCLI(context.Background(), "xds", "bootstrap", "--help")
	require.NoError(t, err)
	for _, line := range strings.Split(boot, "\n") {
		if strings.Contains(line, "--node-id string") {
			assert.Equal(t, 1, strings.Count(line, "default"), line)
		}
	}
}
