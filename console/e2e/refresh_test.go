package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/e2e/browser"
)

func sessionCookie(t *testing.T, p *browser.Page, u string) string {
	t.Helper()
	for _, c := range p.Cookies(u) {
		if c.Name == console.SessionCookie {
			return c.Value
		}
	}
	return ""
}

// TestSessionRefresh: with ID tokens that live 4 s, an expired identity is renewed from Dex
// with the refresh token, without sending the user back to the login page; when Dex no longer
// knows the refresh token (restarted with memory storage), the next page sends the user to
// sign in again.
func TestSessionRefresh(t *testing.T) {
	e := newEnv(t, envOptions{idTokenTTL: 4 * time.Second, dexSessions: true})
	p := e.page(t, dana, browser.PageOptions{})
	first := sessionCookie(t, p, e.srv.URL)
	if first == "" {
		t.Fatal("no session cookie")
	}
	p.Navigate(e.srv.URL + "/me")
	if !strings.Contains(text(p), "from the provider after") {
		t.Errorf("who am I does not say the identity is renewed:\n%s", text(p))
	}
	time.Sleep(5 * time.Second)
	p.Navigate(e.srv.URL + "/me")
	if loc := p.Location(); loc != e.srv.URL+"/me" {
		t.Fatalf("after the ID token expired the page went to %s, not renewed in place", loc)
	}
	if second := sessionCookie(t, p, e.srv.URL); second == first || second == "" {
		t.Errorf("the session was not renewed (same cookie); the console logged:\n%s", e.logs())
	}
	if !strings.Contains(text(p), dana.Email) {
		t.Errorf("not signed in as %s after the renewal", dana.Email)
	}

	e.dex.Restart(t)
	time.Sleep(5 * time.Second)
	p.Navigate(e.srv.URL + "/t/acme/jobs")
	p.WaitFor(`location.href.startsWith(` + jsString(e.dex.Issuer) + `)`)
	if c := sessionCookie(t, p, e.srv.URL); c != "" {
		t.Error("the ended session's cookie is still there")
	}
	// Signing in again works, and comes back to the page asked for.
	e.signIn(t, p, dana, e.srv.URL+"/t/acme/keys")
	if loc := p.Location(); loc != e.srv.URL+"/t/acme/keys" {
		t.Errorf("after signing in again: %s", loc)
	}
}

func jsString(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
