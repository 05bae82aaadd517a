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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	// The xDS servers, the key checks, Envoy, the limits store (a Redis StatefulSet, its
	// Service and ServiceAccount) and the GPU meter (a StatefulSet, its Service and
	// ServiceAccount).
	assert.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 5, "Role": 4, "RoleBinding": 4, "Service": 6,
		"StatefulSet": 3, "PodDisruptionBudget": 3, "ConfigMap": 1, "Deployment": 2}, kinds)
	assert.Contains(t, out, "metallb.universe.tf/address-pool: public")

	// Every inferplane process the manifests run is a command line this binary takes: its
	// command exists and it knows every flag (each container's args parsed by the command's
	// own flag set, nothing run).
	commands := 0
	for _, o := range objs {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			c := c.(map[string]any)
			if !strings.HasPrefix(c["image"].(string), "ghcr.io/inferplane/inferplane:") {
				continue
			}
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			cmd, rest, err := newRootCmd().Find(args)
			require.NoError(t, err, "%s: %v", o.GetName(), args)
			require.NotEqual(t, "inferplane", cmd.Name(), "%s: %v names no command", o.GetName(), args)
			require.NoError(t, cmd.ParseFlags(rest), "%s: %s", o.GetName(), cmd.CommandPath())
			commands++
		}
	}
	assert.Equal(t, 4, commands, "xds serve, keys serve, gateway envoy-drainer, meter serve")
	noMeter, _, err := execCLI(context.Background(), "gateway", "manifests", "--domain", "inference.example.com", "--no-meter")
	require.NoError(t, err)
	assert.NotContains(t, noMeter, "meter serve")

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
