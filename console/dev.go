package console

import (
	"net"
	"net/http"
	"strings"
	"time"
)

// The development sign-in: for a laptop without an identity provider. Whoever reaches the form
// says who they are and which groups they are in, and is signed in as that: New refuses it
// unless the server listens on 127.0.0.1, and each request is checked to have arrived there.

type devData struct {
	Next  string
	Error string
}

// devAllowed checks the connection's own address (not the Host header, which the client
// writes): the request must have arrived on 127.0.0.1.
func (h *Handler) devAllowed(w http.ResponseWriter, r *http.Request) bool {
	if !h.opts.Dev {
		h.notFound(w, r)
		return false
	}
	addr, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if tcp, ok := addr.(*net.TCPAddr); !ok || !tcp.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		h.fail(w, r, http.StatusForbidden, "The development sign-in answers only on 127.0.0.1.")
		return false
	}
	return true
}

func (h *Handler) devForm(w http.ResponseWriter, r *http.Request) {
	if !h.devAllowed(w, r) {
		return
	}
	h.render(w, r, http.StatusOK, "dev", &view{Title: "Development sign-in", Data: devData{Next: safeNext(r.URL.Query().Get("next"))}})
}

// devSignIn signs in as the name, email and groups typed (POST /auth/dev). A cross-origin post
// is refused like every other (there is no session yet to carry a token).
func (h *Handler) devSignIn(w http.ResponseWriter, r *http.Request) {
	if !h.devAllowed(w, r) {
		return
	}
	if err := h.cop.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "This request came from another site, so it was refused.")
		return
	}
	email := strings.TrimSpace(r.PostFormValue("email"))
	name := strings.TrimSpace(r.PostFormValue("name"))
	next := safeNext(r.PostFormValue("next"))
	if email == "" || !strings.Contains(email, "@") {
		h.render(w, r, http.StatusUnprocessableEntity, "dev", &view{Title: "Development sign-in",
			Data: devData{Next: next, Error: "Type an email address: it is who you are signed in as."}})
		return
	}
	var groups []string
	for _, g := range strings.Split(r.PostFormValue("groups"), ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	now := h.now()
	s := session{V: sessionVersion, CSRF: randomToken(), Created: now, Expiry: now.Add(h.opts.SessionMaxAge), Dev: true,
		Identity: identityJSON{Issuer: "dev", Subject: email, Email: email, EmailVerified: true, Name: name, Groups: groups}}
	if err := h.setCookie(w, SessionCookie, s, h.opts.SessionMaxAge); err != nil {
		h.internal(w, r, "dev sign-in: sealing the session", err)
		return
	}
	h.log.Warn("development sign-in (no identity provider)", "email", email, "groups", groups, "at", now.Format(time.RFC3339))
	http.Redirect(w, r, next, http.StatusSeeOther)
}
