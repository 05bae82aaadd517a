package console_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/consoletest"
)

// These tests use the console over HTTP on 127.0.0.1, signed in with the development sign-in
// (the OIDC sign-in runs against a real Dex in console/e2e), with consoletest's TEST DOUBLE of
// the API's service layer.

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	srv     *consoletest.Server
	backend *consoletest.Backend
	clock   *clock
}

// newFixture serves the example data with the development sign-in; more changes the options.
func newFixture(t *testing.T, more ...func(*console.Options)) *fixture {
	t.Helper()
	f := &fixture{clock: &clock{t: time.Now()}}
	f.backend = consoletest.Example(f.clock.now())
	f.srv = consoletest.Start(t, func(addr string) console.Options {
		o := console.Options{Backend: f.backend, Dev: true, ListenAddr: addr,
			SessionKeys: [][]byte{consoletest.Key()}, Now: f.clock.now, LiveInterval: 50 * time.Millisecond, SessionMaxAge: time.Hour}
		for _, m := range more {
			m(&o)
		}
		return o
	})
	return f
}

// noRedirect is a client that shows redirects rather than following them.
var noRedirect = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// user is a signed-in session: its cookie and CSRF token.
type user struct {
	cookie *http.Cookie
	csrf   string
}

// signIn uses the development sign-in and reads the CSRF token off the first page.
func (f *fixture) signIn(t *testing.T, email string, groups ...string) user {
	t.Helper()
	form := url.Values{"email": {email}, "groups": {strings.Join(groups, ",")}, "next": {"/me"}}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/auth/dev", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var u user
	for _, c := range resp.Cookies() {
		if c.Name == console.SessionCookie {
			u.cookie = c
		}
	}
	require.NotNil(t, u.cookie, "no session cookie")
	body := f.get(t, u, "/me", http.StatusOK)
	u.csrf = metaCSRF(t, body)
	return u
}

func metaCSRF(t *testing.T, body string) string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	require.NoError(t, err)
	var tok string
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "meta" && attr(n, "name") == "csrf-token" {
			tok = attr(n, "content")
		}
	})
	require.NotEmpty(t, tok, "no csrf-token meta in the page")
	return tok
}

func (f *fixture) do(t *testing.T, u user, method, path string, body io.Reader, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	require.NoError(t, err)
	if u.cookie != nil {
		req.AddCookie(u.cookie)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	return resp
}

func (f *fixture) get(t *testing.T, u user, path string, status int) string {
	t.Helper()
	resp := f.do(t, u, http.MethodGet, path, nil, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, status, resp.StatusCode, "GET %s: %s", path, b)
	return string(b)
}

func (f *fixture) post(t *testing.T, u user, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for k, v := range hdr {
		h[k] = v
	}
	resp := f.do(t, u, http.MethodPost, path, strings.NewReader(form.Encode()), h)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func walk(n *html.Node, fn func(*html.Node)) {
	fn(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, fn)
	}
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func TestNewRefuses(t *testing.T) {
	be := consoletest.Example(time.Now())
	key := [][]byte{consoletest.Key()}
	v, err := access.NewVerifier(access.VerifierConfig{Issuer: "http://127.0.0.1:1/dex", ClientID: "c"})
	require.NoError(t, err)
	oidc := &console.OIDC{Issuer: "http://127.0.0.1:1/dex", ClientID: "c", Verifier: v}
	for _, tc := range []struct {
		name string
		o    console.Options
		want string
	}{
		{"no backend", console.Options{Dev: true, ListenAddr: "127.0.0.1:8080", SessionKeys: key}, "no backend"},
		{"dev on every address", console.Options{Backend: be, Dev: true, ListenAddr: "0.0.0.0:8080", SessionKeys: key}, "refused unless the server listens on 127.0.0.1"},
		{"dev on a port only", console.Options{Backend: be, Dev: true, ListenAddr: ":8080", SessionKeys: key}, "refused unless"},
		{"dev on localhost (a name)", console.Options{Backend: be, Dev: true, ListenAddr: "localhost:8080", SessionKeys: key}, "refused unless"},
		{"dev on another address", console.Options{Backend: be, Dev: true, ListenAddr: "10.1.2.3:8080", SessionKeys: key}, "refused unless"},
		{"dev and OIDC", console.Options{Backend: be, Dev: true, ListenAddr: "127.0.0.1:8080", SessionKeys: key, OIDC: oidc}, "leave out one"},
		{"neither", console.Options{Backend: be, SessionKeys: key, ExternalURL: "https://c.example"}, "no OIDC provider"},
		{"plain http elsewhere", console.Options{Backend: be, SessionKeys: key, OIDC: oidc, ExternalURL: "http://console.example"}, "use https"},
		{"a path in the URL", console.Options{Backend: be, SessionKeys: key, OIDC: oidc, ExternalURL: "https://c.example/console"}, "no path"},
		{"no session key", console.Options{Backend: be, Dev: true, ListenAddr: "127.0.0.1:8080"}, "no session key"},
		{"a short key", console.Options{Backend: be, Dev: true, ListenAddr: "127.0.0.1:8080", SessionKeys: [][]byte{[]byte("short")}}, "5 bytes, want 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := console.New(tc.o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = console.New(console.Options{Backend: be, SessionKeys: key, OIDC: oidc, ExternalURL: "https://console.example"})
	assert.NoError(t, err)
}

// TestSecurityHeadersOnEveryResponse: pages, assets, redirects, errors, the mux's own 405,
// streams: every answer carries the CSP and nosniff.
func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	anon := user{}
	for _, tc := range []struct {
		name         string
		u            user
		method, path string
		status       int
	}{
		{"sign-in redirect", anon, "GET", "/", http.StatusSeeOther},
		{"a page", u, "GET", "/t/acme/jobs", http.StatusOK},
		{"home redirect", u, "GET", "/", http.StatusSeeOther},
		{"a script", anon, "GET", "/static/console.js", http.StatusOK},
		{"a vendor script", anon, "GET", "/static/vendor/htmx.min.js", http.StatusOK},
		{"a missing file", anon, "GET", "/static/nope.js", http.StatusNotFound},
		{"an unknown page", u, "GET", "/nope", http.StatusNotFound},
		{"another tenant", u, "GET", "/t/globex/jobs", http.StatusNotFound},
		{"signed out post", anon, "POST", "/t/acme/keys", http.StatusUnauthorized},
		{"no token", u, "POST", "/t/acme/keys", http.StatusForbidden},
		{"method not allowed", u, "DELETE", "/me", http.StatusMethodNotAllowed},
		{"callback without a sign-in", anon, "GET", "/auth/callback?state=x&code=y", http.StatusNotFound},
		{"dev form", anon, "GET", "/auth/dev", http.StatusOK},
		{"csp report", anon, "POST", "/csp-report", http.StatusNoContent},
		{"favicon", anon, "GET", "/favicon.ico", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, tc.u, tc.method, tc.path, strings.NewReader(""), nil)
			resp.Body.Close()
			assert.Equal(t, tc.status, resp.StatusCode)
			assertHeaders(t, resp.Header)
		})
	}
	t.Run("a stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/t/acme/jobs/events", nil)
		req.AddCookie(u.cookie)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		assertHeaders(t, resp.Header)
	})
}

func assertHeaders(t *testing.T, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	assert.Equal(t, console.CSP, csp)
	assert.Contains(t, csp, "frame-ancestors 'none'")
	assert.Contains(t, csp, "script-src 'self';")
	assert.NotContains(t, csp, "unsafe")
	assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	assert.Equal(t, "DENY", h.Get("X-Frame-Options"))
}

// TestNoInlineScriptOrStyle reads every page's HTML: every script is a file of the console's,
// and no element carries a style or an event-handler attribute (the CSP would block them; the
// browser tests check it blocks what gets in anyway).
func TestNoInlineScriptOrStyle(t *testing.T) {
	f := newFixture(t)
	ops := f.signIn(t, "ops@platform.example", consoletest.AdminGroup)
	pages := []string{"/me", "/fleet", "/t/acme/jobs", "/t/acme/jobs/new", "/t/acme/jobs/chat", "/t/acme/jobs/chat/restart",
		"/t/acme/jobs/chat/delete", "/t/acme/keys", "/t/acme/keys/k-5f2a91c0/revoke", "/t/acme/usage", "/t/acme/playground", "/nope"}
	for _, p := range pages {
		resp := f.do(t, ops, http.MethodGet, p, nil, nil)
		doc, err := html.Parse(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		walk(doc, func(n *html.Node) {
			if n.Type != html.ElementNode {
				return
			}
			if n.Data == "script" && (attr(n, "src") == "" || n.FirstChild != nil) {
				t.Errorf("%s: an inline script", p)
			}
			if n.Data == "style" {
				t.Errorf("%s: a <style> element", p)
			}
			for _, a := range n.Attr {
				if a.Key == "style" || strings.HasPrefix(a.Key, "on") {
					t.Errorf("%s: <%s %s=...>", p, n.Data, a.Key)
				}
			}
			if src := attr(n, "src") + attr(n, "href"); strings.Contains(src, "//") && !strings.HasPrefix(src, "/") {
				if n.Data == "script" || n.Data == "link" {
					t.Errorf("%s: <%s> loads from elsewhere: %s", p, n.Data, src)
				}
			}
		})
	}
}

func TestCSRF(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	form := func(tok string) url.Values { return url.Values{"csrf": {tok}, "name": {"k"}} }
	for _, tc := range []struct {
		name   string
		form   url.Values
		hdr    map[string]string
		status int
		says   string
	}{
		{"no token", form(""), nil, http.StatusForbidden, "security token"},
		{"a wrong token", form("guessed"), nil, http.StatusForbidden, "security token"},
		{"another session's token", form(f.signIn(t, "dana@acme.example", "acme-ml").csrf), nil, http.StatusForbidden, "security token"},
		{"cross-site, with the token", form(u.csrf), map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "another site"},
		{"same-site other origin, with the token", form(u.csrf), map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden, "another site"},
		{"an Origin of another host, with the token", form(u.csrf), map[string]string{"Origin": "http://attacker.invalid"}, http.StatusForbidden, "another site"},
		{"the token", form(u.csrf), map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusCreated, "shown this once"},
		{"the token in the header", url.Values{"name": {"k"}}, map[string]string{console.CSRFHeader: u.csrf}, http.StatusCreated, "shown this once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.backend.Calls("CreateKey")
			resp, body := f.post(t, u, "/t/acme/keys", tc.form, tc.hdr)
			assert.Equal(t, tc.status, resp.StatusCode, body)
			assert.Contains(t, body, tc.says)
			if tc.status != http.StatusCreated {
				assert.Equal(t, before, f.backend.Calls("CreateKey"), "a refused request reached the backend")
			}
		})
	}
}

func TestTenantsAndRoles(t *testing.T) {
	f := newFixture(t)
	dana := f.signIn(t, "dana@acme.example", "acme-ml")
	vic := f.signIn(t, "vic@acme.example", "acme-all")
	nobody := f.signIn(t, "eve@elsewhere.example", "elsewhere")

	t.Run("another tenant's pages are 404, the same page as nothing", func(t *testing.T) {
		a := f.get(t, dana, "/t/globex/jobs/llama", http.StatusNotFound)
		b := f.get(t, dana, "/t/acme/jobs/llama", http.StatusNotFound)
		c := f.get(t, dana, "/t/nosuch/keys", http.StatusNotFound)
		assert.Equal(t, a, b)
		assert.Equal(t, a, c)
		assert.NotContains(t, a, "globex")
	})
	t.Run("a viewer gets no controls that change something", func(t *testing.T) {
		for _, p := range []string{"/t/acme/jobs", "/t/acme/jobs/chat", "/t/acme/keys"} {
			body := f.get(t, vic, p, http.StatusOK)
			for _, bad := range []string{`/jobs/new"`, `/delete"`, `/restart"`, `/revoke"`, `action="/t/acme/keys"`} {
				assert.NotContains(t, body, bad, p)
			}
		}
		body := f.get(t, dana, "/t/acme/jobs/chat", http.StatusOK)
		assert.Contains(t, body, `/jobs/chat/delete"`)
	})
	t.Run("a viewer's write is refused by the backend, with the policy's words", func(t *testing.T) {
		resp, body := f.post(t, vic, "/t/acme/jobs/chat/delete", url.Values{"csrf": {vic.csrf}}, nil)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Contains(t, body, "your role in tenant &#34;acme&#34; is viewer")
		assert.Zero(t, f.backend.Calls("DeleteJob"), "the double counts the deletes it made")
		f.get(t, dana, "/t/acme/jobs/chat", http.StatusOK)
		body = f.get(t, vic, "/t/acme/jobs/new", http.StatusForbidden)
		assert.Contains(t, body, "Your role in acme is viewer; this needs developer.")
	})
	t.Run("no tenant: told so, with the groups to check", func(t *testing.T) {
		resp := f.do(t, nobody, http.MethodGet, "/", nil, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Contains(t, string(b), "No tenant yet")
	})
	t.Run("the fleet is the operator's", func(t *testing.T) {
		f.get(t, dana, "/fleet", http.StatusNotFound)
		ops := f.signIn(t, "ops@platform.example", consoletest.AdminGroup)
		body := f.get(t, ops, "/fleet", http.StatusOK)
		assert.Contains(t, body, "globex")
	})
	t.Run("the switcher lists the caller's tenants only", func(t *testing.T) {
		body := f.get(t, dana, "/t/acme/jobs", http.StatusOK)
		assert.Contains(t, body, `<option value="acme" selected>acme (developer)</option>`)
		assert.NotContains(t, body, `value="globex"`)
		resp := f.do(t, dana, http.MethodGet, "/switch?tenant=globex&section=keys", nil, nil)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
		resp = f.do(t, dana, http.MethodGet, "/switch?tenant=acme&section=keys", nil, nil)
		resp.Body.Close()
		assert.Equal(t, "/t/acme/keys", resp.Header.Get("Location"))
	})
}

func TestCreateJobRefusalByField(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	resp, body := f.post(t, u, "/t/acme/jobs", url.Values{"csrf": {u.csrf}, "name": {"x"}, "model": {"Qwen/Qwen3-32B"}, "gpuCount": {"4"}, "intent": {"create"}}, nil)
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	doc, err := html.Parse(strings.NewReader(body))
	require.NoError(t, err)
	var gpuErr string
	var invalid bool
	walk(doc, func(n *html.Node) {
		if attr(n, "id") == "gpuCount-errors" {
			walk(n, func(c *html.Node) {
				if c.Type == html.TextNode {
					gpuErr += c.Data
				}
			})
		}
		if attr(n, "id") == "gpuCount" && attr(n, "aria-invalid") == "true" {
			invalid = true
		}
	})
	assert.Contains(t, gpuErr, "spec.gpuCount: Invalid value: 4: must equal the model master's perReplicaGPUCount 1")
	assert.True(t, invalid, "the field is not marked invalid")
	assert.Zero(t, f.backend.Calls("CreateJob"))

	resp, body = f.post(t, u, "/t/acme/jobs", url.Values{"csrf": {u.csrf}, "name": {"x"}, "model": {"Qwen/Qwen3-32B"}, "intent": {"preview"}}, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, "tenants/acme/jobs/x.yaml")
	assert.Contains(t, body, "kind: ManagedInferenceJob")
	assert.Zero(t, f.backend.Calls("CreateJob"), "a preview created the job")

	resp, _ = f.post(t, u, "/t/acme/jobs", url.Values{"csrf": {u.csrf}, "name": {"x"}, "model": {"Qwen/Qwen3-32B"}, "intent": {"create"}}, nil)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/t/acme/jobs/x?created=1", resp.Header.Get("Location"))
}

// TestJobEvents reads the live list's stream: the list now, then the list again when a stage
// changes, each as one event whose id is the list's tag.
func TestJobEvents(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := f.events(t, ctx, u, "")
	first := readEvent(t, r)
	assert.NotEmpty(t, first.id)
	assert.Contains(t, first.data, `id="job-transcribe"`)
	assert.Contains(t, first.data, "loading-model")
	f.backend.SetStage("acme", "transcribe", "serving", "answers /health")
	second := readEvent(t, r)
	assert.NotEqual(t, first.id, second.id)
	assert.Contains(t, second.data, "answers /health")

	// A stream resumed at the current tag sends nothing until something changes.
	r2 := f.events(t, ctx, u, second.id)
	time.Sleep(300 * time.Millisecond)
	f.backend.SetStage("acme", "chat", "failed", "evicted")
	third := readEvent(t, r2)
	assert.Contains(t, third.data, "evicted")
}

// The jobs page reads the list once, at the same time as the caller's memberships, and holds
// the very fragment its stream's tag names: the stream resumed at the page's tag sends nothing
// until the list changes. A tenant the caller is no member of is the 404 of a tenant that does
// not exist, whatever its list's read answered.
func TestJobsPage(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	lists, mes := f.backend.Calls("ListJobs"), f.backend.Calls("Me")
	page := f.get(t, u, "/t/acme/jobs", http.StatusOK)
	assert.Equal(t, lists+1, f.backend.Calls("ListJobs"), "one read of the list")
	assert.Equal(t, mes+1, f.backend.Calls("Me"), "one read of the memberships")
	assert.Contains(t, page, `id="job-transcribe"`)
	m := regexp.MustCompile(`/jobs/events\?since=([0-9a-f]+)"`).FindStringSubmatch(page)
	require.NotNil(t, m, "no stream in the page")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := f.events(t, ctx, u, m[1])
	time.Sleep(300 * time.Millisecond) // several of the stream's reads (LiveInterval 50 ms)
	f.backend.SetStage("acme", "transcribe", "serving", "answers /health")
	first := readEvent(t, r)
	assert.Contains(t, first.data, "answers /health", "the stream sent the list the page holds")

	other := f.get(t, u, "/t/globex/jobs", http.StatusNotFound)
	assert.Equal(t, f.get(t, u, "/t/nosuch/jobs", http.StatusNotFound), other)
	assert.NotContains(t, other, "globex")
}

type event struct{ id, data string }

// events opens the jobs list's event stream as u (resumed after lastID, when given), until ctx
// ends.
func (f *fixture) events(t *testing.T, ctx context.Context, u user, lastID string) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/t/acme/jobs/events", nil)
	req.AddCookie(u.cookie)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return bufio.NewReader(resp.Body)
}

// readEvent reads the next event: its id and its data lines, each ending in a newline.
func readEvent(t *testing.T, r *bufio.Reader) event {
	t.Helper()
	fields := readStreamEvent(t, r)
	e := event{data: strings.Join(fields["data"], "\n") + "\n"}
	if ids := fields["id"]; len(ids) > 0 {
		e.id = ids[len(ids)-1]
	}
	return e
}

func TestSessionEnds(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	f.get(t, u, "/t/acme/jobs", http.StatusOK)
	f.clock.add(61 * time.Minute) // past SessionMaxAge
	resp := f.do(t, u, http.MethodGet, "/t/acme/jobs", nil, nil)
	resp.Body.Close()
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/auth/login?next=%2Ft%2Facme%2Fjobs", resp.Header.Get("Location"))
	assert.Contains(t, resp.Header.Get("Set-Cookie"), "Max-Age=0", "the old cookie is dropped")

	t.Run("a tampered cookie is no session", func(t *testing.T) {
		f.clock.add(-61 * time.Minute)
		bad := *u.cookie
		b := []byte(bad.Value)
		b[len(b)/2] ^= 1
		bad.Value = string(b)
		resp := f.do(t, user{cookie: &bad}, http.MethodGet, "/t/acme/jobs", nil, nil)
		resp.Body.Close()
		assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	})
	t.Run("a cookie sealed by another console's key is no session", func(t *testing.T) {
		other := newFixture(t)
		resp := other.do(t, u, http.MethodGet, "/t/acme/jobs", nil, nil)
		resp.Body.Close()
		assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	})
	t.Run("sign out forgets the session in this browser", func(t *testing.T) {
		resp, _ := f.post(t, u, "/auth/logout", url.Values{"csrf": {u.csrf}}, nil)
		assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
		assert.Equal(t, "/signed-out", resp.Header.Get("Location"))
		assert.Contains(t, resp.Header.Get("Set-Cookie"), "Max-Age=0")
	})
}

// TestReplicasShareSessions: two consoles with the same keys (two replicas) open each other's
// cookies; after a rotation (new key first, old one second) old cookies still open.
func TestReplicasShareSessions(t *testing.T) {
	be := consoletest.Example(time.Now())
	oldKey, newKey := consoletest.Key(), consoletest.Key()
	start := func(keys ...[]byte) *fixture {
		f := &fixture{backend: be, clock: &clock{t: time.Now()}}
		f.srv = consoletest.Start(t, func(addr string) console.Options {
			return console.Options{Backend: be, Dev: true, ListenAddr: addr, SessionKeys: keys}
		})
		return f
	}
	a, b, rotated, other := start(oldKey), start(oldKey), start(newKey, oldKey), start(newKey)
	u := a.signIn(t, "dana@acme.example", "acme-ml")
	b.get(t, u, "/t/acme/jobs", http.StatusOK)
	rotated.get(t, u, "/t/acme/jobs", http.StatusOK)
	resp := other.do(t, u, http.MethodGet, "/t/acme/jobs", nil, nil)
	resp.Body.Close()
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "a console without the old key opened its cookie")
}

func TestDevSignInAnswersOnlyOnLoopback(t *testing.T) {
	be := consoletest.Example(time.Now())
	h, err := console.New(console.Options{Backend: be, Dev: true, ListenAddr: "127.0.0.1:8080", SessionKeys: [][]byte{consoletest.Key()}})
	require.NoError(t, err)
	for _, tc := range []struct {
		local  net.IP
		status int
	}{
		{net.IPv4(127, 0, 0, 1), http.StatusOK},
		{net.IPv4(127, 0, 0, 2), http.StatusForbidden},
		{net.IPv4(192, 0, 2, 10), http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, "/auth/dev", nil)
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: tc.local, Port: 8080}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, tc.status, rec.Code, "request arriving at %s", tc.local)
		assertHeaders(t, rec.Header())
	}
}

func TestOIDCErrors(t *testing.T) {
	be := consoletest.Example(time.Now())
	v, err := access.NewVerifier(access.VerifierConfig{Issuer: "http://127.0.0.1:1/dex", ClientID: "c"})
	require.NoError(t, err)
	srv := consoletest.Start(t, func(addr string) console.Options {
		return console.Options{Backend: be, OIDC: &console.OIDC{Issuer: "http://127.0.0.1:1/dex", ClientID: "c", Verifier: v},
			ExternalURL: "http://" + addr, SessionKeys: [][]byte{consoletest.Key()}}
	})
	t.Run("the provider is down: 503, said plainly", func(t *testing.T) {
		resp, err := noRedirect.Get(srv.URL + "/auth/login")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Contains(t, string(b), "identity provider cannot be reached")
		assertHeaders(t, resp.Header)
	})
	t.Run("a callback not started here", func(t *testing.T) {
		resp, err := noRedirect.Get(srv.URL + "/auth/callback?state=x&code=y")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
	t.Run("the dev sign-in is not there", func(t *testing.T) {
		resp, err := noRedirect.Get(srv.URL + "/auth/dev")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}

// TestUsageWithoutGateways: when the backend cannot read usage or health (the API knows no
// gateway: a 503 problem), the page still shows, saying why in each section.
func TestUsageWithoutGateways(t *testing.T) {
	f := newFixture(t)
	dana := f.signIn(t, "dana@acme.example", "acme-ml")
	f.backend.SetUnavailable("Health", &console.Problem{Status: http.StatusServiceUnavailable, Detail: "this API server knows no gateway"})
	body := f.get(t, dana, "/t/acme/usage", http.StatusOK)
	assert.Contains(t, body, "Health cannot be read now: this API server knows no gateway")
	assert.Contains(t, body, `class="chart"`)
	f.backend.SetUnavailable("Usage", &console.Problem{Status: http.StatusBadGateway, Detail: "a gateway replica could not be read"})
	body = f.get(t, dana, "/t/acme/usage", http.StatusOK)
	assert.Contains(t, body, "Usage cannot be read now: a gateway replica could not be read")
	assert.NotContains(t, body, `class="chart"`)
	f.backend.SetUnavailable("Usage", &console.Problem{Status: http.StatusForbidden, Detail: "no"})
	f.get(t, dana, "/t/acme/usage", http.StatusForbidden)
}

// TestUsageShowsGPUHoursAndQuota: with the meter's figures, the usage page shows GPU-hours
// beside tokens per job and what the quota leaves.
func TestUsageShowsGPUHoursAndQuota(t *testing.T) {
	f := newFixture(t)
	dana := f.signIn(t, "dana@acme.example", "acme-ml")
	left := int64(12)
	f.backend.SetUsage("acme", &console.Usage{Metered: &console.Metered{
		Jobs:  []console.MeteredRow{{Job: "qwen3-32b", GPUHours: 6600.0 / 3600, Counts: console.Counts{Requests: 15, TokensIn: 1500, TokensOut: 300}}},
		Total: console.MeteredRow{GPUHours: 6600.0 / 3600, Counts: console.Counts{Requests: 15, TokensIn: 1500, TokensOut: 300}},
		Quota: console.QuotaLeft{Tier: "h100-dedicated", GPUs: 16, UsedGPUs: 4, LeftGPUs: &left, UsedJobs: 3},
	}})
	body := f.get(t, dana, "/t/acme/usage", http.StatusOK)
	assert.Regexp(t, `<th scope="row">qwen3-32b</th><td>1.83</td><td>15</td><td>1500</td><td>300</td>`, body)
	assert.Regexp(t, `GPUs 4 of 16 used, 12 left;\s+jobs 3 used, no limit\.`, body)
}

// TestCreatePageListsSharedModels: a tenant offered provider tenants' models (the shared
// serving tier) finds them, with the endpoint to call, on the page where it would create a
// job; a tenant offered none sees no such section.
func TestCreatePageListsSharedModels(t *testing.T) {
	f := newFixture(t)
	f.backend.SetModels("acme", &console.ModelList{Shared: []console.SharedModel{
		{Model: "Qwen/Qwen3-32B", Provider: "platform", Endpoint: "qwen", URL: "https://qwen.platform.models.example.com"},
		{Model: "<b>odd</b>", Provider: "platform", Endpoint: "odd"},
	}})
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	body := f.get(t, u, "/t/acme/jobs/new", http.StatusOK)
	doc, err := html.Parse(strings.NewReader(body))
	require.NoError(t, err)
	var rows []string
	walk(doc, func(n *html.Node) {
		if attr(n, "id") != "shared-models" {
			return
		}
		walk(n, func(tr *html.Node) {
			if tr.Type == html.ElementNode && tr.Data == "tr" {
				var cells []string
				walk(tr, func(c *html.Node) {
					if c.Type == html.TextNode && strings.TrimSpace(c.Data) != "" {
						cells = append(cells, strings.TrimSpace(c.Data))
					}
				})
				rows = append(rows, strings.Join(cells, " | "))
			}
		})
	})
	assert.Equal(t, []string{"Model | Provider | Endpoint",
		"Qwen/Qwen3-32B | platform | https://qwen.platform.models.example.com",
		"<b>odd</b> | platform | odd.platform.<domain>"}, rows, "the shared models, markup as text")
	assert.NotContains(t, body, "<b>odd</b>", "a model name is text, never markup")

	f.backend.SetModels("acme", &console.ModelList{})
	assert.NotContains(t, f.get(t, u, "/t/acme/jobs/new", http.StatusOK), `id="shared-models"`)
}
