package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
	"golang.org/x/oauth2"

	"github.com/inferplane/inferplane/access"
)

// These tests drive the sign-in's own pages (the redirect to the provider, the development
// sign-in, sign-out) over HTTP on 127.0.0.1. The provider's endpoints are set as discovery
// would have found them, so the first step of the sign-in needs no provider; the whole sign-in,
// the callback included, runs against a real Dex in console/e2e (TestWebSecurity).

// noBackend is a Backend the sign-in's pages never call (a call would panic, failing the test).
type noBackend struct{ Backend }

type refuseTokens struct{}

func (refuseTokens) Verify(context.Context, string) (access.Identity, error) {
	return access.Identity{}, errors.New("no token is verified in these tests")
}

const authURL = "http://127.0.0.1:1/dex/auth"

// serve builds a console for the address it will listen on and serves it on 127.0.0.1.
func serve(t *testing.T, opts func(addr string) Options) (*Handler, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h, err := New(opts(ln.Addr().String()))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func oidcConsole(t *testing.T) (*Handler, string) {
	h, base := serve(t, func(addr string) Options {
		return Options{Backend: noBackend{}, ExternalURL: "http://" + addr, SessionKeys: [][]byte{key(1)},
			OIDC: &OIDC{Issuer: "http://127.0.0.1:1/dex", ClientID: "console", Verifier: refuseTokens{}}}
	})
	h.prov.endpoint = &oauth2.Endpoint{AuthURL: authURL, TokenURL: "http://127.0.0.1:1/dex/token", AuthStyle: oauth2.AuthStyleInParams}
	return h, base
}

func devConsole(t *testing.T) (*Handler, string) {
	return serve(t, func(addr string) Options {
		return Options{Backend: noBackend{}, Dev: true, ListenAddr: addr, SessionKeys: [][]byte{key(2)}}
	})
}

func key(b byte) []byte { return []byte(strings.Repeat(string(rune('a'+b)), KeySize)) }

var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t *testing.T, method, u string, form url.Values, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := noFollow.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func cookieNamed(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// asBrowser resolves a Location as a browser does: tabs and newlines dropped, a backslash read
// as a slash (in an http(s) URL), then resolved against the page's URL.
func asBrowser(t *testing.T, base, loc string) *url.URL {
	t.Helper()
	loc = strings.NewReplacer("\t", "", "\n", "", "\r", "", `\`, "/").Replace(loc)
	b, err := url.Parse(base)
	require.NoError(t, err)
	u, err := b.Parse(loc)
	require.NoError(t, err, loc)
	return u
}

// TestSignInReturnsOnlyHome: the page a sign-in returns to (next) is a path of this console or
// its root, whatever is asked: the development sign-in's redirect and form, and the OIDC
// sign-in's login state, which the callback redirects to (the state sent to the provider is a
// random token, never the URL).
func TestSignInReturnsOnlyHome(t *testing.T) {
	h, oidcBase := oidcConsole(t)
	_, devBase := devConsole(t)
	for _, tc := range []struct{ next, want string }{
		{"", "/"},
		{"/t/acme/jobs?range=7d", "/t/acme/jobs?range=7d"},
		{"/t/acme/jobs/chat", "/t/acme/jobs/chat"},
		{"https://evil.example/", "/"},
		{"HTTPS://evil.example", "/"},
		{"http:evil.example", "/"},
		{"//evil.example/x", "/"},
		{"///evil.example", "/"},
		{`/\evil.example`, "/"},
		{`\\evil.example`, "/"},
		{`/t/\\evil.example`, "/"},
		{"/\t/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/\r/evil.example", "/"},
		{"/\t\\evil.example", "/"},
		{"/\x00/evil.example", "/"},
		{" //evil.example", "/"},
		{"javascript:alert(document.domain)", "/"},
		{"JaVaScRiPt:alert(1)", "/"},
		{"data:text/html,<script>alert(1)</script>", "/"},
		{"%2F%2Fevil.example", "/"},
		{"/%2F%2Fevil.example", "/"},
		{"/%2F/evil.example", "/"},
		{"/.//evil.example", "/"},
		{"/t/../../evil.example", "/"},
		{"/%5Cevil.example", "/%5Cevil.example"}, // a path of this console: a browser does not decode it
		{"/%09/evil.example", "/%09/evil.example"},
		{"/auth/login?next=//evil.example", "/"},
		{"/./auth/callback", "/"},
		{"/" + strings.Repeat("a", 2000), "/"},
		{"/t/acme/jobs/<img src=x onerror=alert(1)>", "/t/acme/jobs/<img src=x onerror=alert(1)>"},
	} {
		t.Run(fmt.Sprintf("%.40q", tc.next), func(t *testing.T) {
			q := "?next=" + url.QueryEscape(tc.next)

			// The OIDC sign-in: the login state keeps the return path, the provider gets a
			// random state and the console's own callback.
			resp, _ := do(t, http.MethodGet, oidcBase+"/auth/login"+q, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			loc, err := url.Parse(resp.Header.Get("Location"))
			require.NoError(t, err)
			assert.Equal(t, authURL, loc.Scheme+"://"+loc.Host+loc.Path)
			assert.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`), loc.Query().Get("state"), "the state is a random token")
			assert.Equal(t, oidcBase+"/auth/callback", loc.Query().Get("redirect_uri"))
			c := cookieNamed(resp, loginCookie)
			require.NotNil(t, c, "no login cookie")
			var st loginState
			require.NoError(t, h.sealer.open(loginCookie, c.Value, &st))
			assert.Equal(t, tc.want, st.Next, "where the callback will send the browser")
			assert.Equal(t, oidcBase, asBrowser(t, oidcBase+"/auth/callback", st.Next).Scheme+"://"+asBrowser(t, oidcBase+"/auth/callback", st.Next).Host)

			// The development sign-in: its redirect, its form and its answer.
			resp, _ = do(t, http.MethodGet, devBase+"/auth/login"+q, nil)
			assert.Equal(t, "/auth/dev?next="+url.QueryEscape(tc.want), resp.Header.Get("Location"))
			_, page := do(t, http.MethodGet, devBase+"/auth/dev"+q, nil)
			assert.Equal(t, tc.want, hiddenNext(t, page))
			resp, _ = do(t, http.MethodPost, devBase+"/auth/dev", url.Values{"email": {"dana@acme.example"}, "next": {tc.next}})
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			got := asBrowser(t, devBase+"/auth/dev", resp.Header.Get("Location"))
			assert.Equal(t, devBase, got.Scheme+"://"+got.Host, "the sign-in sent the browser to %s", got)
			if tc.want == "/" {
				assert.Equal(t, "/", resp.Header.Get("Location"))
			}
		})
	}
}

func hiddenNext(t *testing.T, page string) string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)
	var next *string
	var find func(*html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "input" {
			var name, value string
			for _, a := range n.Attr {
				switch a.Key {
				case "name":
					name = a.Val
				case "value":
					value = a.Val
				}
			}
			if name == "next" {
				next = &value
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	require.NotNil(t, next, "no next field in the form")
	return *next
}

// TestCookieAttributes: every cookie the console sets or clears is __Host- prefixed, HttpOnly
// (no script reads it), Secure (also on the development sign-in's http://127.0.0.1, which
// browsers count as a secure origin), SameSite=Lax (no cross-site post carries it), Path=/ and
// without a Domain.
func TestCookieAttributes(t *testing.T) {
	_, oidcBase := oidcConsole(t)
	dev, devBase := devConsole(t)
	signIn := func(t *testing.T) (*http.Cookie, string) {
		resp, _ := do(t, http.MethodPost, devBase+"/auth/dev", url.Values{"email": {"dana@acme.example"}, "groups": {"acme-ml"}})
		c := cookieNamed(resp, SessionCookie)
		require.NotNil(t, c)
		var s session
		require.NoError(t, dev.sealer.open(SessionCookie, c.Value, &s))
		return c, s.CSRF
	}
	loginState := func(t *testing.T) *http.Cookie {
		resp, _ := do(t, http.MethodGet, oidcBase+"/auth/login", nil)
		c := cookieNamed(resp, loginCookie)
		require.NotNil(t, c)
		return c
	}
	for _, tc := range []struct {
		name    string
		req     func(t *testing.T) *http.Response
		cookie  string
		cleared bool
	}{
		{"the session, at the development sign-in", func(t *testing.T) *http.Response {
			resp, _ := do(t, http.MethodPost, devBase+"/auth/dev", url.Values{"email": {"dana@acme.example"}})
			return resp
		}, SessionCookie, false},
		{"the login state, at the OIDC sign-in's start", func(t *testing.T) *http.Response {
			resp, _ := do(t, http.MethodGet, oidcBase+"/auth/login?next=/me", nil)
			return resp
		}, loginCookie, false},
		{"the login state, cleared at the callback", func(t *testing.T) *http.Response {
			resp, _ := do(t, http.MethodGet, oidcBase+"/auth/callback?state=another&code=x", nil, loginState(t))
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			return resp
		}, loginCookie, true},
		{"the session, cleared at sign-out", func(t *testing.T) *http.Response {
			c, csrf := signIn(t)
			resp, _ := do(t, http.MethodPost, devBase+"/auth/logout", url.Values{CSRFField: {csrf}}, c)
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
			return resp
		}, SessionCookie, true},
		{"a session no key here opens, cleared", func(t *testing.T) *http.Response {
			c, _ := signIn(t)
			c.Value = c.Value[:len(c.Value)-4] + "AAAA"
			resp, _ := do(t, http.MethodGet, devBase+"/me", nil, c)
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
			return resp
		}, SessionCookie, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.req(t)
			c := cookieNamed(resp, tc.cookie)
			require.NotNil(t, c, "no %s cookie in %v", tc.cookie, resp.Header["Set-Cookie"])
			assert.True(t, strings.HasPrefix(c.Name, "__Host-"), c.Name)
			assert.True(t, c.HttpOnly, "HttpOnly")
			assert.True(t, c.Secure, "Secure")
			assert.Equal(t, http.SameSiteLaxMode, c.SameSite, "SameSite=Lax")
			assert.Equal(t, "/", c.Path)
			assert.Empty(t, c.Domain)
			assert.Equal(t, tc.cleared, c.MaxAge < 0, "cleared: Max-Age %d", c.MaxAge)
			assert.Len(t, resp.Cookies(), 1, "one cookie per answer: %v", resp.Header["Set-Cookie"])
		})
	}
}
