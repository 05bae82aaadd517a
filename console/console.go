// Package console is inferplane's web console: server-rendered pages (html/template) for a
// tenant's jobs, a job's detail, creating a job, API keys, usage and health, a playground, and
// the operator's fleet, served at / by `inferplane api serve` beside the JSON API under /api/v1.
//
// It is an http.Handler with no state of its own: the data comes from a Backend (the API's
// service layer, called in process with the signed-in caller), the session is sealed into a
// cookie with a key every replica reads from the same file, so any replica serves any request.
// Users sign in with the API's OIDC provider (authorization code with PKCE and a nonce); every
// form and call that changes something carries a CSRF token and is refused from another
// origin; every response carries a strict Content-Security-Policy (no inline script or style,
// frame-ancestors 'none') and nosniff, redirects and errors included. The front-end files are
// embedded (go:embed): htmx and uPlot as their npm packages ship them (hack/console-assets.sh),
// and a few small scripts of our own; nothing is fetched from elsewhere at run time.
//
// For a laptop without an identity provider, Options.Dev signs in whoever types a name and
// groups; New refuses it unless the server listens on 127.0.0.1.
package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/inferplane/inferplane/access"
)

// Options configure the console.
type Options struct {
	// Backend serves the data (the product API's service layer; consoletest.Backend in tests).
	Backend Backend

	// OIDC signs users in; nil only with Dev.
	OIDC *OIDC
	// ExternalURL is where browsers reach the console (https://console.example.com), without a
	// trailing slash: the provider sends them back to ExternalURL + "/auth/callback", which must
	// be among the client's redirect URIs. Default with Dev: http://<ListenAddr>.
	ExternalURL string
	// SessionKeys seal the session cookies (LoadSessionKeys); the first seals, all open. Every
	// replica must have the same keys.
	SessionKeys [][]byte
	// SessionMaxAge ends a session this long after sign-in, refreshed or not (default 12 h).
	SessionMaxAge time.Duration

	// Dev signs in without a provider (a form asks for a name, email and groups): for a laptop.
	// Refused unless ListenAddr is on 127.0.0.1.
	Dev bool
	// ListenAddr is the address the server listens on (host:port), as bound.
	ListenAddr string

	// LiveInterval is how often a live jobs page's stream reads the jobs (default 2 s).
	LiveInterval time.Duration
	// Gateway carries the playground's requests to the tenants' endpoints (through the
	// gateway, with the key the user pasted, which is never stored); nil: the playground says
	// it is not configured.
	Gateway http.RoundTripper

	Logger *slog.Logger
	Now    func() time.Time
}

// Handler is the console. Mount it at / (the API's routes under /api/v1 are more specific).
type Handler struct {
	opts   Options
	log    *slog.Logger
	sealer *sealer
	prov   *provider // nil with Dev
	assets *assets
	pages  *pages
	mux    *http.ServeMux
	root   http.Handler
	cop    *http.CrossOriginProtection
	// patterns are the routes' patterns, as registered (the tests walk every write).
	patterns []string
	// done is closed by Shutdown: live streams end.
	done     chan struct{}
	shutdown sync.Once
}

// New checks the options and builds the console; it reaches no network (the provider is
// discovered on the first sign-in).
func New(o Options) (*Handler, error) {
	var errs []error
	if o.Backend == nil {
		errs = append(errs, errors.New("console: no backend"))
	}
	if o.Dev {
		if err := CheckDevListen(o.ListenAddr); err != nil {
			errs = append(errs, err)
		}
		if o.OIDC != nil {
			errs = append(errs, errors.New("console: --console-dev signs in without the identity provider; leave out one or the other"))
		}
		if o.ExternalURL == "" {
			o.ExternalURL = "http://" + o.ListenAddr
		}
	} else {
		switch {
		case o.OIDC == nil:
			errs = append(errs, errors.New("console: no OIDC provider (--oidc-issuer, --oidc-client-id), and not --console-dev"))
		case o.OIDC.Issuer == "" || o.OIDC.ClientID == "" || o.OIDC.Verifier == nil:
			errs = append(errs, errors.New("console: the OIDC provider needs an issuer, a client id and a verifier"))
		}
		if err := checkExternalURL(o.ExternalURL); err != nil {
			errs = append(errs, err)
		}
	}
	sealer, err := newSealer(o.SessionKeys)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	o.ExternalURL = strings.TrimRight(o.ExternalURL, "/")
	o.SessionMaxAge = cmp.Or(o.SessionMaxAge, 12*time.Hour)
	o.LiveInterval = cmp.Or(o.LiveInterval, 2*time.Second)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Handler{opts: o, log: o.Logger, sealer: sealer, cop: http.NewCrossOriginProtection(), done: make(chan struct{})}
	if o.OIDC != nil {
		po := *o.OIDC
		if po.HTTPClient == nil {
			po.HTTPClient = &http.Client{Timeout: 10 * time.Second}
		}
		h.prov = &provider{o: po}
	}
	if h.assets, err = loadAssets(); err != nil {
		return nil, err
	}
	if h.pages, err = parsePages(h.assets); err != nil {
		return nil, err
	}
	h.routes()
	h.root = h.securityHeaders(h.recoverer(h.mux))
	return h, nil
}

// ServeHTTP serves the console.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.root.ServeHTTP(w, r) }

// Shutdown ends the live streams (the jobs list's server-sent events), which would otherwise
// keep http.Server.Shutdown waiting: call it first. The pages reconnect to another replica.
func (h *Handler) Shutdown() { h.shutdown.Do(func() { close(h.done) }) }

// Mount serves the console at / of mux, beside whatever else mux serves (the API's /api/v1/).
func (h *Handler) Mount(mux *http.ServeMux) { mux.Handle("/", h) }

// CheckDevListen refuses the development sign-in unless the server listens on 127.0.0.1: it
// signs in anyone as anyone, so only the machine it runs on may reach it.
func CheckDevListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		return fmt.Errorf("console: the development sign-in (--console-dev) signs in anyone as anyone, so it is refused unless the server listens on 127.0.0.1 (--listen 127.0.0.1:PORT), not %q", addr)
	}
	return nil
}

func checkExternalURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || s == "" || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return fmt.Errorf("console: the console's external URL (--console-url) must be a URL like https://console.example.com with no path, not %q", s)
	}
	if u.Scheme == "http" {
		if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("console: --console-url %s is plain http on a host other than loopback: the session cookie is Secure, so browsers would drop it; use https", s)
		}
	}
	return nil
}

func (h *Handler) now() time.Time { return h.opts.Now() }

// routes: every page below /t/{tenant}/ is the tenant's; the rest is the caller's own.
func (h *Handler) routes() {
	m := &recordingMux{ServeMux: http.NewServeMux(), patterns: &h.patterns}
	m.Handle("GET /static/", h.assets)
	m.HandleFunc("GET /favicon.ico", h.assets.favicon)
	m.HandleFunc("GET /auth/login", h.login)
	m.HandleFunc("GET /auth/callback", h.callback)
	m.HandleFunc("GET /auth/dev", h.devForm)
	m.HandleFunc("POST /auth/dev", h.devSignIn)
	m.HandleFunc("GET /signed-out", h.signedOut)
	m.HandleFunc("POST /csp-report", h.cspReport)
	m.Handle("POST /auth/logout", h.signedIn(h.csrf(http.HandlerFunc(h.logout))))

	m.Handle("GET /{$}", h.signedIn(http.HandlerFunc(h.home)))
	m.Handle("GET /me", h.signedIn(http.HandlerFunc(h.me)))
	m.Handle("GET /switch", h.signedIn(http.HandlerFunc(h.switchTenant)))
	m.Handle("GET /fleet", h.signedIn(http.HandlerFunc(h.fleet)))

	t := func(pattern string, a access.Action, fn tenantHandler) {
		method, _, _ := strings.Cut(pattern, " ")
		var next http.Handler = h.tenant(a, fn)
		if method != http.MethodGet {
			next = h.csrf(next)
		}
		m.Handle(pattern, h.signedIn(next))
	}
	m.Handle("GET /t/{tenant}/jobs", h.signedIn(h.jobsPage()))
	t("GET /t/{tenant}/jobs/events", access.Read, h.jobEvents)
	t("GET /t/{tenant}/jobs/new", access.WriteJobs, h.newJob)
	t("POST /t/{tenant}/jobs", access.WriteJobs, h.createJob)
	t("GET /t/{tenant}/jobs/{job}", access.Read, h.job)
	t("GET /t/{tenant}/jobs/{job}/logs/events", access.Read, h.jobLogEvents)
	t("GET /t/{tenant}/jobs/{job}/restart", access.WriteJobs, h.confirmRestart)
	t("POST /t/{tenant}/jobs/{job}/restart", access.WriteJobs, h.restartJob)
	t("GET /t/{tenant}/jobs/{job}/delete", access.WriteJobs, h.confirmDelete)
	t("POST /t/{tenant}/jobs/{job}/delete", access.WriteJobs, h.deleteJob)
	t("GET /t/{tenant}/keys", access.Read, h.keys)
	t("POST /t/{tenant}/keys", access.WriteKeys, h.createKey)
	t("GET /t/{tenant}/keys/{key}/revoke", access.WriteKeys, h.confirmRevoke)
	t("POST /t/{tenant}/keys/{key}/revoke", access.WriteKeys, h.revokeKey)
	t("GET /t/{tenant}/usage", access.Read, h.usage)
	t("GET /t/{tenant}/playground", access.Read, h.playground)
	t("POST /t/{tenant}/playground/{job}/chat", access.Read, h.playgroundChat)
	t("POST /t/{tenant}/playground/{job}/transcribe", access.Read, h.playgroundTranscribe)
	m.HandleFunc("GET /", h.notFound)
	h.mux = m.ServeMux
}

// recordingMux is a ServeMux that keeps the patterns it was given.
type recordingMux struct {
	*http.ServeMux
	patterns *[]string
}

func (m *recordingMux) Handle(pattern string, h http.Handler) {
	*m.patterns = append(*m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *recordingMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// ctxKey carries the signed-in session through a request.
type ctxKey struct{}

func sessionOf(ctx context.Context) *session {
	s, _ := ctx.Value(ctxKey{}).(*session)
	return s
}
