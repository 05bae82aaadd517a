// Package e2e tests the console in a real browser (Debian's Chromium, e2e/browser) signed in
// through a real Dex (e2e/dex), at three depths: on consoletest's TEST DOUBLE of the product
// API's service layer, where a test sets any stage and paces a streamed reply (its playground's
// endpoint is replicadouble's TEST DOUBLE of a model replica behind a small key-checking
// stand-in for the gateway); on the real product API over git remotes (api_test.go); and on
// the whole world make demo runs (world_test.go). Everything listens on loopback.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/consoletest"
	"github.com/inferplane/inferplane/e2e/browser"
	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/e2e/replicadouble"
)

// The users of the tests' Dex, and the groups that give them their roles in the example data.
var (
	dana = dex.User{Email: "dana@acme.example", Password: "pw-dana", Name: "Dana", Groups: []string{"acme-ml"}}               // acme developer
	vic  = dex.User{Email: "vic@acme.example", Password: "pw-vic", Name: "Vic", Groups: []string{"acme-all"}}                 // acme viewer
	gus  = dex.User{Email: "gus@globex.example", Password: "pw-gus", Name: "Gus", Groups: []string{"globex-ml"}}              // globex developer
	ops  = dex.User{Email: "ops@platform.example", Password: "pw-ops", Name: "Ops", Groups: []string{consoletest.AdminGroup}} // operator
)

const clientID = "inferplane-console"

// env is one console signed in through one Dex, with the example data.
type env struct {
	dex     *dex.Dex
	backend *consoletest.Backend
	srv     *consoletest.Server
	browser *browser.Browser
	gateway *gatewayDouble
	log     *syncBuffer
}

// syncBuffer is the console's log, kept to check that no secret reaches it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (e *env) logs() []byte {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	return bytes.Clone(e.log.b.Bytes())
}

type envOptions struct {
	idTokenTTL time.Duration
	// dexSessions: Dex's auth sessions, which its refresh_token grant needs (dex.Options).
	dexSessions bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{backend: consoletest.Example(time.Now()), log: &syncBuffer{}}
	// The console's address is needed before Dex starts (its redirect URI), so the port is
	// taken first and handed to both.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	secret := "console-secret"
	e.dex = dex.Start(t, dex.Options{
		Clients:    []dex.Client{{ID: clientID, Secret: secret, RedirectURIs: []string{"http://" + addr + "/auth/callback"}}},
		Users:      []dex.User{dana, vic, gus, ops},
		IDTokenTTL: o.idTokenTTL, Sessions: o.dexSessions,
	})
	v, err := access.NewVerifier(access.VerifierConfig{Issuer: e.dex.Issuer, ClientID: clientID})
	if err != nil {
		t.Fatal(err)
	}
	e.gateway = startGateway(t)
	e.srv = startOn(t, addr, console.Options{
		Backend:     e.backend,
		OIDC:        &console.OIDC{Issuer: e.dex.Issuer, ClientID: clientID, ClientSecret: secret, Verifier: v},
		ExternalURL: "http://" + addr, SessionKeys: [][]byte{consoletest.Key()},
		LiveInterval: 300 * time.Millisecond, Gateway: e.gateway.transport(),
		Logger: slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	e.browser = browser.Start(t, browser.Options{})
	return e
}

// startOn serves the console on a given address (taken a moment ago; another process could
// take it in between, which would fail the test plainly).
func startOn(t *testing.T, addr string, o console.Options) *consoletest.Server {
	t.Helper()
	return consoletest.StartAt(t, addr, func(string) console.Options { return o })
}

// page opens a tab signed in as the user through Dex's own login page.
func (e *env) page(t *testing.T, u dex.User, o browser.PageOptions) *browser.Page {
	t.Helper()
	o.Init = append(o.Init, liveProbe)
	p := e.browser.NewPage(t, o)
	e.signIn(t, p, u, e.srv.URL+"/")
	return p
}

// signIn starts at a console URL, goes through Dex's login page as a person would (choosing
// the email connector, typing the email and the password) and comes back.
func (e *env) signIn(t *testing.T, p *browser.Page, u dex.User, start string) {
	t.Helper()
	p.Navigate(start)
	p.WaitFor(`document.querySelector("#login") || document.querySelector('a[href*="/auth/local"]')`)
	if browser.Eval[bool](p, `!document.querySelector("#login")`) {
		// Dex lists its connectors first: "Log in with Email" is its password database.
		p.Do(chromedp.Click(chromedp.CSS(`a[href*="/auth/local"]`)))
		p.WaitFor(`document.querySelector("#login")`)
	}
	if !strings.HasPrefix(p.Location(), e.dex.Issuer) {
		t.Fatalf("expected Dex's login page at %s, got %s", e.dex.Issuer, p.Location())
	}
	p.WaitFor(`document.readyState === "complete" && document.querySelector("#login")`)
	p.Do(chromedp.WaitVisible(chromedp.ID("login")), chromedp.SendKeys(chromedp.ID("login"), u.Email),
		chromedp.SendKeys(chromedp.ID("password"), u.Password),
		chromedp.Click(chromedp.ID("submit-login")))
	p.WaitURL(e.srv.URL + "/")
}

// liveProbe notes what happens to the jobs list's event stream (the events of htmx's requests
// and of its SSE extension) and to the page's visibility (the extension pauses the stream in a hidden page),
// for the message of a wait for the list that fails.
const liveProbe = `(() => {
  const log = window.__live = [];
  const t0 = performance.now();
  const note = (what) => { log.push(Math.round(performance.now() - t0) + " ms: " + what); if (log.length > 60) log.splice(1, 1); };
  for (const name of ["htmx:after:init", "htmx:before:request", "htmx:before:response", "htmx:error", "htmx:response:error", "htmx:finally:request",
    "htmx:sse:before:connection", "htmx:sse:after:connection", "htmx:sse:error", "htmx:sse:close", "htmx:sse:after:message"]) {
    document.addEventListener(name, (e) => note(name + (e.detail && e.detail.error ? " " + e.detail.error : "") + (e.detail && e.detail.reason ? " " + e.detail.reason : "")), true);
  }
  document.addEventListener("visibilitychange", () => note("visibility " + document.visibilityState), true);
  note(location.pathname + " " + document.visibilityState);
})();`

// waitLive waits until the live jobs list shows what expr says. When it never does, the message
// says what the list's event stream did, as the page saw it, and whether the console went on
// reading the jobs for it meanwhile.
func (e *env) waitLive(t *testing.T, p *browser.Page, expr string) {
	t.Helper()
	before := e.backend.Calls("ListJobs")
	if err := p.Until(expr); err != nil {
		logs := e.logs()
		if len(logs) > 3000 {
			logs = logs[len(logs)-3000:]
		}
		t.Fatalf("%v\nthe jobs list's event stream, as the page saw it:\n%s\nthe console read the jobs %d times meanwhile; the end of its log:\n%s",
			err, browser.Eval[string](p, `(window.__live || ["no probe"]).join("\n")`), e.backend.Calls("ListJobs")-before, logs)
	}
}

// shots is where screenshots go: docs/console when INFERPLANE_SCREENSHOTS names it (make
// console-screenshots), else a temporary folder (the screenshot is still taken and checked).
func shots(t *testing.T) string {
	if dir := os.Getenv("INFERPLANE_SCREENSHOTS"); dir != "" {
		return dir
	}
	return t.TempDir()
}

// check is what every page gets: a screenshot (before anything moves the focus), axe-core
// finds no serious or critical violation, and every control is reachable by keyboard.
func check(t *testing.T, p *browser.Page, dir, name string) {
	t.Helper()
	path := filepath.Join(dir, name+".png")
	p.Screenshot(path)
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Errorf("%s: not a PNG screenshot (%d bytes, %v)", path, len(b), err)
	}
	p.AssertAccessible(name)
	p.AssertKeyboardReachable(name)
}

// text is the page's visible text.
func text(p *browser.Page) string {
	return browser.Eval[string](p, `document.body.innerText`)
}

// gatewayDouble is a TEST DOUBLE of the gateway for the playground: it checks the bearer key
// against the keys the test gave it (as ext_authz would) and passes the request to a replica
// double, whatever the endpoint's host name (the transport dials it, so no name is looked up).
type gatewayDouble struct {
	replica *replicadouble.Double
	srv     *http.Server
	addr    string
	mu      sync.Mutex
	keys    []string
	seen    []string // the Authorization headers that reached it
	pace    chan struct{}
}

func startGateway(t *testing.T) *gatewayDouble {
	t.Helper()
	r, err := replicadouble.Start(replicadouble.Options{Name: "r0", Model: "Qwen/Qwen3-32B", ChunkDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	g := &gatewayDouble{replica: r}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	t.Cleanup(func() { g.srv.Close() })
	return g
}

func (g *gatewayDouble) allow(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keys = append(g.keys, key)
}

// paced holds each piece of a streamed answer back, once flushed, until the test takes a value
// from the channel it returns (or closes it): a test can see what the page shows of a reply
// while the rest is still to come.
func (g *gatewayDouble) paced() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pace = make(chan struct{})
	return g.pace
}

// pacedWriter is a response whose every flush waits for the test's go-ahead.
type pacedWriter struct {
	http.ResponseWriter
	pace <-chan struct{}
	done <-chan struct{}
}

func (p pacedWriter) Flush() {
	if f, ok := p.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	select {
	case <-p.pace:
	case <-p.done:
	}
}

func (g *gatewayDouble) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	g.mu.Lock()
	g.seen = append(g.seen, auth)
	ok := slices.Contains(g.keys, strings.TrimPrefix(auth, "Bearer "))
	if g.pace != nil {
		w = pacedWriter{ResponseWriter: w, pace: g.pace, done: r.Context().Done()}
	}
	g.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintln(w, `{"error":{"message":"invalid API key","type":"invalid_request_error"}}`)
		return
	}
	r.Header.Del("Authorization")
	g.replica.Handler().ServeHTTP(w, r)
}

func (g *gatewayDouble) transport() http.RoundTripper {
	return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", g.addr)
	}}
}
