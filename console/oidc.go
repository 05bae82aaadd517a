package console

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/inferplane/inferplane/access"
)

// Verifier turns an ID token into an identity: *access.Verifier, configured with the console's
// client id as the audience (the same verifier the API uses when both share the client).
type Verifier interface {
	Verify(ctx context.Context, raw string) (access.Identity, error)
}

// OIDC is the provider the console signs users in with: the authorization-code flow with PKCE
// (S256) and a nonce, as a confidential client when ClientSecret is set (else a public one:
// PKCE alone).
type OIDC struct {
	// Issuer is the provider's issuer URL (--oidc-issuer).
	Issuer string
	// ClientID is the console's client (--oidc-client-id, shared with the API or its own).
	ClientID string
	// ClientSecret is the client's secret, read from a file (never a flag value).
	ClientSecret string
	// Verifier checks the ID tokens the provider returns (audience = ClientID).
	Verifier Verifier
	// Scopes are asked for beside openid; default email, profile, groups, offline_access (a
	// refresh token, so an expired ID token is renewed without sending the user back).
	Scopes []string
	// HTTPClient reaches the provider; nil: one with a 10 s timeout.
	HTTPClient *http.Client
}

// DefaultScopes are the scopes asked for when OIDC.Scopes is empty.
var DefaultScopes = []string{"email", "profile", "groups", "offline_access"}

// provider finds the provider's endpoints on first use (the console starts while its provider
// is still coming up) and retries a failed discovery at most every 5 s.
type provider struct {
	o OIDC

	mu       sync.Mutex
	endpoint *oauth2.Endpoint
	failedAt time.Time
	lastErr  error
}

var errProviderDown = errors.New("the identity provider cannot be reached")

func (p *provider) config(ctx context.Context, redirect string) (*oauth2.Config, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.endpoint == nil {
		if p.lastErr != nil && time.Since(p.failedAt) < 5*time.Second {
			return nil, p.lastErr
		}
		dctx, cancel := context.WithTimeout(p.ctx(ctx), 10*time.Second)
		defer cancel()
		prov, err := oidc.NewProvider(dctx, p.o.Issuer)
		if err != nil {
			p.failedAt, p.lastErr = time.Now(), fmt.Errorf("%w: discovery at %s: %v", errProviderDown, p.o.Issuer, err)
			return nil, p.lastErr
		}
		ep := prov.Endpoint()
		if p.o.ClientSecret == "" {
			ep.AuthStyle = oauth2.AuthStyleInParams
		}
		p.endpoint, p.lastErr = &ep, nil
	}
	scopes := p.o.Scopes
	if len(scopes) == 0 {
		scopes = DefaultScopes
	}
	return &oauth2.Config{ClientID: p.o.ClientID, ClientSecret: p.o.ClientSecret, Endpoint: *p.endpoint,
		RedirectURL: redirect, Scopes: append([]string{oidc.ScopeOpenID}, scopes...)}, nil
}

// ctx carries the provider's HTTP client into oauth2 and go-oidc.
func (p *provider) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, p.o.HTTPClient)
}

// loginState is the login cookie: what the callback checks the provider's answer against.
type loginState struct {
	State    string    `json:"state"`
	Nonce    string    `json:"nonce"`
	Verifier string    `json:"pkce"`
	Next     string    `json:"next"`
	Created  time.Time `json:"iat"`
}

// loginTTL is how long a sign-in may take at the provider.
const loginTTL = 10 * time.Minute

// maxNext bounds a return path: it rides in the sealed login cookie, which a browser keeps
// only up to 4 KB.
const maxNext = 1024

// safeNext keeps a return path on this console: an absolute path of its own, with its query,
// as given. Anything else is "/": a URL or a scheme ("https://evil", "javascript:"), a
// scheme-relative "//evil", a backslash anywhere (browsers read "/\evil" as "//evil"), a
// control character anywhere (browsers drop tabs and newlines from a URL, so "/\t/evil" would
// become "//evil"), one that does not parse, one whose path is not clean (dot segments, doubled
// or encoded slashes), the sign-in's own pages, one past maxNext. An encoded character other
// than a slash ("%5C", "%09") stays as given: a path of this console, which a browser does not
// decode before it resolves the redirect.
func safeNext(next string) string {
	if next == "" || len(next) > maxNext || next[0] != '/' || strings.HasPrefix(next, "//") ||
		strings.ContainsFunc(next, func(r rune) bool { return r == '\\' || unicode.IsControl(r) || r == utf8.RuneError }) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	// A path that cleaning would change ("/.//evil", "/%2F%2Fevil" once decoded, "/a/../..")
	// is no page of the console's: refused rather than guessed at.
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	if clean != u.Path || clean == "/auth" || strings.HasPrefix(clean, "/auth/") {
		return "/"
	}
	return next
}

// login sends the browser to the provider (GET /auth/login?next=/path).
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.prov == nil {
		http.Redirect(w, r, "/auth/dev?next="+url.QueryEscape(safeNext(r.URL.Query().Get("next"))), http.StatusSeeOther)
		return
	}
	cfg, err := h.prov.config(r.Context(), h.redirectURL())
	if err != nil {
		h.log.Warn("sign-in: provider unavailable", "error", err)
		h.fail(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached. Try again in a moment.")
		return
	}
	st := loginState{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(),
		Next: safeNext(r.URL.Query().Get("next")), Created: h.now()}
	if err := h.setCookie(w, loginCookie, st, loginTTL); err != nil {
		h.internal(w, r, "sign-in: sealing the login state", err)
		return
	}
	u := cfg.AuthCodeURL(st.State, oauth2.S256ChallengeOption(st.Verifier), oidc.Nonce(st.Nonce))
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// callback is where the provider sends the browser back with a code (GET /auth/callback).
func (h *Handler) callback(w http.ResponseWriter, r *http.Request) {
	if h.prov == nil {
		h.fail(w, r, http.StatusNotFound, "This console signs in without an identity provider (development sign-in).")
		return
	}
	q := r.URL.Query()
	var st loginState
	if !h.readCookie(r, loginCookie, &st) || h.now().Sub(st.Created) > loginTTL {
		h.fail(w, r, http.StatusBadRequest, "This sign-in expired or was not started here. Sign in again.")
		return
	}
	clearCookie(w, loginCookie)
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(st.State)) != 1 {
		h.fail(w, r, http.StatusBadRequest, "This sign-in was started in another tab or window. Sign in again.")
		return
	}
	if e := q.Get("error"); e != "" {
		h.log.Info("sign-in refused by the provider", "error", e, "description", q.Get("error_description"))
		h.fail(w, r, http.StatusUnauthorized, "The identity provider refused the sign-in: "+firstNonEmpty(q.Get("error_description"), e))
		return
	}
	cfg, err := h.prov.config(r.Context(), h.redirectURL())
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached. Try again in a moment.")
		return
	}
	tok, err := cfg.Exchange(h.prov.ctx(r.Context()), q.Get("code"), oauth2.VerifierOption(st.Verifier))
	if err != nil {
		h.log.Warn("sign-in: code exchange failed", "error", err)
		h.fail(w, r, http.StatusBadGateway, "The identity provider did not accept the sign-in's code. Sign in again.")
		return
	}
	sess, err := h.sessionFrom(r.Context(), tok, st.Nonce)
	if err != nil {
		h.log.Warn("sign-in: ID token refused", "error", err)
		h.fail(w, r, http.StatusUnauthorized, "The identity provider's answer could not be verified. Sign in again.")
		return
	}
	sess.CSRF, sess.Created = randomToken(), h.now()
	if err := h.setCookie(w, SessionCookie, sess, h.opts.SessionMaxAge); err != nil {
		h.internal(w, r, "sign-in: sealing the session", err)
		return
	}
	h.log.Info("signed in", "subject", sess.Identity.Subject, "email", sess.Identity.Email)
	http.Redirect(w, r, st.Next, http.StatusSeeOther)
}

// sessionFrom verifies the token response's ID token (and its nonce, when one was sent) and
// makes the session's identity, refresh token and expiry of it.
func (h *Handler) sessionFrom(ctx context.Context, tok *oauth2.Token, nonce string) (session, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return session{}, errors.New("the provider's answer has no id_token (is openid among the scopes?)")
	}
	id, err := h.prov.o.Verifier.Verify(ctx, raw)
	if err != nil {
		return session{}, err
	}
	c, err := verifiedClaims(raw)
	if err != nil {
		return session{}, err
	}
	if nonce != "" && subtle.ConstantTimeCompare([]byte(c.Nonce), []byte(nonce)) != 1 {
		return session{}, errors.New("the ID token's nonce is not the one this sign-in sent")
	}
	return session{V: sessionVersion, Identity: toJSON(id), Refresh: tok.RefreshToken, Expiry: time.Unix(c.Exp, 0)}, nil
}

type tokenClaims struct {
	Nonce string `json:"nonce"`
	Exp   int64  `json:"exp"`
}

// verifiedClaims reads the nonce and expiry of a token the Verifier has just accepted (so its
// payload is the provider's; access.Identity carries neither).
func verifiedClaims(raw string) (tokenClaims, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return tokenClaims{}, errors.New("the ID token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return tokenClaims{}, err
	}
	var c tokenClaims
	return c, json.Unmarshal(payload, &c)
}

// refresh renews an expired identity with the refresh token. errSignIn: the provider refused
// (the user must sign in again); errProviderDown: try later, the session stays.
func (h *Handler) refresh(ctx context.Context, s session) (session, error) {
	if s.Dev || h.prov == nil || s.Refresh == "" {
		return session{}, errSignIn
	}
	cfg, err := h.prov.config(ctx, h.redirectURL())
	if err != nil {
		return session{}, err
	}
	tok, err := cfg.TokenSource(h.prov.ctx(ctx), &oauth2.Token{RefreshToken: s.Refresh, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode < 500 {
			return session{}, fmt.Errorf("%w: %s", errSignIn, re.ErrorCode)
		}
		return session{}, fmt.Errorf("%w: %v", errProviderDown, err)
	}
	ns, err := h.sessionFrom(ctx, tok, "")
	if err != nil {
		if errors.Is(err, access.ErrProviderUnavailable) {
			return session{}, fmt.Errorf("%w: %v", errProviderDown, err)
		}
		return session{}, fmt.Errorf("%w: %v", errSignIn, err)
	}
	if ns.Identity.Subject != s.Identity.Subject || ns.Identity.Issuer != s.Identity.Issuer {
		return session{}, fmt.Errorf("%w: the refreshed token names another user", errSignIn)
	}
	if ns.Refresh == "" {
		ns.Refresh = s.Refresh // providers that do not rotate refresh tokens send none back
	}
	ns.CSRF, ns.Created = s.CSRF, s.Created
	return ns, nil
}

var errSignIn = errors.New("sign in again")

// logout forgets the session in this browser (POST /auth/logout, with the CSRF token).
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, SessionCookie)
	http.Redirect(w, r, "/signed-out", http.StatusSeeOther)
}

func (h *Handler) redirectURL() string { return h.opts.ExternalURL + "/auth/callback" }

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
