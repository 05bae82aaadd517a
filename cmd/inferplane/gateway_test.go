package main

import (
	"context"
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
	// The xDS servers, Envoy, and the limits store (a Redis StatefulSet, its Service and
	// ServiceAccount).
	assert.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 3, "Role": 3, "RoleBinding": 3, "Service": 4,
		"StatefulSet": 2, "PodDisruptionBudget": 2, "ConfigMap": 1, "Deployment": 1}, kinds)
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
