package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/internal/manifest"
)

func TestGatewayManifestsCommand(t *testing.T) {
	out, _, err := execCLI(context.Background(), "gateway", "manifests", "--domain", "inference.example.com",
		"--vcluster-namespace", "vcluster-acme", "--service-annotation", "metallb.universe.tf/address-pool=public")
	require.NoError(t, err)
	objs, err := manifest.Decode([]byte(out))
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	// The xDS servers, the key checks, Envoy, and the limits store (a Redis StatefulSet, its
	// Service and ServiceAccount).
	assert.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 4, "Role": 4, "RoleBinding": 4, "Service": 5,
		"StatefulSet": 2, "PodDisruptionBudget": 3, "ConfigMap": 1, "Deployment": 2}, kinds)
	assert.Contains(t, out, "metallb.universe.tf/address-pool: public")

	_, _, err = execCLI(context.Background(), "gateway", "manifests", "--domain", "Bad_Domain")
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), `domain "Bad_Domain"`)
}

// generate --gateway-dir writes the gateway's install into the operator's folder, after the
// tenants; a second run leaves it unchanged; a dry run writes nothing.
func TestGenerateWritesTheGateway(t *testing.T) {
	dir := t.TempDir()
	gw := filepath.Join(dir, "ops", "gateway")
	common := []string{"generate", "--recipes", "../../recipes", "--tenants", "../../tenants", "--out", filepath.Join(dir, "out"),
		"--gateway-dir", gw, "--gateway-domain", "inference.example.com"}
	stdout, err := runCLI(t, append(common, "--dry-run")...)
	require.NoError(t, err)
	assert.Contains(t, stdout, "gateway: would write "+gw)
	assert.NoDirExists(t, gw)
	stdout, err = runCLI(t, common...)
	require.NoError(t, err)
	assert.Contains(t, stdout, "gateway: "+gw+" written")
	b, err := os.ReadFile(filepath.Join(gw, "gateway.yaml"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(b), "--domain\n        - inference.example.com"), "the domain reaches the xDS server's arguments")
	stdout, err = runCLI(t, common...)
	require.NoError(t, err)
	assert.Contains(t, stdout, "gateway: "+gw+" unchanged")

	_, err = runCLI(t, "generate", "--recipes", "../../recipes", "--tenants", "../../tenants", "--out", filepath.Join(dir, "out"), "--gateway-dir", gw)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--gateway-dir needs --gateway-domain")
}

// gateway envoy-drainer --now drains an Envoy at once: here a stand-in for Envoy's admin
// interface (no Envoy runs here), which records the drain and reports no active request.
func TestGatewayEnvoyDrainerCommand(t *testing.T) {
	var drained []string
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/drain_listeners":
			drained = append(drained, r.Method+" "+r.URL.RawQuery)
		case "/stats":
			_, _ = w.Write([]byte(`{"stats":[{"name":"http.inferplane.downstream_rq_active","value":0}]}`))
		}
	}))
	defer admin.Close()
	_, _, err := execCLI(context.Background(), "gateway", "envoy-drainer", "--now", "--min-wait", "0s",
		"--envoy-admin-address", admin.Listener.Addr().String(), "--log-level", "warn")
	require.NoError(t, err)
	assert.Equal(t, []string{"POST graceful&skip_exit"}, drained)

	_, _, err = execCLI(context.Background(), "gateway", "envoy-drainer", "--now", "--min-wait", "50s", "--max-wait", "40s")
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), "--min-wait 50s and --max-wait 40s")
}
