package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/internal/manifest"
)

func TestWebhookManifestsCommand(t *testing.T) {
	stdout, stderr, code := validateCLI(t, "webhook", "manifests", "--namespace", "ip-system", "--image", "example.com/inferplane:v1")
	require.Equal(t, 0, code, stderr)
	objs, err := manifest.Decode([]byte(stdout))
	require.NoError(t, err)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	assert.Equal(t, []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"Service", "Deployment", "PodDisruptionBudget", "ValidatingWebhookConfiguration"}, kinds)
	assert.NotContains(t, stdout, "creationTimestamp")
	assert.NotContains(t, stdout, "status: {}")
	for _, want := range []string{"failurePolicy: Fail", "sideEffects: None", "timeoutSeconds: 5", "- v1\n",
		"operator: Exists", "key: inferplane.io/tenant", "image: example.com/inferplane:v1", "--tls-secret=ip-system/inferplane-webhook-tls"} {
		assert.Contains(t, stdout, want)
	}

	ca := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644))
	stdout, stderr, code = validateCLI(t, "webhook", "manifests", "--url", "https://127.0.0.1:9443", "--ca-bundle-file", ca)
	require.Equal(t, 0, code, stderr)
	objs, err = manifest.Decode([]byte(stdout))
	require.NoError(t, err)
	require.Len(t, objs, 1)
	assert.Contains(t, stdout, "url: https://127.0.0.1:9443/validate/virtualmachines")
}

func TestWebhookCommandErrors(t *testing.T) {
	empty := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"url without https", []string{"webhook", "manifests", "--url", "http://x:1", "--ca-bundle-file", "/dev/null"}, "must be https://host[:port]"},
		{"url without CA", []string{"webhook", "manifests", "--url", "https://x:1"}, "needs the CA bundle"},
		{"missing CA file", []string{"webhook", "manifests", "--url", "https://x:1", "--ca-bundle-file", "/nonexistent"}, "--ca-bundle-file"},
		{"timeout too long", []string{"webhook", "manifests", "--timeout", "31"}, "timeout is 31s, must be 1 to 30"},
		{"bad namespace", []string{"webhook", "manifests", "--namespace", "Not_A_Name"}, `namespace "Not_A_Name"`},
		{"bad replicas flag", []string{"webhook", "manifests", "--replicas", "two"}, "invalid argument"},
		{"dev and secret", []string{"webhook", "serve", "--dev", "--tls-secret", "a/b"}, "--dev and --tls-secret"},
		{"secret not ns/name", []string{"webhook", "serve", "--tls-secret", "b"}, `--tls-secret "b": want NAMESPACE/NAME`},
		{"secret without service", []string{"webhook", "serve", "--tls-secret", "a/b"}, "--tls-secret needs --service"},
		{"no certificate", []string{"webhook", "serve", "--cert-dir", empty}, "no tls.crt in " + empty},
		{"bad log level", []string{"webhook", "serve", "--log-level", "loud"}, `--log-level "loud"`},
		{"bad kubeconfig", []string{"webhook", "serve", "--dev", "--cert-dir", empty, "--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := validateCLI(t, tc.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// TestWebhookServeDev: --dev writes a self-signed pair into the cert dir and prints its CA
// bundle and how to register the server (here no API server answers at the kubeconfig's
// address, so it stops there).
func TestWebhookServeDev(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600))
	stdout, _, code := validateCLI(t, "webhook", "serve", "--dev", "--cert-dir", dir, "--port", "9555", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "# CA bundle (clientConfig.caBundle):\nLS0t")
	assert.Contains(t, stdout, "inferplane webhook manifests --url https://localhost:9555 --ca-bundle-file "+filepath.Join(dir, "ca.crt"))
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
	}
	info, err := os.Stat(filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the key is readable by its owner only")
}
