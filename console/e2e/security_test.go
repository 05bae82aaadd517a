package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inferplane/inferplane/console/consoletest"
	"github.com/inferplane/inferplane/e2e/browser"
)

// js is a Go string as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// inert is true in a page where the markup of consoletest's names did nothing: no script of it
// ran, no element of it exists, no attribute of it was made.
const inert = `window.__pwned === undefined && !document.querySelector('img, svg, main b, [onerror], [onload]')`

// TestWebSecurity, in Chromium signed in through Dex: names with markup are shown as text and
// nothing of them runs (the pages, the live list updated over its event stream, the JSON the
// create and usage pages hand their scripts, the playground's reply, a refusal that repeats
// what was typed), and the sign-in returns only to the console's own pages, whatever return
// path it was given (a tab or a backslash a browser drops or reads as a slash included). Any
// console error or CSP violation the page reports fails the test too (e2e/browser).
func TestWebSecurity(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.backend.AddMarkup()
	name, model := consoletest.MarkupName, consoletest.MarkupModel
	shown := func(p *browser.Page, what string, texts ...string) {
		t.Helper()
		p.WaitFor(`document.readyState === "complete"`)
		if !browser.Eval[bool](p, inert) {
			t.Errorf("%s: the markup ran or made an element", what)
		}
		body := text(p)
		for _, s := range texts {
			if !strings.Contains(body, s) {
				t.Errorf("%s does not show %q as text:\n%s", what, s, body)
			}
		}
	}

	t.Run("markup in names is text", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		job := e.srv.URL + "/t/acme/jobs/" + url.PathEscape(name)
		for _, tc := range []struct {
			path  string
			texts []string
		}{
			{"/t/acme/jobs", []string{name, model, "<script>window.__pwned='reason'</script>"}},
			{strings.TrimPrefix(job, e.srv.URL), []string{name, model, "<b>bold</b>"}},
			{strings.TrimPrefix(job, e.srv.URL) + "/delete", []string{"Delete " + name + "?"}},
			{"/t/acme/keys", []string{name}},
			{"/t/acme/playground", []string{name + " (" + model + ")"}},
		} {
			p.Navigate(e.srv.URL + tc.path)
			shown(p, tc.path, tc.texts...)
		}

		// The live list: a new reason arrives over the event stream and htmx swaps it in.
		p.Navigate(e.srv.URL + "/t/acme/jobs")
		e.backend.SetStage("acme", name, "failed", "<img src=x onerror=\"window.__pwned='live'\">\rid: again")
		row := fmt.Sprintf(`document.getElementById(%s)`, js("job-"+name))
		e.waitLive(t, p, row+` && `+row+`.querySelector(".badge").textContent === "failed"`)
		if got := browser.Eval[string](p, row+`.querySelector(".reason").textContent`); !strings.Contains(got, `<img src=x onerror="window.__pwned='live'">`) {
			t.Errorf("the live reason is not the text sent: %q", got)
		}
		shown(p, "the live list")

		// The create page hands its script the models as JSON: the explanation it writes from
		// them is text.
		p.Navigate(e.srv.URL + "/t/acme/jobs/new")
		p.Do(chromedp.SetValue(chromedp.ID("model"), model))
		browser.Eval[bool](p, `document.querySelector("#model").dispatchEvent(new Event("input")) || true`)
		p.WaitFor(`document.querySelector("#gpu-why").textContent.includes("<script>")`)
		shown(p, "the create page's explanation", model)

		// A refusal repeats the name typed: forced past the form's own checks, as a script would.
		p.AllowConsoleError("status of 422")
		browser.Eval[bool](p, fmt.Sprintf(`(() => { const f = document.querySelector("#create-job"); f.querySelector("#name").value = %s;
		  const i = document.createElement("input"); i.type = "hidden"; i.name = "intent"; i.value = "create"; f.append(i); f.submit(); return true })()`, js(name)))
		p.WaitFor(`document.querySelector("#name-errors li")`)
		shown(p, "the refusal", `Invalid value: "`+strings.ReplaceAll(name, `"`, `\"`)+`"`)

		// The usage charts' legends (uPlot) show the key's and the endpoint's names.
		p.Navigate(e.srv.URL + "/t/acme/usage")
		p.WaitFor(`document.querySelectorAll(".chart canvas").length === 4`)
		if n := browser.Eval[int](p, fmt.Sprintf(`[...document.querySelectorAll(".u-legend")].filter((l) => l.textContent.includes(%s)).length`, js(name))); n != 4 {
			t.Errorf("%d of the 4 charts' legends show the name as text", n)
		}
		shown(p, "the usage page", name)
	})

	t.Run("the playground's reply is text", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		key := "ipk_websecurity_test_key"
		e.gateway.allow(key)
		p.Navigate(e.srv.URL + "/t/acme/playground")
		prompt := `<img src=x onerror="window.__pwned='reply'">`
		p.Do(chromedp.SetValue(chromedp.ID("pg-endpoint"), "chat"), chromedp.SendKeys(chromedp.ID("pg-key"), key),
			chromedp.SetValue(chromedp.ID("pg-prompt"), prompt), chromedp.Click(chromedp.CSS(`#pg-chat button`)))
		p.WaitFor(`document.querySelector("#pg-reply").textContent === ` + js("Replica r0 heard: "+prompt))
		shown(p, "the playground")
	})

	t.Run("the sign-in returns only to the console", func(t *testing.T) {
		// Another site, on another loopback address: it counts the browsers sent there.
		var visits atomic.Int32
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		evil := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			visits.Add(1)
			fmt.Fprintln(w, "another site")
		})}
		go func() { _ = evil.Serve(ln) }()
		t.Cleanup(func() { evil.Close() })
		host := ln.Addr().String()
		for _, next := range []string{"/\t/" + host + "/", "/\\" + host + "/", "//" + host + "/", "http://" + host + "/", "/t/acme/keys"} {
			p := e.browser.NewPage(t, browser.PageOptions{AllowHosts: []string{"127.0.0.2"}})
			e.signIn(t, p, dana, e.srv.URL+"/auth/login?next="+url.QueryEscape(next))
			want := e.srv.URL + "/t/acme/jobs"
			if next == "/t/acme/keys" {
				want = e.srv.URL + next
			}
			p.WaitURL(want)
			if loc := p.Location(); loc != want {
				t.Errorf("signed in with next=%q, the browser is at %s, want %s", next, loc, want)
			}
		}
		if n := visits.Load(); n != 0 {
			t.Errorf("the sign-in sent the browser to another site %d times", n)
		}
	})
}
