package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// api serve names every missing required flag at once, as a usage error (exit 2).
func TestAPIServeUsage(t *testing.T) {
	_, _, err := execCLI(context.Background(), "api", "serve")
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	for _, flag := range []string{"--oidc-issuer is required", "--oidc-client-id is required", "--inputs-repo is required"} {
		assert.Contains(t, err.Error(), flag)
	}
	_, _, err = execCLI(context.Background(), "api", "serve", "--oidc-issuer", "https://login.example.com", "--oidc-client-id", "x",
		"--inputs-repo", "file:///nowhere", "--in-cluster", "--context", "mgmt")
	assert.Equal(t, 2, exitCode(err))
	assert.ErrorContains(t, err, "--in-cluster reads no kubeconfig")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--peer-url", "http://10.0.0.7:8080"}, "--peer-url and --peer-token-file go together"},
		{[]string{"--peer-token-file", "/etc/peer"}, "--peer-url and --peer-token-file go together"},
		{[]string{"--peer-url", "10.0.0.7:8080", "--peer-token-file", "/etc/peer"}, `--peer-url "10.0.0.7:8080": expected http(s)://host:port`},
		{[]string{"--peer-listen", ":8081"}, "--peer-listen :8081 without --peer-url"},
		{[]string{"--peer-url", "http://10.0.0.7:8081", "--peer-token-file", "/etc/peer", "--listen", ":8081"}, "--peer-listen :8081 is --listen's address"},
		{[]string{"--peer-url", "http://10.0.0.7:8080", "--peer-token-file", "/etc/peer", "--listen", ":8080", "--peer-listen", ":8080"}, "--peer-listen :8080 is --listen's address"},
	} {
		_, _, err := execCLI(context.Background(), append([]string{"api", "serve", "--oidc-issuer", "https://login.example.com", "--oidc-client-id", "x",
			"--inputs-repo", "file:///nowhere"}, tc.args...)...)
		assert.Equal(t, 2, exitCode(err), tc.args)
		assert.ErrorContains(t, err, tc.want, tc.args)
	}
}

// api manifests prints the install; bad options are usage errors naming the flag.
func TestAPIManifests(t *testing.T) {
	out, _, err := execCLI(context.Background(), "api", "manifests", "--domain", "models.example.com", "--oidc-issuer", "https://login.example.com",
		"--oidc-client-id", "inferplane", "--inputs-repo", "https://git.example.com/ops/inputs.git")
	require.NoError(t, err)
	assert.Contains(t, out, "kind: StatefulSet")
	assert.Contains(t, out, "kind: PodDisruptionBudget")
	assert.Contains(t, out, "--peer-token-file", "2 replicas hand writes to each other")
	_, _, err = execCLI(context.Background(), "api", "manifests", "--domain", "models.example.com")
	assert.Equal(t, 2, exitCode(err))
	assert.ErrorContains(t, err, "--oidc-issuer")
}

// generate --gateway-dir with the --api-* flags writes api.yaml beside the gateway's install,
// listed in the folder's kustomization; a second run changes nothing.
func TestGenerateWritesTheAPI(t *testing.T) {
	dir := t.TempDir()
	gw := filepath.Join(dir, "ops", "gateway")
	args := []string{"generate", "--recipes", "../../recipes", "--tenants", "../../tenants", "--out", filepath.Join(dir, "out"),
		"--gateway-dir", gw, "--gateway-domain", "inference.example.com",
		"--api-oidc-issuer", "https://login.example.com", "--api-oidc-client-id", "inferplane", "--api-inputs-repo", "https://git.example.com/ops/inputs.git"}
	stdout, err := runCLI(t, args...)
	require.NoError(t, err)
	assert.Contains(t, stdout, "gateway: "+gw+" written")
	api, err := os.ReadFile(filepath.Join(gw, "api.yaml"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(api), "--domain\n        - inference.example.com"), "the gateway's domain reaches the API")
	k, err := os.ReadFile(filepath.Join(gw, "kustomization.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(k), "- gateway.yaml\n- api.yaml\n")
	stdout, err = runCLI(t, args...)
	require.NoError(t, err)
	assert.Contains(t, stdout, "gateway: "+gw+" unchanged")
}
