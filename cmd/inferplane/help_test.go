package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/usage"
)

// README promises that every command has --help with examples: TestCLIConventions holds them to it.

// keys secret and keys usage use no key store: their help lists no store flags.
func TestKeysHelpListsOnlyFlagsThatApply(t *testing.T) {
	for _, sub := range []string{"secret", "usage"} {
		help, _, err := execCLI(context.Background(), "keys", sub, "--help")
		require.NoError(t, err)
		for _, flag := range []string{"--store-file", "--namespace", "--kubeconfig"} {
			assert.NotContains(t, help, flag, "keys %s", sub)
		}
	}
	for _, sub := range []string{"create", "list", "revoke"} {
		help, _, err := execCLI(context.Background(), "keys", sub, "--help")
		require.NoError(t, err)
		assert.Contains(t, help, "--store-file", "keys %s", sub)
	}
}

// fakeGateway serves the health report of an xDS server that knows acme/qwen3-32b and
// globex/llama-70b.
func fakeGateway(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != usage.HealthPath {
			http.NotFound(w, r)
			return
		}
		rep := usage.HealthReport{Window: "5m0s"}
		for _, e := range []usage.EndpointHealth{{Tenant: "acme", Job: "qwen3-32b"}, {Tenant: "globex", Job: "llama-70b"}} {
			if tenant := r.URL.Query().Get("tenant"); tenant == "" || tenant == e.Tenant {
				e.Status = usage.StatusHealthy
				rep.Endpoints = append(rep.Endpoints, e)
			}
		}
		_ = json.NewEncoder(w).Encode(rep)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// keys create refuses a tenant or endpoint that matches nothing known (the tenants folder, else
// the gateway), with "did you mean"; --force skips the check.
func TestKeysCreateChecksTenantAndEndpoint(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "keys.db")
	t.Setenv(keys.SecretEnv, strings.Repeat("s", 48))
	create := func(args ...string) (string, error) {
		_, stderr, err := execCLI(context.Background(), append([]string{"keys", "create", "--store-file", store}, args...)...)
		return stderr, err
	}
	_, err := create("--tenants", "../../tenants", "--tenant", "acmee", "--endpoint", "qwen3-32b")
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), `--tenant "acmee": no such tenant in the tenants folder ../../tenants (known: acme, globex, initech, platform); did you mean acme?`)

	_, err = create("--tenants", "../../tenants", "--tenant", "acme", "--endpoint", "qwen3-33b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--endpoint "qwen3-33b": tenant acme has no such job`)
	assert.Contains(t, err.Error(), "did you mean qwen3-32b?")

	_, err = create("--tenants", "../../tenants", "--tenant", "acme", "--endpoint", "qwen3-32b")
	require.NoError(t, err)
	_, err = create("--tenants", "../../tenants", "--tenant", "acmee", "--force")
	require.NoError(t, err, "--force skips the check")

	// Without a tenants folder, the gateway's endpoints are what is known.
	gw := fakeGateway(t)
	_, err = create("--tenants", filepath.Join(dir, "none"), "--tenant", "acme")
	require.Error(t, err, "a --tenants that is not a folder is an error")
	t.Chdir(dir)
	_, err = create("--server", gw.URL, "--tenant", "globx")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the endpoints of the xDS server at "+gw.URL)
	assert.Contains(t, err.Error(), "did you mean globex?")
	_, err = create("--server", gw.URL, "--tenant", "globex", "--endpoint", "llama-70b")
	require.NoError(t, err)
	// Nothing to check against: refused (TestKeysCreateRefusesAnUncheckedTenant), unless --force.
	_, err = create("--server", "http://127.0.0.1:1", "--tenant", "globex")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--tenant globex cannot be checked: no tenants folder at tenants, and reach the xDS server")
	_, err = create("--server", "http://127.0.0.1:1", "--tenant", "globex", "--force")
	require.NoError(t, err)
}

// Listing or revoking in a store file that does not exist is an error, not an empty table.
func TestKeysStoreMustExist(t *testing.T) {
	typo := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{{"keys", "list", "--store-file", typo}, {"keys", "revoke", "--store-file", typo, "0123456789abcdef"}} {
		stdout, _, err := execCLI(context.Background(), args...)
		require.Error(t, err, "%v", args)
		assert.Contains(t, err.Error(), "key store "+typo+" does not exist")
		assert.Empty(t, stdout)
		assert.NoFileExists(t, typo, "nothing created")
	}
}

// health --tenant of a tenant the server knows nothing of is an error naming the known ones.
func TestHealthUnknownTenant(t *testing.T) {
	gw := fakeGateway(t)
	_, _, err := execCLI(context.Background(), "health", "--server", gw.URL, "--tenant", "nope")
	require.Error(t, err)
	assert.Equal(t, 1, exitCode(err))
	assert.Contains(t, err.Error(), `unknown tenant "nope": the server knows no endpoint of it (tenants with endpoints: acme, globex)`)
	out, _, err := execCLI(context.Background(), "health", "--server", gw.URL, "--tenant", "acme")
	require.NoError(t, err)
	assert.Contains(t, out, "qwen3-32b")
}

// webhook serve --dev without a kubeconfig says what to pass, and creates and prints nothing.
func TestWebhookServeDevWithoutKubeconfig(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", filepath.Join(tmp, "missing"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	stdout, _, err := execCLI(context.Background(), "webhook", "serve", "--dev")
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), "pass --kubeconfig FILE")
	assert.Empty(t, stdout, "no CA printed")
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, entries, "no certificate folder left behind")
}
