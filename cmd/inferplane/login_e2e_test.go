package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
	"github.com/inferplane/inferplane/productapi/clientconfig"
)

// The tests never read the CLI's contexts of whoever runs them: a context current in
// ~/.config/inferplane would send the operator commands the tests run to that API.
func init() {
	dir, err := os.MkdirTemp("", "inferplane-cli-config-")
	if err != nil {
		panic(err)
	}
	os.Setenv(clientconfig.EnvDir, dir)
}

// cliWorld is what a customer's CLI talks to, all on 127.0.0.1: a real Dex whose client for
// the API is public (what the CLI signs in as), `api serve` without a host cluster over the
// bundled inputs in file:// repositories, keys in a file the gateway reads, and `xds serve`
// with one replica double of acme/chat.
type cliWorld struct {
	dex    *dex.Dex
	apiURL string
	config string // the CLI's $INFERPLANE_CONFIG_DIR
	doc    *apitest.OpenAPI
}

func startCLIWorld(t *testing.T) *cliWorld {
	return startCLIWorldWith(t, dex.Options{})
}

// startCLIWorldWith starts the world with a Dex of these options (its client and users are
// the world's); edits change the bundled inputs first.
func startCLIWorldWith(t *testing.T, o dex.Options, edits ...func(files map[string]string)) *cliWorld {
	w := &cliWorld{}
	o.Clients, o.Users, o.Sessions = []dex.Client{{ID: "inferplane", Public: true}}, apiUsers, true
	w.dex = dex.Start(t, o)
	dir := t.TempDir()
	inputs := apitest.BundledInputs(t, apitest.Remotes{Dir: filepath.Join(dir, "git")}, edits...)

	// The gateway: one replica double of acme/chat (its /health passes).
	replica := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { rw.WriteHeader(http.StatusOK) }))
	t.Cleanup(replica.Close)
	port := replica.Listener.Addr().(*net.TCPAddr).Port
	eps := filepath.Join(dir, "endpoints.yaml")
	require.NoError(t, os.WriteFile(eps, fmt.Appendf(nil, "endpoints:\n- {tenant: acme, job: chat, replicas: [{name: chat-r0-n0, address: 127.0.0.1, port: %d}]}\n", port), 0o644))
	secret := writeKeySecret(t)
	store := filepath.Join(dir, "keys.db")
	admin, grpcAddr := freePort(t), freePort(t)
	gctx, gcancel := context.WithCancel(context.Background())
	done := startServe(t, gctx, admin, "--source", "file", "--file", eps, "--domain", "models.example.com",
		"--grpc-address", grpcAddr, "--admin-address", admin, "--log-level", "warn", "--keys-file", store, "--secret-file", secret,
		"--probe-interval", "100ms", "--probe-timeout", "100ms")
	t.Cleanup(func() { gcancel(); _ = waitServe(t, done) })

	listen := freePort(t)
	w.apiURL = "http://" + listen
	startAPIServe(t, listen, []string{"api", "serve", "--listen", listen, "--oidc-issuer", w.dex.Issuer, "--oidc-client-id", "inferplane",
		"--inputs-repo", inputs, "--keys-file", store, "--keys-secret-file", secret, "--server", "http://" + admin,
		"--domain", "models.example.com", "--log-level", "warn", "--work-dir", filepath.Join(dir, "work")})
	var err error
	w.doc, err = apitest.NewOpenAPI(apitest.Fetch(t, w.apiURL))
	require.NoError(t, err)
	w.config = filepath.Join(t.TempDir(), "xdg", "inferplane")
	t.Setenv(clientconfig.EnvDir, w.config)
	return w
}

// signInAs makes openBrowser a person signing in at Dex's form as the user.
func (w *cliWorld) signInAs(t *testing.T, email string) {
	var pw string
	for _, u := range apiUsers {
		if u.Email == email {
			pw = u.Password
		}
	}
	old := openBrowser
	openBrowser = func(ctx context.Context, u string) error {
		go func() {
			status, err := w.dex.Browse(context.WithoutCancel(ctx), u, dex.PasswordLogin{Email: email, Password: pw})
			assert.NoError(t, err, w.dex.Log(20))
			assert.Equal(t, http.StatusOK, status)
		}()
		return nil
	}
	t.Cleanup(func() { openBrowser = old })
}

// session is the current context's session, its answers checked against the OpenAPI document.
func (w *cliWorld) session(t *testing.T) *apiSession {
	s, err := currentSession()
	require.NoError(t, err)
	require.NotNil(t, s, "a current context")
	c := s.api.(*apiclient.Client)
	c.Inspect = w.doc.Inspector(t)
	return s
}

// A customer signs in with `inferplane login` (the browser at Dex's form, the redirect to
// 127.0.0.1), which keeps the tokens with mode 0600 and makes a current context with the
// customer's only tenant as its default; config lists and switches contexts.
func TestLoginAndContexts(t *testing.T) {
	w := startCLIWorld(t)
	w.signInAs(t, "dana@acme.example")
	ctx := context.Background()

	_, stderr, err := execCLI(ctx, "login", "--server", w.apiURL)
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "Opened the browser to sign in")
	assert.Contains(t, stderr, "Signed in to "+w.apiURL+" as dana@acme.example")
	assert.Contains(t, stderr, "Tenants: acme (developer)")
	name := clientconfig.NameFor(w.apiURL)
	for _, f := range []string{filepath.Join(w.config, "config.yaml"), filepath.Join(w.config, "tokens", strings.ReplaceAll(name, ":", "-")+".json")} {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
	}
	out, _, err := execCLI(ctx, "config", "current-context")
	require.NoError(t, err)
	assert.Equal(t, name+"\n", out)
	out, _, err = execCLI(ctx, "config", "get-contexts")
	require.NoError(t, err)
	assert.Regexp(t, `\*\s+`+regexp.QuoteMeta(name)+`\s+`+regexp.QuoteMeta(w.apiURL)+`\s+dana@acme.example\s+acme\s+valid`, out)

	// A second context, for another tenant the caller has no role in: refused, nothing kept.
	_, _, err = execCLI(ctx, "login", w.apiURL, "--name", "globex", "--tenant", "globex")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--tenant globex: you have no role in it; yours: acme (developer)")
	_, _, err = execCLI(ctx, "login", w.apiURL, "--name", "second")
	require.NoError(t, err)
	out, _, err = execCLI(ctx, "config", "get-contexts", "-o", "name")
	require.NoError(t, err)
	assert.Equal(t, name+"\nsecond\n", out)
	_, _, err = execCLI(ctx, "config", "use-context", name)
	require.NoError(t, err)
	out, _, err = execCLI(ctx, "config", "get-contexts", "-o", "json")
	require.NoError(t, err)
	var rows []contextRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	assert.True(t, rows[0].Current)
	_, _, err = execCLI(ctx, "config", "use-context", "nope")
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), `no context "nope"`)

	// Signed out: the commands say how to sign in again.
	_, _, err = execCLI(ctx, "logout")
	require.NoError(t, err)
	s, err := currentSession()
	require.NoError(t, err)
	err = s.jobsList(ctx, &bytes.Buffer{}, "acme", "table")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not signed in for context "+name+": run `inferplane login "+w.apiURL+"`")
}

// The customer's commands through the API after login, with no operator file or kubeconfig:
// models, jobs create, list, detail (stage unknown without a host cluster: exit 3), keys
// create (the key once), list, revoke, usage and health (from the gateway), jobs delete; a
// refusal carries generate's file, field and words.
func TestCustomerCommandsThroughTheAPI(t *testing.T) {
	w := startCLIWorld(t)
	w.signInAs(t, "dana@acme.example")
	ctx := context.Background()
	_, stderr, err := execCLI(ctx, "login", w.apiURL)
	require.NoError(t, err, stderr)
	s := w.session(t)
	tenant, err := s.tenant("")
	require.NoError(t, err)
	assert.Equal(t, "acme", tenant, "the context's default tenant")

	var out, errOut bytes.Buffer
	require.NoError(t, s.modelsList(ctx, &out, tenant, "table"))
	assert.Regexp(t, `Qwen/Qwen3-32B\s+vllm\s+recipe\s+metal3.gpu-h100\s+1\s+1`, out.String())
	out.Reset()
	require.NoError(t, s.modelsList(ctx, &out, tenant, "name"))
	assert.Contains(t, out.String(), "Qwen/Qwen3-32B\n")

	out.Reset()
	require.NoError(t, s.jobsCreate(ctx, &out, &errOut, tenant, apiv1.JobCreate{Name: "web", Model: "Qwen/Qwen3-32B", Replicas: 2}, ""))
	assert.Contains(t, out.String(), "created acme/web: Qwen/Qwen3-32B, 2 replica(s) x 1 GPU of metal3.gpu-h100")
	assert.Contains(t, out.String(), "endpoint: https://web.acme.models.example.com")
	assert.Contains(t, errOut.String(), "the tenant's repository: commit ")

	err = s.jobsCreate(ctx, &out, &errOut, tenant, apiv1.JobCreate{Name: "huge", Model: "Qwen/Qwen3-32B", Replicas: 40}, "")
	require.Error(t, err, "past the tenant's GPU quota")
	assert.Contains(t, err.Error(), "422")
	assert.Contains(t, err.Error(), "tenants/acme/jobs/huge.yaml: spec.replicas is 40: needs 40 GPUs (40 replicas x 1), but Tenant acme's GPU quota is 16")

	out.Reset()
	require.NoError(t, s.jobsList(ctx, &out, tenant, "table"))
	assert.Regexp(t, `acme/web\s+Qwen/Qwen3-32B\s+metal3.gpu-h100\s+2\s+1\s+unknown`, out.String())
	out.Reset()
	require.NoError(t, s.jobsList(ctx, &out, tenant, "yaml"))
	assert.Contains(t, out.String(), "gpusPerReplica: 1", "camelCase, the API's own field names")

	out.Reset()
	err = s.jobsDetail(ctx, &out, io.Discard, tenant, "web", "table", waitFlags{})
	assert.Equal(t, exitOnItsWay, exitCode(err), "not serving: exit 3")
	assert.Contains(t, out.String(), "Job:        acme/web")
	assert.Contains(t, out.String(), "Endpoint:   https://web.acme.models.example.com (API key required)")
	assert.Contains(t, out.String(), "without a host cluster")

	out.Reset()
	errOut.Reset()
	require.NoError(t, s.keysCreate(ctx, &out, &errOut, tenant, apiv1.KeyCreate{Endpoint: "web"}, "", ""))
	key := strings.TrimSpace(out.String())
	assert.NotEmpty(t, key)
	assert.NotContains(t, key, "\n", "the key alone on standard output")
	assert.Contains(t, errOut.String(), "for endpoint web of acme, never expires; shown this once")
	out.Reset()
	require.NoError(t, s.keysList(ctx, &out, tenant, "json"))
	var keys apiv1.KeyList
	require.NoError(t, json.Unmarshal(out.Bytes(), &keys))
	require.Len(t, keys.Items, 1)
	assert.NotContains(t, out.String(), key, "never the secret")
	id := keys.Items[0].ID

	out.Reset()
	require.Eventually(t, func() bool {
		out.Reset()
		return s.health(ctx, &out, tenant, "table") == nil && strings.Contains(out.String(), "acme/chat  healthy")
	}, 20*time.Second, 100*time.Millisecond, "health through the API: %s", &out)
	out.Reset()
	require.NoError(t, s.usage(ctx, &out, tenant, apiclient.UsageQuery{Since: "1h"}, "json"))
	var u apiv1.Usage
	require.NoError(t, json.Unmarshal(out.Bytes(), &u))
	assert.Equal(t, "acme", u.Tenant)

	out.Reset()
	require.NoError(t, s.keysRevoke(ctx, &out, tenant, id))
	assert.Equal(t, "revoked key "+id+" of acme\n", out.String())

	// A key into a new file only its owner reads; a file that exists gets no key.
	keyFile := filepath.Join(t.TempDir(), "web.key")
	errOut.Reset()
	require.NoError(t, s.keysCreate(ctx, &out, &errOut, tenant, apiv1.KeyCreate{Endpoint: "web"}, "", keyFile))
	assert.Contains(t, errOut.String(), "written to "+keyFile+" (mode 0600)")
	fi, err := os.Stat(keyFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	inFile, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	assert.Regexp(t, `^ipk_\S+\n$`, string(inFile))
	err = s.keysCreate(ctx, &out, &errOut, tenant, apiv1.KeyCreate{Endpoint: "web"}, "", keyFile)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exists: a key is written to a new file only (no key was created)")
	out.Reset()
	require.NoError(t, s.keysList(ctx, &out, tenant, "json"))
	require.NoError(t, json.Unmarshal(out.Bytes(), &keys))
	require.Len(t, keys.Items, 2, "no key for the file that existed")
	second := keys.Items[0].ID
	if second == id {
		second = keys.Items[1].ID
	}

	// Deleted with --revoke-keys: the endpoint's active key is revoked, the revoked one is left.
	out.Reset()
	require.NoError(t, s.jobsDelete(ctx, &out, &errOut, tenant, "web", true))
	assert.Contains(t, out.String(), "deleted acme/web")
	assert.Contains(t, out.String(), "revoked key "+second+" of acme")
	assert.NotContains(t, out.String(), "revoked key "+id)
	err = s.jobsDetail(ctx, &out, io.Discard, tenant, "web", "table", waitFlags{})
	assert.Contains(t, err.Error(), "404")

	// Another customer's tenant is out of reach, worded as a tenant that does not exist.
	err = s.jobsList(ctx, &out, "globex", "table")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "403")
}

// An expired ID token is refreshed with the refresh token, and the rotated refresh token kept.
func TestTokensRefreshed(t *testing.T) {
	w := startCLIWorld(t)
	w.signInAs(t, "dana@acme.example")
	ctx := context.Background()
	_, stderr, err := execCLI(ctx, "login", w.apiURL)
	require.NoError(t, err, stderr)
	store, err := clientconfig.Open()
	require.NoError(t, err)
	name := clientconfig.NameFor(w.apiURL)
	before, err := store.Tokens(name)
	require.NoError(t, err)
	// The cache says the token expired: the next command refreshes it.
	expired := before
	expired.Expiry = time.Now().Add(-time.Minute)
	require.NoError(t, store.SaveTokens(name, expired))
	s := w.session(t)
	require.NoError(t, s.jobsList(ctx, &bytes.Buffer{}, "acme", "name"))
	after, err := store.Tokens(name)
	require.NoError(t, err)
	assert.NotEqual(t, before.IDToken, after.IDToken, "a new ID token")
	assert.NotEqual(t, before.RefreshToken, after.RefreshToken, "Dex rotates the refresh token; the new one is kept")
	assert.True(t, after.Expiry.After(time.Now()))
}

// lineWatch is a terminal the test reads while the command runs: each write is also matched
// against a pattern, whose first match is sent once.
type lineWatch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	re    *regexp.Regexp
	found chan []string
}

func (l *lineWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if m := l.re.FindStringSubmatch(l.buf.String()); m != nil && l.found != nil {
		l.found <- m
		l.found = nil
	}
	return len(p), nil
}

// login --device: the CLI prints Dex's verification URL and a code, a person enters the code
// there (on any device) and signs in, and the CLI's poll gets the tokens. Dex serves at the
// root of its address: under a path, Dex at our pin refuses its own device callback for a
// public client without registered redirect URIs (see productapi/signin's tests).
func TestLoginDevice(t *testing.T) {
	w := startCLIWorldWith(t, dex.Options{RootIssuer: true})
	ctx := context.Background()
	found := make(chan []string, 1)
	term := &lineWatch{re: regexp.MustCompile(`open (\S+) and enter the code (\S+)`), found: found}
	go func() {
		m := <-found
		assert.Equal(t, w.dex.Issuer+"/device", m[1])
		assert.NoError(t, w.dex.ApproveDevice(ctx, m[2], dex.PasswordLogin{Email: "dana@acme.example", Password: "pw-dana"}), w.dex.Log(20))
	}()
	root := newRootCmd()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(term)
	root.SetArgs([]string{"login", w.apiURL, "--device"})
	require.NoError(t, root.ExecuteContext(ctx), term.buf.String())
	assert.Contains(t, term.buf.String(), "Signed in to "+w.apiURL+" as dana@acme.example")
	var out bytes.Buffer
	require.NoError(t, w.session(t).jobsList(ctx, &out, "acme", "name"))
	assert.Contains(t, out.String(), "acme/qwen3-32b")
}

// The existing commands call the API once a context is current, with their own flags and
// arguments, and work on the operator's files again when given --tenants.
func TestCommandsUseTheCurrentContext(t *testing.T) {
	w := startCLIWorld(t)
	w.signInAs(t, "dana@acme.example")
	ctx := context.Background()
	_, stderr, err := execCLI(ctx, "login", w.apiURL)
	require.NoError(t, err, stderr)

	out, stderr, err := execCLI(ctx, "models", "list", "-o", "name")
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "Qwen/Qwen3-32B\n")
	out, stderr, err = execCLI(ctx, "jobs", "create", "acme/web", "--model", "Qwen/Qwen3-32B", "--replicas", "2")
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "created acme/web")
	out, _, err = execCLI(ctx, "jobs", "list", "-o", "json")
	require.NoError(t, err)
	assert.Contains(t, out, `"name": "web"`)
	out, _, err = execCLI(ctx, "jobs", "detail", "acme/web")
	assert.Equal(t, exitOnItsWay, exitCode(err))
	assert.Contains(t, out, "Job:        acme/web")
	_, _, err = execCLI(ctx, "jobs", "restart", "acme/web")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "without a host cluster", "the API's reason")
	key, stderr, err := execCLI(ctx, "keys", "create", "--tenant", "acme", "--endpoint", "web")
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "shown this once")
	// The key's own limits from the flags (--tenant from the context); a bad one is refused
	// before the API is asked.
	_, stderr, err = execCLI(ctx, "keys", "create", "--endpoint", "web", "--requests-per-minute", "5", "--tokens-per-day", "1000", "--soft", "tpd")
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "for endpoint web of acme, never expires; 5 requests per minute, 1000 tokens per day (soft); shown this once")
	_, _, err = execCLI(ctx, "keys", "create", "--soft", "rpm")
	assert.Equal(t, 2, exitCode(err))
	assert.ErrorContains(t, err, "--soft rpm: the key has no")
	out, _, err = execCLI(ctx, "keys", "list", "-o", "json")
	require.NoError(t, err)
	var keys apiv1.KeyList
	require.NoError(t, json.Unmarshal([]byte(out), &keys))
	require.Len(t, keys.Items, 2)
	assert.NotContains(t, out, strings.TrimSpace(key))
	limited := keys.Items[0]
	if limited.Limits == nil {
		limited = keys.Items[1]
	}
	require.NotNil(t, limited.Limits, "one key has limits: %s", out)
	assert.EqualValues(t, 5, limited.Limits.RequestsPerMinute.Value)
	assert.Equal(t, v1alpha1.LimitSoft, limited.Limits.TokensPerDay.Mode)
	out, _, err = execCLI(ctx, "keys", "usage", "-o", "yaml")
	require.NoError(t, err)
	assert.Contains(t, out, "tenant: acme")
	out, _, err = execCLI(ctx, "health", "-o", "json")
	require.NoError(t, err)
	assert.Contains(t, out, `"tenant": "acme"`)
	_, _, err = execCLI(ctx, "keys", "revoke", keys.Items[0].ID, "--yes")
	require.NoError(t, err)
	_, _, err = execCLI(ctx, "jobs", "delete", "acme/web")
	assert.Equal(t, 2, exitCode(err), "delete asks for --yes")
	out, _, err = execCLI(ctx, "jobs", "delete", "acme/web", "--yes")
	require.NoError(t, err)
	assert.Contains(t, out, "deleted acme/web")
	// Without --revoke-keys, the endpoint's key still active is named, as on the files.
	assert.Contains(t, out, "1 API key(s) limited to endpoint acme/web stay active: "+keys.Items[1].ID+"; revoke them with `inferplane keys revoke "+keys.Items[1].ID+"`")

	// The operator's files: --tenants is the files' path, whatever the context (which then
	// reads the clusters through a kubeconfig, which this test has not).
	_, _, err = execCLI(ctx, "jobs", "list", "--tenants", "../../tenants", "--recipes", "../../recipes")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the host cluster: no kubeconfig", "the operator's path, not the API")
}
