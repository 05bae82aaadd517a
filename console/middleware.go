package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
)

// CSP is the Content-Security-Policy of every response: scripts, styles, images and fonts only
// from the console itself (no inline script or style, no eval), requests only to itself, forms
// only to itself, no framing by anyone, no <base>, no plugins; violations are reported to
// /csp-report.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; " +
	"connect-src 'self'; manifest-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; " +
	"object-src 'none'; report-uri /csp-report"

// SecurityHeaders sets the headers every console response carries (before the handler runs,
// so redirects, errors and the mux's own 404 and 405 answers have them too). The API server
// may wrap its whole mux with it: the headers are harmless on JSON.
func SecurityHeaders(next http.Handler, hsts bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		hd.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
		if hsts {
			hd.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) securityHeaders(next http.Handler) http.Handler {
	return SecurityHeaders(next, strings.HasPrefix(h.opts.ExternalURL, "https://"))
}

// recoverer turns a panic into a 500 page (the server's log says why, the page does not).
func (h *Handler) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				h.log.Error("console: panic serving a request", "path", r.URL.Path, "panic", v)
				h.fail(w, r, http.StatusInternalServerError, "Something went wrong on our side; the server's log says what.")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// signedIn lets through requests with a valid session (refreshing an expired identity), and
// sends others to sign in: a page load is redirected to the provider and comes back, anything
// else (a form post, a stream) gets 401.
func (h *Handler) signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s session
		ok := h.readCookie(r, SessionCookie, &s) && s.V == sessionVersion && h.now().Sub(s.Created) < h.opts.SessionMaxAge
		if ok && !h.now().Before(s.Expiry) {
			ns, err := h.refresh(r.Context(), s)
			switch {
			case err == nil:
				s = ns
				if err := h.setCookie(w, SessionCookie, s, h.opts.SessionMaxAge-h.now().Sub(s.Created)); err != nil {
					h.internal(w, r, "refresh: sealing the session", err)
					return
				}
			case errors.Is(err, errProviderDown):
				h.log.Warn("session refresh: provider unavailable", "error", err)
				h.fail(w, r, http.StatusServiceUnavailable, "Your sign-in needs renewing and the identity provider cannot be reached. Try again in a moment.")
				return
			default:
				h.log.Info("session ended", "subject", s.Identity.Subject, "reason", err)
				ok = false
			}
		}
		if !ok {
			// A cookie that is no longer good is dropped; a request without one changes nothing
			// (a cross-site post, which carries no cookie, must not sign the user out).
			if _, err := r.Cookie(SessionCookie); err == nil {
				clearCookie(w, SessionCookie)
			}
			if r.Method == http.MethodGet && !isStream(r) {
				http.Redirect(w, r, "/auth/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h.fail(w, r, http.StatusUnauthorized, "You are signed out. Reload the page to sign in again.")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, &s)))
	})
}

func isStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream") || r.Header.Get("HX-Request") != ""
}

// CSRFField is the form field (and CSRFHeader the header, for scripts) that carries the
// session's CSRF token.
const (
	CSRFField  = "csrf"
	CSRFHeader = "X-CSRF-Token"
)

// csrf refuses a request that changes something unless it comes from this console's own pages:
// first the browser's word (Go's CrossOriginProtection: Sec-Fetch-Site, else Origin against
// Host), then the session's token in the form or the header. Either alone would do for today's
// browsers; both cover a browser that sends neither header and a same-site page on another
// port (which SameSite cookies do not stop).
func (h *Handler) csrf(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h.cop.Check(r); err != nil {
			h.log.Info("refused a cross-origin request", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "sec-fetch-site", r.Header.Get("Sec-Fetch-Site"))
			h.fail(w, r, http.StatusForbidden, "This request came from another site, so it was refused. Use the console's own pages.")
			return
		}
		s := sessionOf(r.Context())
		tok := r.Header.Get(CSRFHeader)
		if tok == "" {
			if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
				// Large uploads: only the token is read here; the handler reads the rest.
				_ = r.ParseMultipartForm(32 << 20)
			}
			tok = r.PostFormValue(CSRFField)
		}
		if s == nil || s.CSRF == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.CSRF)) != 1 {
			h.log.Info("refused a request without the session's CSRF token", "path", r.URL.Path)
			h.fail(w, r, http.StatusForbidden, "This form's security token is missing or out of date (did you sign in again in another tab?). Go back, reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// call is one request to a tenant's page: who asks, in which tenant, with what role.
type call struct {
	w      http.ResponseWriter
	r      *http.Request
	sess   *session
	id     access.Identity
	tenant string
	// role is the caller's role in tenant.
	role     v1alpha1.TenantRole
	members  []access.Membership
	operator bool
}

// can says whether the caller may take the action in the call's tenant (to show or hide a
// control; the Backend decides again).
func (h *Handler) can(c *call, a access.Action) bool {
	return allows(c.role, a)
}

type tenantHandler func(*call)

// tenant resolves /t/{tenant}/...: a tenant the caller has no role in is a 404, the same page
// as a tenant that does not exist (never telling one customer's names to another); a role too
// weak for the action is a 403 with the policy's words.
func (h *Handler) tenant(a access.Action, fn tenantHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := h.newCall(w, r)
		if !ok {
			return
		}
		c.tenant = r.PathValue("tenant")
		i := slices.IndexFunc(c.members, func(m access.Membership) bool { return m.Tenant == c.tenant })
		if i < 0 {
			h.notFound(w, r)
			return
		}
		c.role = c.members[i].Role
		// A page the role cannot use is refused here; a write goes to the backend, whose
		// refusal (the API's words) is what the caller sees.
		if r.Method == http.MethodGet && !allows(c.role, a) {
			h.fail(w, r, http.StatusForbidden, fmt.Sprintf("Your role in %s is %s; this needs %s.", c.tenant, c.role, access.Needs(a)))
			return
		}
		fn(c)
	})
}

// newCall reads the caller's memberships; false when it answered already.
func (h *Handler) newCall(w http.ResponseWriter, r *http.Request) (*call, bool) {
	s := sessionOf(r.Context())
	c := &call{w: w, r: r, sess: s, id: s.Identity.identity()}
	me, err := h.opts.Backend.Me(r.Context(), c.id)
	if err != nil {
		h.backendError(w, r, err)
		return nil, false
	}
	c.members, c.operator = me.Tenants, me.Operator
	return c, true
}
