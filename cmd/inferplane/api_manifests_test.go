package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
	apiinstall "github.com/inferplane/inferplane/productapi/install"
)

// TestManifestsConsoleAcrossReplicas runs the install's own command line: api serve as the
// manifests' StatefulSet runs it, twice (two replicas), each given the same session-keys file
// (what every pod mounts from the console's Secret), with only what points at the cluster
// replaced (no --in-cluster, no inputs credentials, the bundled inputs in a file:// repository,
// the mounted files' paths, 127.0.0.1 addresses, a real Dex as the provider). A user signs in
// at one replica through Dex's login form, and the other replica serves the console to that
// session; a replica with keys of its own does not (the user would be sent to sign in again).
// Beside the console, the API takes no cookie as a sign-in, and every answer of the server
// forbids framing.
func TestManifestsConsoleAcrossReplicas(t *testing.T) {
	o := apiinstall.Options{Domain: "models.example.com", Issuer: "https://login.example.com", ClientID: "inferplane",
		InputsRepo: "https://git.example.com/ops/inputs.git"}
	dep := installStatefulSet(t, o)
	args := dep.Spec.Template.Spec.Containers[0].Args
	require.GreaterOrEqual(t, *dep.Spec.Replicas, int32(2))
	for _, want := range []string{"--console-url", "--console-session-keys"} {
		require.Contains(t, args, want, "the manifests configure the console")
	}
	assert.NotContains(t, args, "--no-console")

	// The console's Secret, as the manifests' header says to make it: one key, in hex, a line.
	dir := t.TempDir()
	key := []byte(strings.Repeat("k", console.KeySize))
	shared := filepath.Join(dir, "session-keys")
	require.NoError(t, os.WriteFile(shared, []byte(hex.EncodeToString(key)+"\n"), 0o400))
	own := filepath.Join(dir, "other-keys")
	require.NoError(t, os.WriteFile(own, []byte(strings.Repeat("ab", console.KeySize)+"\n"), 0o400))

	addrs := []string{freePort(t), freePort(t), freePort(t)}
	var callbacks []string
	for _, a := range addrs {
		callbacks = append(callbacks, "http://"+a+"/auth/callback")
	}
	d := dex.Start(t, dex.Options{Clients: []dex.Client{{ID: o.ClientID, Public: true, RedirectURIs: callbacks}}, Users: apiUsers})
	inputs := apitest.BundledInputs(t, apitest.Remotes{Dir: filepath.Join(dir, "git")})
	secret := writeKeySecret(t)
	token := writePeerToken(t)
	for i, a := range addrs {
		keys := shared
		if i == 2 {
			keys = own
		}
		peer := freePort(t)
		local := localArgs(args, map[string]string{"--listen": a, "--oidc-issuer": d.Issuer, "--inputs-repo": inputs,
			"--tenant-credentials-dir": t.TempDir(), "--work-dir": t.TempDir(), "--keys-secret-file": secret, "--server": "http://127.0.0.1:1", "--meter": "http://127.0.0.1:1",
			"--console-url": "http://" + a, "--console-session-keys": keys, "--peer-listen": peer, "--peer-url": "http://" + peer, "--peer-token-file": token},
			"--in-cluster", "--inputs-credentials-file")
		startAPIServe(t, a, local)
	}

	session := consoleSignIn(t, d, "http://"+addrs[0], "dana@acme.example", "pw-dana")
	for _, a := range addrs[:2] {
		resp, body := consoleGet(t, "http://"+a+"/me", session)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "replica %s: %s", a, body)
		assert.Contains(t, body, "dana@acme.example", "replica %s serves the session", a)
	}
	resp, _ := consoleGet(t, "http://"+addrs[2]+"/me", session)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "a replica with keys of its own opened the session")
	assert.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/auth/login"), resp.Header.Get("Location"))

	// The API beside it reads no cookie: the console's session signs nobody in there. And
	// every answer of the server, the API's and the console's, forbids framing.
	base := "http://" + addrs[0]
	for _, rq := range []struct{ method, path string }{{http.MethodGet, "/api/v1/me"}, {http.MethodPost, "/api/v1/tenants/acme/keys"},
		{http.MethodDelete, "/api/v1/tenants/acme/jobs/chat"}} {
		req, err := http.NewRequest(rq.method, base+rq.path, strings.NewReader(`{"name":"from-a-cookie"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.AddCookie(session)
		resp, err := noRedirects.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s with the console's session", rq.method, rq.path)
	}
	for _, p := range []string{"/api/v1/me", "/api/v1/openapi.json", "/healthz", "/metrics", "/me", "/auth/login", "/static/console.js", "/nope"} {
		resp, _ := consoleGet(t, base+p, session)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", p)
		assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), p)
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), p)
	}
}

// installStatefulSet is the StatefulSet of the API's install.
func installStatefulSet(t *testing.T, o apiinstall.Options) *appsv1.StatefulSet {
	t.Helper()
	objs, err := apiinstall.Manifests(o)
	require.NoError(t, err)
	for _, obj := range objs {
		if s, ok := obj.(*appsv1.StatefulSet); ok {
			return s
		}
	}
	t.Fatal("no StatefulSet in the install")
	return nil
}

// writePeerToken writes the peers' token as the install's header says to make its Secret
// (openssl rand -hex 32) and the pods mount it: a file, one line.
func writePeerToken(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), apiinstall.PeerTokenKey)
	require.NoError(t, os.WriteFile(p, []byte(hex.EncodeToString([]byte(strings.Repeat("p", 32)))+"\n"), 0o400))
	return p
}

// kubeletArgs is the container's command line as the kubelet runs it in pod `pod`: each
// $(VAR) of the container's variables replaced by its value (a literal, or the pod's name
// for the downward API's metadata.name, the only field the install uses).
func kubeletArgs(t *testing.T, c corev1.Container, pod string) []string {
	t.Helper()
	var pairs []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			require.NotNil(t, e.ValueFrom.FieldRef, "variable %s", e.Name)
			require.Equal(t, "metadata.name", e.ValueFrom.FieldRef.FieldPath, "variable %s", e.Name)
			v = pod
		}
		pairs = append(pairs, "$("+e.Name+")", v)
	}
	r := strings.NewReplacer(pairs...)
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = r.Replace(a)
		require.NotContains(t, out[i], "$(", "a variable the container does not have")
	}
	return out
}

// secretFiles maps each file the container's mounted Secrets put in it to "<secret>/<key>".
func secretFiles(pod corev1.PodSpec, c corev1.Container) map[string]string {
	files := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				for _, item := range v.Secret.Items {
					files[m.MountPath+"/"+item.Path] = v.Secret.SecretName + "/" + item.Key
				}
			}
		}
	}
	return files
}

// What api serve reads from the install's peer flags, as each pod runs them: parsed by api
// serve's own flags, each replica's peer URL is its pod's name under the headless Service, as
// api serve checks it, and its token file is the key of the peers' Secret the pod mounts.
// Every flag of the command line is one of api serve's.
func TestManifestsPeerFlagsAsServeReadsThem(t *testing.T) {
	o := apiinstall.Options{Domain: "models.example.com", Issuer: "https://login.example.com", ClientID: "inferplane",
		InputsRepo: "https://git.example.com/ops/inputs.git", Replicas: 3}
	sts := installStatefulSet(t, o)
	c := sts.Spec.Template.Spec.Containers[0]
	files := secretFiles(sts.Spec.Template.Spec, c)
	seen := map[string]bool{}
	for i := range *sts.Spec.Replicas {
		pod := fmt.Sprintf("%s-%d", sts.Name, i) // a StatefulSet's pod names
		args := kubeletArgs(t, c, pod)
		c := serveConfig(t, args)
		assert.Equal(t, "http://"+pod+"."+sts.Spec.ServiceName+".inferplane-system.svc:8081", c.PeerURL)
		assert.Equal(t, ":8080", c.Listen, "customers reach the Service's port")
		assert.Equal(t, ":8081", c.PeerListen, "the peers reach a port of their own, the peer URL's")
		assert.Empty(t, checkPeer(c))
		assert.Equal(t, "inferplane-api-peers/"+apiinstall.PeerTokenKey, files[c.PeerTokenFile], "the token file is the peers' Secret's")
		assert.False(t, seen[c.PeerURL], "two replicas at one URL")
		seen[c.PeerURL] = true
	}

	o.Replicas = 1
	one := serveConfig(t, kubeletArgs(t, installStatefulSet(t, o).Spec.Template.Spec.Containers[0], "inferplane-api-0"))
	assert.Empty(t, one.PeerURL, "one replica has no peers")
	assert.Empty(t, one.PeerTokenFile)
	assert.Empty(t, one.PeerListen, "nothing listens for peers")
	assert.Empty(t, checkPeer(one))
}

// serveConfig is what api serve's own flags read of a pod's command line (api serve ...).
func serveConfig(t *testing.T, args []string) productapi.Config {
	t.Helper()
	require.Equal(t, []string{"api", "serve"}, args[:2])
	cmd := newAPIServeCmd()
	require.NoError(t, cmd.ParseFlags(args[2:]), "the install's flags are api serve's")
	flag := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	return productapi.Config{Listen: flag("listen"), PeerURL: flag("peer-url"), PeerTokenFile: flag("peer-token-file"), PeerListen: flag("peer-listen")}
}

// TestManifestsHandOverAcrossReplicas runs the install's command line as two replicas, each
// given the same token file (what every pod mounts from the peers' Secret) and, for its pod's
// name and its two ports, 127.0.0.1 addresses (the rest replaced as in
// TestManifestsConsoleAcrossReplicas): a write through the replica that did not push last is
// handed to the one that did, at its peer port, which pushes it and names itself in the
// commit. The customers' port answers the peer route 404; the peer port takes no post without
// the token.
func TestManifestsHandOverAcrossReplicas(t *testing.T) {
	o := apiinstall.Options{Domain: "models.example.com", Issuer: "https://login.example.com", ClientID: "inferplane",
		InputsRepo: "https://git.example.com/ops/inputs.git", NoConsole: true}
	args := installStatefulSet(t, o).Spec.Template.Spec.Containers[0].Args
	require.Contains(t, args, "--peer-url")
	require.Contains(t, args, "--peer-token-file")

	d := dex.Start(t, dex.Options{Clients: []dex.Client{{ID: o.ClientID, Secret: "api-secret", RedirectURIs: []string{"http://127.0.0.1:1/callback"}}}, Users: apiUsers})
	remotes := apitest.Remotes{Dir: filepath.Join(t.TempDir(), "git")}
	inputs := apitest.BundledInputs(t, remotes)
	secret, token := writeKeySecret(t), writePeerToken(t)
	addrs, peers := []string{freePort(t), freePort(t)}, []string{freePort(t), freePort(t)}
	// The writer is the replica whose peer URL sorts first among those that pushed lately.
	if "http://"+peers[1] < "http://"+peers[0] {
		peers[0], peers[1] = peers[1], peers[0]
	}
	for i, a := range addrs {
		startAPIServe(t, a, localArgs(args, map[string]string{"--listen": a, "--oidc-issuer": d.Issuer, "--inputs-repo": inputs,
			"--tenant-credentials-dir": t.TempDir(), "--work-dir": t.TempDir(), "--keys-secret-file": secret, "--server": "http://127.0.0.1:1", "--meter": "http://127.0.0.1:1",
			"--peer-listen": peers[i], "--peer-url": "http://" + peers[i], "--peer-token-file": token}, "--in-cluster", "--inputs-credentials-file"))
	}
	tok, err := os.ReadFile(token)
	require.NoError(t, err)
	for _, rq := range []struct {
		addr      string
		withToken bool
		want      int
	}{{addrs[0], false, http.StatusNotFound}, {addrs[0], true, http.StatusNotFound}, {peers[0], false, http.StatusUnauthorized}} {
		req, err := http.NewRequest(http.MethodPost, "http://"+rq.addr+"/internal/v1/inputs/submit", strings.NewReader(`{}`))
		require.NoError(t, err)
		if rq.withToken {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		}
		resp, err := noRedirects.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, rq.want, resp.StatusCode, "the peer route at %s (token: %t)", rq.addr, rq.withToken)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	idToken := apiSignIn(t, d, o.ClientID, "dana@acme.example")
	writer, other := apiclient.New("http://"+addrs[0], apiclient.StaticToken(idToken)), apiclient.New("http://"+addrs[1], apiclient.StaticToken(idToken))

	first, err := writer.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "first", Model: "Qwen/Qwen3-32B"}, apiclient.WriteOptions{})
	require.NoError(t, err)
	assert.Equal(t, "http://"+peers[0], writerOf(t, remotes.Path("inputs"), first.Write.InputsCommit))
	// The other replica hands writes over once it has read the writer's commit (its reads
	// fetch every --refresh-interval).
	require.Eventually(t, func() bool {
		jobs, err := other.ListJobs(ctx, "acme")
		return err == nil && slices.ContainsFunc(jobs.Items, func(j apiv1.Job) bool { return j.Name == "first" })
	}, time.Minute, 200*time.Millisecond)
	second, err := other.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "second", Model: "Qwen/Qwen3-32B"}, apiclient.WriteOptions{})
	require.NoError(t, err)
	assert.Equal(t, "http://"+peers[0], writerOf(t, remotes.Path("inputs"), second.Write.InputsCommit), "pushed by the writer")
	assert.Equal(t, 1.0, metricValue(t, "http://"+addrs[0], "inferplane_api_writes_taken_total"), "the writer took one write")
	assert.Equal(t, 0.0, metricValue(t, "http://"+addrs[1], "inferplane_api_writes_taken_total"))
}

// writerOf is the peer URL an inputs commit names as its writer.
func writerOf(t *testing.T, repo, commit string) string {
	t.Helper()
	id := strings.TrimSpace(gitserver.Git(t, repo, "log", "-1", "--format=%(trailers:key="+inputsrepo.TrailerWriter+",valueonly)", commit))
	peer, _, _ := strings.Cut(id, " ")
	return peer
}

// metricValue is the value of an unlabelled metric the server at base exposes (0 when absent).
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, body := consoleGet(t, base+"/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}

// localArgs is the manifests' command line with each flag of set given that value (every
// occurrence) and the flags of drop left out (with their value, unless a boolean).
func localArgs(args []string, set map[string]string, drop ...string) []string {
	out := []string{"api", "serve"}
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case slices.Contains(drop, a):
			if a != "--in-cluster" {
				i++
			}
		case set[a] != "":
			out = append(out, a, set[a])
			i++
		default:
			out = append(out, a)
		}
	}
	return out
}

// startAPIServe runs api serve with args until the test ends (its clean exit checked, within
// 2 minutes: its --shutdown-timeout is 20 s and a loaded machine adds to it), ready when it
// returns.
func startAPIServe(t *testing.T, addr string, args []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, stderr, err := execCLI(ctx, args...)
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, stderr)
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(2 * time.Minute):
			t.Error("api serve did not stop")
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 50*time.Millisecond, "api serve %v becomes ready", args)
}

var noRedirects = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func consoleGet(t *testing.T, u string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func cookieOf(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// consoleSignIn signs in at a console as a browser would, without one: the console's redirect
// to Dex (its login cookie kept), Dex's email login form filled in (Dex's own cookies kept),
// Dex's redirect back to the console's callback, whose answer sets the session cookie.
func consoleSignIn(t *testing.T, d *dex.Dex, base, email, password string) *http.Cookie {
	t.Helper()
	resp, _ := consoleGet(t, base+"/auth/login?next=/me")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	login := cookieOf(resp, "__Host-inferplane-login")
	require.NotNil(t, login, "the console's login cookie")
	auth, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(auth.String(), d.Issuer), "the console sends the browser to Dex: %s", auth)
	q := auth.Query()
	q.Set("connector_id", dex.LocalConnector)
	auth.RawQuery = q.Encode()

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), base+"/") {
			return http.ErrUseLastResponse // back at the console: its cookie is not in this jar
		}
		return nil
	}}
	form, err := browser.Get(auth.String())
	require.NoError(t, err)
	form.Body.Close()
	require.Equal(t, http.StatusOK, form.StatusCode)
	back, err := browser.PostForm(form.Request.URL.String(), url.Values{"login": {email}, "password": {password}})
	require.NoError(t, err)
	back.Body.Close()
	callback := back.Header.Get("Location")
	require.True(t, strings.HasPrefix(callback, base+"/auth/callback?"), "Dex sends the browser back to the console: %d %s\n%s", back.StatusCode, callback, d.Log(20))

	resp, body := consoleGet(t, callback, login)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	assert.Equal(t, "/me", resp.Header.Get("Location"))
	s := cookieOf(resp, console.SessionCookie)
	require.NotNil(t, s, "the session cookie")
	return s
}

// An API served without the console (the manifests' --no-console) forbids framing in every
// answer too, a page it does not have included.
func TestAPIOnlyForbidsFraming(t *testing.T) {
	dir := t.TempDir()
	addr := freePort(t)
	startAPIServe(t, addr, []string{"api", "serve", "--no-console", "--listen", addr, "--oidc-issuer", "http://127.0.0.1:1/dex",
		"--oidc-client-id", "inferplane", "--inputs-repo", apitest.BundledInputs(t, apitest.Remotes{Dir: filepath.Join(dir, "git")}),
		"--work-dir", filepath.Join(dir, "work"), "--log-level", "warn"})
	for _, tc := range []struct {
		path   string
		status int
	}{{"/", 404}, {"/me", 404}, {"/auth/login", 404}, {"/api/v1/openapi.json", 200}, {"/api/v1/me", 401}, {"/healthz", 200}} {
		resp, _ := consoleGet(t, "http://"+addr+tc.path)
		assert.Equal(t, tc.status, resp.StatusCode, tc.path)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", tc.path)
		assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), tc.path)
	}
}
