package console_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/consoletest"
)

// writeMethods are the double's methods that change something.
var writeMethods = []string{"CreateJob", "RestartJob", "DeleteJob", "CreateKey", "RevokeKey"}

func writeCalls(b *consoletest.Backend) int {
	n := 0
	for _, m := range writeMethods {
		n += b.Calls(m)
	}
	return n
}

// TestEveryWriteNeedsTheToken walks every route the console registers: each names its method
// (a pattern without one would take a post too), and each that is not a GET is refused without
// the session's CSRF token, with another session's, and from another site with the right one,
// before it reaches the backend; a refused sign-out keeps the session. The development
// sign-in (no session yet) refuses another site; the CSP report only counts and logs.
func TestEveryWriteNeedsTheToken(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(t, "dana@acme.example", "acme-ml")
	other := f.signIn(t, "dana@acme.example", "acme-ml")
	fill := strings.NewReplacer("{tenant}", "acme", "{job}", "chat", "{key}", "k-5f2a91c0")
	noSession := map[string]bool{"POST /auth/dev": true, "POST /csp-report": true}
	var writes []string
	for _, p := range f.srv.Handler.Patterns() {
		method, _, ok := strings.Cut(p, " ")
		require.True(t, ok && method == strings.ToUpper(method), "pattern %q names no method: it would take any", p)
		if method != http.MethodGet && !noSession[p] {
			writes = append(writes, p)
		}
	}
	require.GreaterOrEqual(t, len(writes), 8, "the console's writes: %v", writes)
	for _, p := range writes {
		method, path, _ := strings.Cut(p, " ")
		path = fill.Replace(path)
		for _, tc := range []struct {
			name string
			form url.Values
			hdr  map[string]string
			says string
		}{
			{"no token", url.Values{"name": {"k"}}, nil, "security token"},
			{"a wrong token", url.Values{console.CSRFField: {"guessed"}}, nil, "security token"},
			{"another session's token", url.Values{console.CSRFField: {other.csrf}}, nil, "security token"},
			{"another session's token in the header", nil, map[string]string{console.CSRFHeader: other.csrf}, "security token"},
			{"another site, with the token", url.Values{console.CSRFField: {u.csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}, "another site"},
			{"another site, the token in the header", nil, map[string]string{"Sec-Fetch-Site": "cross-site", console.CSRFHeader: u.csrf}, "another site"},
			{"another origin, no fetch metadata", url.Values{console.CSRFField: {u.csrf}}, map[string]string{"Origin": "http://127.0.0.2:8080"}, "another site"},
		} {
			t.Run(p+"/"+tc.name, func(t *testing.T) {
				before := writeCalls(f.backend)
				hdr := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
				for k, v := range tc.hdr {
					hdr[k] = v
				}
				resp := f.do(t, u, method, path, strings.NewReader(tc.form.Encode()), hdr)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
				assert.Contains(t, string(b), tc.says)
				assert.Empty(t, resp.Header.Values("Set-Cookie"), "a refused request changed a cookie")
				assert.Equal(t, before, writeCalls(f.backend), "a refused request reached the backend")
			})
		}
	}
	f.get(t, u, "/me", http.StatusOK) // the refused sign-outs signed nobody out

	t.Run("the development sign-in refuses another site", func(t *testing.T) {
		resp, body := f.post(t, user{}, "/auth/dev", url.Values{"email": {"eve@attacker.example"}, "groups": {"acme-ml"}},
			map[string]string{"Sec-Fetch-Site": "cross-site"})
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
		assert.Empty(t, resp.Header.Values("Set-Cookie"), "another site signed someone in")
	})
	t.Run("a CSP report changes nothing", func(t *testing.T) {
		before := writeCalls(f.backend)
		resp, _ := f.post(t, user{}, "/csp-report", nil, map[string]string{"Sec-Fetch-Site": "cross-site"})
		assert.Equal(t, http.StatusNoContent, resp.StatusCode)
		assert.Empty(t, resp.Header.Values("Set-Cookie"))
		assert.Equal(t, before, writeCalls(f.backend))
	})
}

// assertInert checks a page (or a fragment) holds the markup as text only: no element or
// attribute of it, no inline script, and the markup's own words in the text.
func assertInert(t *testing.T, what, body string, shows ...string) {
	t.Helper()
	nodes, err := html.ParseFragment(strings.NewReader(body), &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body})
	if strings.HasPrefix(body, "<!doctype") {
		var doc *html.Node
		doc, err = html.Parse(strings.NewReader(body))
		nodes = []*html.Node{doc}
	}
	require.NoError(t, err)
	var text strings.Builder
	for _, n := range nodes {
		walk(n, func(n *html.Node) {
			switch {
			case n.Type == html.TextNode:
				text.WriteString(n.Data)
			case n.Type != html.ElementNode:
			case n.Data == "img" || n.Data == "svg" || n.Data == "b":
				t.Errorf("%s: the markup made an element <%s>", what, n.Data)
			case n.Data == "script" && (attr(n, "src") == "" || n.FirstChild != nil):
				t.Errorf("%s: the markup made an inline script", what)
			}
			for _, a := range n.Attr {
				if strings.HasPrefix(a.Key, "on") {
					t.Errorf("%s: the markup made an attribute %s on <%s>", what, a.Key, n.Data)
				}
			}
		})
	}
	for _, s := range shows {
		assert.Contains(t, text.String(), s, "%s does not show the markup as text", what)
	}
}

// TestMarkupIsText: names and reasons with markup are text on every page, in the live list's
// events (whose stream they cannot add fields to), in the JSON the pages embed for their
// scripts, and in refusals that repeat what was typed.
func TestMarkupIsText(t *testing.T) {
	// A gateway, so that the playground lists the endpoints (none is called here).
	f := newFixture(t, func(o *console.Options) { o.Gateway = http.DefaultTransport })
	f.backend.AddMarkup()
	dana := f.signIn(t, "dana@acme.example", "acme-ml")
	job := "/t/acme/jobs/" + url.PathEscape(consoletest.MarkupName)
	name := `x<img src=x onerror="window.__pwned='name'">`
	for _, tc := range []struct {
		path  string
		shows []string
	}{
		{"/t/acme/jobs", []string{name, consoletest.MarkupModel, "<script>window.__pwned='reason'</script>"}},
		{job, []string{name, consoletest.MarkupModel, "id: forged"}},
		{job + "/restart", []string{name}},
		{job + "/delete", []string{name}},
		{"/t/acme/jobs/new", []string{consoletest.MarkupModel}},
		{"/t/acme/keys", []string{name}},
		{"/t/acme/keys/k-00000001/revoke", []string{name}},
		{"/t/acme/usage", []string{name, "<script>window.__pwned='reason'</script>"}},
		{"/t/acme/playground", []string{name, consoletest.MarkupModel}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			assertInert(t, tc.path, f.get(t, dana, tc.path, http.StatusOK), tc.shows...)
		})
	}

	t.Run("the JSON embedded for the scripts", func(t *testing.T) {
		doc, err := html.Parse(strings.NewReader(f.get(t, dana, "/t/acme/jobs/new", http.StatusOK)))
		require.NoError(t, err)
		var models console.ModelList
		walk(doc, func(n *html.Node) {
			if attr(n, "id") == "create-job" {
				require.NoError(t, json.Unmarshal([]byte(attr(n, "data-models")), &models))
			}
		})
		require.Len(t, models.Models, 1)
		assert.Equal(t, consoletest.MarkupModel, models.Models[0].Model, "the script gets the name as data")
		doc, err = html.Parse(strings.NewReader(f.get(t, dana, "/t/acme/usage", http.StatusOK)))
		require.NoError(t, err)
		charts := 0
		walk(doc, func(n *html.Node) {
			if c := attr(n, "data-chart"); c != "" {
				var ch struct{ Series []struct{ Label string } }
				require.NoError(t, json.Unmarshal([]byte(c), &ch))
				require.Len(t, ch.Series, 1)
				assert.Equal(t, consoletest.MarkupName, ch.Series[0].Label)
				charts++
			}
		})
		assert.Equal(t, 4, charts)
	})

	t.Run("the live list's events", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fields := readStreamEvent(t, f.events(t, ctx, dana, ""))
		assert.Len(t, fields["id"], 1, "one id: the reason added none")
		assert.NotEqual(t, "forged", fields["id"][0])
		assert.Empty(t, fields["event"], "the reason named the event")
		assert.Empty(t, fields["retry"], "the reason set the stream's retry")
		assertInert(t, "the event's data", strings.Join(fields["data"], "\n"), name, "id: forged", "<b>bold</b>")
	})

	t.Run("refusals that repeat what was typed", func(t *testing.T) {
		resp, body := f.post(t, dana, "/t/acme/jobs", url.Values{console.CSRFField: {dana.csrf}, "name": {consoletest.MarkupName}, "model": {consoletest.MarkupModel},
			"intent": {"create"}}, nil)
		assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
		assertInert(t, "a refused name", body, `Invalid value: "x<img src=x onerror=\"window.__pwned='name'\">"`)
		resp, body = f.post(t, dana, "/t/acme/jobs", url.Values{console.CSRFField: {dana.csrf}, "name": {"ok"}, "model": {consoletest.MarkupModel},
			"replicas": {"<b>2</b>"}, "intent": {"create"}}, nil)
		assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
		assertInert(t, "a refused number", body, `"<b>2</b>" is not a whole number`)
		resp, body = f.post(t, dana, "/t/acme/jobs", url.Values{console.CSRFField: {dana.csrf}, "name": {consoletest.MarkupName}, "model": {consoletest.MarkupModel},
			"intent": {"preview"}}, nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assertInert(t, "the preview", body, "name: "+consoletest.MarkupName[:1])
		// A script's refusal is plain text, never sniffed into a page.
		resp = f.do(t, dana, http.MethodPost, job+"/restart", strings.NewReader("replica=<b>1</b>"),
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", console.CSRFHeader: dana.csrf})
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	})
}

// readStreamEvent reads one event of a text/event-stream as a browser's EventSource does: a
// line ends at CR, LF or CRLF; each line is a field; a blank line ends the event.
func readStreamEvent(t *testing.T, r *bufio.Reader) map[string][]string {
	t.Helper()
	fields := map[string][]string{}
	var line bytes.Buffer
	for {
		b, err := r.ReadByte()
		require.NoError(t, err)
		if b == '\n' || b == '\r' {
			if b == '\r' {
				if next, err := r.Peek(1); err == nil && next[0] == '\n' {
					_, _ = r.ReadByte()
				}
			}
			l := line.String()
			line.Reset()
			if l == "" {
				if len(fields["data"]) > 0 {
					return fields
				}
				fields = map[string][]string{} // the stream's preamble (its retry), no event
				continue
			}
			name, value, _ := strings.Cut(l, ":")
			fields[name] = append(fields[name], strings.TrimPrefix(value, " "))
			continue
		}
		line.WriteByte(b)
	}
}
