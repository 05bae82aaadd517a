package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/e2e/browser"
)

// TestConsole signs users in through Dex's login page and uses every page in the browser:
// each page is checked with axe-core, walked by keyboard and photographed; the tests of
// security (CSP, CSRF, another tenant's names) run against the same server.
func TestConsole(t *testing.T) {
	e := newEnv(t, envOptions{})
	dir := shots(t)

	t.Run("sign in through Dex's login page lands on the jobs page", func(t *testing.T) {
		p := e.browser.NewPage(t, browser.PageOptions{})
		p.Navigate(e.srv.URL + "/")
		p.WaitFor(`document.querySelector("#login") || document.querySelector('a[href*="/auth/local"]')`)
		if browser.Eval[bool](p, `!document.querySelector("#login")`) {
			p.Do(chromedp.Click(chromedp.CSS(`a[href*="/auth/local"]`)))
			p.WaitFor(`document.querySelector("#login")`)
		}
		// Dex's own page: photographed, not judged (axe-core finds serious problems in Dex's
		// template: no lang, an image without alt, positive tabindex, low contrast).
		p.Screenshot(filepath.Join(dir, "signin-dex.png"))
		p.Do(chromedp.WaitVisible(chromedp.ID("login")), chromedp.SendKeys(chromedp.ID("login"), dana.Email), chromedp.SendKeys(chromedp.ID("password"), dana.Password),
			chromedp.Click(chromedp.ID("submit-login")))
		p.WaitURL(e.srv.URL + "/t/acme/jobs")
		if got := text(p); !strings.Contains(got, "chat") || !strings.Contains(got, "serving") {
			t.Errorf("the jobs page does not list acme's jobs:\n%s", got)
		}
		var sess bool
		for _, c := range p.Cookies(e.srv.URL) {
			if c.Name != console.SessionCookie {
				continue
			}
			sess = true
			if !c.HTTPOnly || !c.Secure || c.SameSite != "Lax" || c.Path != "/" || c.Domain != "127.0.0.1" {
				t.Errorf("session cookie attributes: HttpOnly %v, Secure %v, SameSite %q, Path %q, Domain %q", c.HTTPOnly, c.Secure, c.SameSite, c.Path, c.Domain)
			}
		}
		if !sess {
			t.Error("no session cookie after the sign-in")
		}
		check(t, p, dir, "jobs")
	})

	t.Run("the jobs list follows the stages without a reload", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		browser.Eval[bool](p, `window.__sameDocument = true`)
		e.backend.SetStage("acme", "transcribe", "failed", "the VM was evicted")
		e.waitLive(t, p, `document.querySelector("#job-transcribe .badge").textContent === "failed"`)
		e.backend.SetStage("acme", "transcribe", "serving", "every replica answers /health")
		e.waitLive(t, p, `document.querySelector("#job-transcribe .badge").textContent === "serving" && document.querySelector("#job-transcribe .reason").textContent.includes("every replica")`)
		if !browser.Eval[bool](p, `window.__sameDocument === true`) {
			t.Error("the page was reloaded")
		}
	})

	t.Run("who am I", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.Navigate(e.srv.URL + "/me")
		got := text(p)
		for _, want := range []string{dana.Email, "acme-ml", "developer", "create, restart and delete jobs", e.dex.Issuer} {
			if !strings.Contains(got, want) {
				t.Errorf("who am I does not say %q:\n%s", want, got)
			}
		}
		check(t, p, dir, "me")
	})

	t.Run("create a job from the form, and watch it come up", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.Navigate(e.srv.URL + "/t/acme/jobs/new")
		check(t, p, dir, "create")
		p.Do(chromedp.SendKeys(chromedp.ID("name"), "summarize"), chromedp.SendKeys(chromedp.ID("model"), "mistral-small"))
		p.WaitFor(`document.querySelector("#gpuCount").value === "2"`)
		if why := browser.Run(p, chromedp.Text(chromedp.ID("gpu-why"))); !strings.Contains(why, "hand-written master") {
			t.Errorf("the GPU count is not explained: %q", why)
		}
		p.Do(chromedp.Click(chromedp.CSS(`button[value="preview"]`)))
		p.WaitFor(`document.querySelector("#preview")`)
		preview := browser.Run(p, chromedp.Text(chromedp.ID("preview")))
		for _, want := range []string{"kind: ManagedInferenceJob", "name: summarize", "gpuCount: 2", "model: mistral-small"} {
			if !strings.Contains(preview, want) {
				t.Errorf("the preview lacks %q:\n%s", want, preview)
			}
		}
		check(t, p, dir, "create-preview")
		p.Do(chromedp.Click(chromedp.CSS(`button[value="create"]`)))
		p.WaitURL(e.srv.URL + "/t/acme/jobs/summarize")
		if got := text(p); !strings.Contains(got, "committed to the inputs") || !strings.Contains(got, "syncing") {
			t.Errorf("the new job's page:\n%s", got)
		}
		check(t, p, dir, "job")

		p.Navigate(e.srv.URL + "/t/acme/jobs")
		p.WaitFor(`document.querySelector("#job-summarize .badge").textContent === "syncing"`)
		for _, stage := range []string{"booting", "loading-model", "serving"} {
			e.backend.SetStage("acme", "summarize", stage, "moved by the test")
			e.waitLive(t, p, fmt.Sprintf(`document.querySelector("#job-summarize .badge").textContent === %q`, stage))
		}
	})

	t.Run("a refused create shows the server's words next to the field", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.AllowConsoleError("status of 422")
		p.Navigate(e.srv.URL + "/t/acme/jobs/new")
		p.Do(chromedp.SendKeys(chromedp.ID("name"), "forced"), chromedp.SendKeys(chromedp.ID("model"), "Qwen/Qwen3-32B"))
		p.WaitFor(`document.querySelector("#gpuCount").value === "1"`)
		// A wrong count cannot be typed into the form: force it past the page, as a script would.
		browser.Eval[bool](p, `(() => { const g = document.querySelector("#gpuCount"); g.readOnly = false; g.value = "3"; return true })()`)
		p.Do(chromedp.Click(chromedp.CSS(`button[value="create"]`)))
		p.WaitFor(`document.querySelector("#gpuCount-errors li")`)
		msg := browser.Run(p, chromedp.Text(chromedp.CSS("#gpuCount-errors")))
		if !strings.Contains(msg, "must equal the model master's perReplicaGPUCount 1") || !strings.Contains(msg, "spec.gpuCount") {
			t.Errorf("the GPU count's refusal is not next to the field: %q", msg)
		}
		if inv := browser.Eval[string](p, `document.querySelector("#gpuCount").getAttribute("aria-invalid")`); inv != "true" {
			t.Errorf("gpuCount aria-invalid = %q", inv)
		}
		check(t, p, dir, "create-refused")

		// Over the tenant's GPU quota: the refusal goes to replicas.
		p.Navigate(e.srv.URL + "/t/acme/jobs/new")
		p.Do(chromedp.SendKeys(chromedp.ID("name"), "big"), chromedp.SendKeys(chromedp.ID("model"), "meta-llama/Llama-3.3-70B-Instruct"))
		p.WaitFor(`document.querySelector("#gpuCount").value === "8"`)
		p.Do(chromedp.SetValue(chromedp.ID("replicas"), "2"), chromedp.Click(chromedp.CSS(`button[value="create"]`)))
		p.WaitFor(`document.querySelector("#replicas-errors li")`)
		if msg := browser.Run(p, chromedp.Text(chromedp.CSS("#replicas-errors"))); !strings.Contains(msg, "GPU quota is 16") {
			t.Errorf("the quota's refusal is not next to replicas: %q", msg)
		}
	})

	t.Run("restart and delete ask first and say what is kept", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.Navigate(e.srv.URL + "/t/acme/jobs/chat")
		p.Do(chromedp.Click(chromedp.CSS(`a[href$="/jobs/chat/restart"]`)))
		p.WaitURL(e.srv.URL + "/t/acme/jobs/chat/restart")
		if got := text(p); !strings.Contains(got, "model cache") || !strings.Contains(got, "What is kept") {
			t.Errorf("the restart's confirmation:\n%s", got)
		}
		check(t, p, dir, "confirm-restart")
		before := e.backend.Calls("RestartJob")
		p.Do(chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
		p.WaitFor(`location.pathname === "/t/acme/jobs/chat" && document.readyState === "complete"`)
		if e.backend.Calls("RestartJob") != before+1 {
			t.Error("the restart did not reach the backend")
		}

		p.Navigate(e.srv.URL + "/t/acme/jobs")
		p.Navigate(e.srv.URL + "/t/acme/jobs/transcribe/delete")
		if got := text(p); !strings.Contains(got, "What is removed") || !strings.Contains(got, "API keys and the usage") {
			t.Errorf("the delete's confirmation:\n%s", got)
		}
		check(t, p, dir, "confirm-delete")
		p.Do(chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
		p.WaitFor(`location.pathname === "/t/acme/jobs" && document.readyState === "complete"`)
		if browser.Eval[bool](p, `!!document.querySelector("#job-transcribe")`) {
			t.Error("the deleted job is still listed")
		}
	})

	var minted string
	t.Run("mint a key: shown once, then listed and revoked", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.Navigate(e.srv.URL + "/t/acme/keys")
		check(t, p, dir, "keys")
		p.Do(chromedp.SendKeys(chromedp.ID("key-name"), "ci pipeline"), chromedp.Click(chromedp.CSS(`form[action$="/keys"] button`)))
		p.WaitFor(`document.querySelector("#new-key")`)
		minted = browser.Run(p, chromedp.Text(chromedp.ID("new-key")))
		if !strings.HasPrefix(minted, "ipk_") {
			t.Fatalf("no key shown: %q", minted)
		}
		check(t, p, dir, "keys-created")
		p.Navigate(e.srv.URL + "/t/acme/keys")
		if got := text(p); strings.Contains(got, minted) || !strings.Contains(got, "ci pipeline") {
			t.Errorf("after a reload the key must be listed by name, never shown:\n%s", got)
		}
		p.Do(chromedp.Click(chromedp.CSS(`a[href$="/revoke"]`)))
		p.WaitFor(`location.pathname.endsWith("/revoke") && document.readyState === "complete"`)
		p.Do(chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
		p.WaitFor(`location.pathname === "/t/acme/keys" && document.readyState === "complete"`)
		if e.backend.Calls("RevokeKey") != 1 {
			t.Error("the revocation did not reach the backend")
		}
	})

	t.Run("playground: a chat streamed token by token, and a transcription", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		key := "ipk_playground_test_key"
		e.gateway.allow(key)
		p.Navigate(e.srv.URL + "/t/acme/playground")
		check(t, p, dir, "playground")
		browser.Eval[bool](p, `(() => { window.__chunks = 0; new MutationObserver(() => window.__chunks++).observe(document.querySelector("#pg-reply"), {childList: true, characterData: true, subtree: true}); return true })()`)
		// The gateway holds the reply back after each piece until the test has seen the page
		// show it: streamed means shown piece by piece, whatever the machine's speed.
		pace := e.gateway.paced()
		next := func() {
			t.Helper()
			select {
			case pace <- struct{}{}:
			case <-time.After(browser.WaitTimeout):
				t.Fatal("the reply's next piece never reached the gateway")
			}
		}
		p.Do(chromedp.SetValue(chromedp.ID("pg-endpoint"), "chat"), chromedp.SendKeys(chromedp.ID("pg-key"), key),
			chromedp.SendKeys(chromedp.ID("pg-prompt"), "Say hello"), chromedp.Click(chromedp.CSS(`#pg-chat button`)))
		next() // the first piece: the role, no text
		p.WaitFor(`document.querySelector("#pg-reply").textContent === "Replica"`)
		next()
		p.WaitFor(`document.querySelector("#pg-reply").textContent === "Replica r0"`)
		close(pace) // the rest at once
		p.WaitFor(`document.querySelector("#pg-reply").textContent === "Replica r0 heard: Say hello"`)
		if n := browser.Eval[int](p, `window.__chunks`); n < 3 {
			t.Errorf("the reply arrived in %d pieces: not streamed", n)
		}
		if e.gateway.replica.RequestsTo("/v1/chat/completions") == 0 {
			t.Error("the chat did not reach the replica")
		}
		// A wrong key: the gateway's refusal is shown.
		p.Do(chromedp.SetValue(chromedp.ID("pg-key"), "wrong"), chromedp.Click(chromedp.CSS(`#pg-chat button`)))
		p.WaitFor(`!document.querySelector("#pg-error").hidden`)
		if msg := browser.Run(p, chromedp.Text(chromedp.ID("pg-error"))); !strings.Contains(msg, "401") {
			t.Errorf("the refusal: %q", msg)
		}
		p.AllowConsoleError("status of 401")
		audio := filepath.Join(t.TempDir(), "hello.wav")
		if err := os.WriteFile(audio, wav(), 0o644); err != nil {
			t.Fatal(err)
		}
		p.Do(chromedp.SetValue(chromedp.ID("pg-key"), key), chromedp.SetUploadFiles(chromedp.ID("pg-file"), []string{audio}),
			chromedp.Click(chromedp.CSS(`#pg-transcribe button`)))
		p.WaitFor(`document.querySelector("#pg-text").textContent.length > 0`)
		if e.gateway.replica.RequestsTo("/v1/audio/transcriptions") == 0 {
			t.Error("the transcription did not reach the replica")
		}
	})

	t.Run("usage and health", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.Navigate(e.srv.URL + "/t/acme/usage")
		p.WaitFor(`document.querySelectorAll(".chart canvas").length === 4`)
		if got := text(p); !strings.Contains(got, "99.6 %") || !strings.Contains(got, "911 ms") {
			t.Errorf("the health table:\n%s", got)
		}
		check(t, p, dir, "usage")
		p.Do(chromedp.SetValue(chromedp.ID("range"), "7d"), chromedp.Click(chromedp.CSS(`form.inline button`)))
		p.WaitURL(e.srv.URL + "/t/acme/usage?range=7d")
		p.WaitFor(`document.querySelectorAll(".chart canvas").length === 4`)
	})

	t.Run("a viewer sees no create or delete buttons, and is refused anyway", func(t *testing.T) {
		p := e.page(t, vic, browser.PageOptions{})
		p.AllowConsoleError("status of 403")
		for _, path := range []string{"/t/acme/jobs", "/t/acme/jobs/chat", "/t/acme/keys"} {
			p.Navigate(e.srv.URL + path)
			if n := browser.Eval[int](p, `document.querySelectorAll('a[href$="/jobs/new"], a[href$="/delete"], a[href$="/restart"], a[href*="/restart?"], a[href$="/revoke"], form[method="post"]:not([action="/auth/logout"])').length`); n != 0 {
				t.Errorf("%s: a viewer is shown %d controls that change something", path, n)
			}
		}
		check(t, p, dir, "jobs-viewer")
		// The viewer's own page posts a delete with the session's real CSRF token: the role
		// alone must stop it.
		before := e.backend.Calls("DeleteJob")
		browser.Eval[bool](p, `(() => { const f = document.createElement("form"); f.method = "post"; f.action = "/t/acme/jobs/chat/delete";
		  const i = document.createElement("input"); i.name = "csrf"; i.value = document.querySelector('meta[name="csrf-token"]').content;
		  f.append(i); document.body.append(f); f.submit(); return true })()`)
		p.WaitFor(`location.pathname === "/t/acme/jobs/chat/delete" && document.readyState === "complete"`)
		if got := text(p); !strings.Contains(got, `your role in tenant "acme" is viewer`) {
			t.Errorf("the refusal does not say why:\n%s", got)
		}
		if e.backend.Calls("DeleteJob") != before {
			t.Error("a viewer's delete reached the backend")
		}
		if st := p.NavigateStatus(e.srv.URL + "/t/acme/jobs/new"); st != http.StatusForbidden {
			t.Errorf("a viewer's create form: status %d", st)
		}
	})

	t.Run("another tenant's job URL gives 404, as a job that does not exist", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.AllowConsoleError("status of 404")
		var bodies []string
		for _, path := range []string{"/t/globex/jobs/llama", "/t/acme/jobs/llama", "/t/globex/jobs", "/t/nosuch/jobs"} {
			if st := p.NavigateStatus(e.srv.URL + path); st != http.StatusNotFound {
				t.Errorf("%s: status %d, want 404", path, st)
			}
			bodies = append(bodies, browser.Run(p, chromedp.Text(chromedp.CSS("main"))))
		}
		for i, b := range bodies[1:] {
			if b != bodies[0] {
				t.Errorf("page %d differs from the first 404:\n%s\n---\n%s", i+1, b, bodies[0])
			}
		}
		check(t, p, dir, "not-found")
		if st := p.NavigateStatus(e.srv.URL + "/fleet"); st != http.StatusNotFound {
			t.Errorf("the fleet for a customer: status %d, want 404", st)
		}
	})

	t.Run("no inline script runs: the CSP blocks and reports it", func(t *testing.T) {
		// Markup in the data is text: html/template escapes it, nothing is blocked or run.
		e.backend.SetStage("acme", "chat", "serving", `<script>window.__pwned = "data"</script><img src="/x" onerror="window.__pwned = 'attr'">`)
		p := e.page(t, dana, browser.PageOptions{})
		p.WaitFor(`document.querySelector("#job-chat .reason").textContent.includes("<script>")`)
		reports := console.CSPReports()
		// Script put into the page anyway (as an injection that got past the escaping would):
		// an inline <script> and an inline event handler.
		browser.Eval[bool](p, `(() => { const s = document.createElement("script"); s.textContent = "window.__pwned = 'inline'"; document.body.append(s);
		  document.body.insertAdjacentHTML("beforeend", '<img alt="" src="/static/favicon.svg" onload="window.__pwned = \'handler\'">'); return true })()`)
		got := p.TakeCSPViolations("script-src-elem", "script-src-attr")
		if pwned := browser.Eval[string](p, `String(window.__pwned)`); pwned != "undefined" {
			t.Errorf("a script ran: window.__pwned = %s", pwned)
		}
		directives := map[string]bool{}
		for _, v := range got {
			directives[v.Directive] = true
			if v.Blocked != "inline" {
				t.Errorf("violation of %s blocked %q, want inline", v.Directive, v.Blocked)
			}
		}
		if !directives["script-src-elem"] || !directives["script-src-attr"] {
			t.Errorf("violations %+v: want script-src-elem and script-src-attr", got)
		}
		// The reports are the browser's own requests, sent when it gets to them.
		deadline := time.Now().Add(browser.WaitTimeout)
		for console.CSPReports() < reports+2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if console.CSPReports() < reports+2 {
			t.Errorf("the console received %d violation reports, want 2", console.CSPReports()-reports)
		}
		e.backend.SetStage("acme", "chat", "serving", "every replica answers /health")
	})

	t.Run("a cross-site form post is refused", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{AllowHosts: []string{"127.0.0.2"}})
		p.AllowConsoleError("status of 401")
		p.AllowConsoleError("status of 403")
		target := e.srv.URL + "/t/acme/jobs/chat/delete"
		before := e.backend.Calls("DeleteJob")
		// Another site (127.0.0.2: another host, so another site): the SameSite cookie stays home.
		other := attacker(t, "127.0.0.2:0", target)
		p.Navigate(other + "/")
		p.Do(chromedp.Click(chromedp.ID("go")))
		p.WaitURL(target)
		if got := text(p); !strings.Contains(got, "signed out") {
			t.Errorf("the cross-site post's answer:\n%s", got)
		}
		// The same site on another port gets the cookie, and is refused for where it comes from.
		same := attacker(t, "127.0.0.1:0", target)
		p.Navigate(same + "/")
		p.Do(chromedp.Click(chromedp.ID("go")))
		p.WaitURL(target)
		if got := text(p); !strings.Contains(got, "came from another site") {
			t.Errorf("the same-site post's answer:\n%s", got)
		}
		if e.backend.Calls("DeleteJob") != before {
			t.Error("a forged delete reached the backend")
		}
		p.Navigate(e.srv.URL + "/t/acme/jobs")
		if !browser.Eval[bool](p, `!!document.querySelector("#job-chat")`) {
			t.Error("the job is gone")
		}
	})

	t.Run("the operator sees every tenant and the fleet", func(t *testing.T) {
		p := e.page(t, ops, browser.PageOptions{})
		if n := browser.Eval[int](p, `document.querySelectorAll("#tenant-switch option").length`); n != 3 {
			t.Errorf("the operator's switcher lists %d tenants, want 3", n)
		}
		p.Navigate(e.srv.URL + "/fleet")
		if got := text(p); !strings.Contains(got, "globex") || !strings.Contains(got, "metal3.gpu-h200") {
			t.Errorf("the fleet page:\n%s", got)
		}
		check(t, p, dir, "fleet")
		p.Navigate(e.srv.URL + "/t/acme/keys")
		p.Do(chromedp.SetValue(chromedp.ID("tenant-switch"), "globex"), chromedp.Click(chromedp.CSS(`form.switcher button`)))
		p.WaitURL(e.srv.URL + "/t/globex/keys")
	})

	t.Run("sign out", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.Do(chromedp.Click(chromedp.CSS(`.account button`)))
		p.WaitURL(e.srv.URL + "/signed-out")
		check(t, p, dir, "signed-out")
		p.Navigate(e.srv.URL + "/t/acme/jobs")
		p.WaitFor(`location.href.startsWith(` + fmt.Sprintf("%q", e.dex.Issuer) + `)`)
	})

	if minted != "" && bytes.Contains(e.logs(), []byte(minted)) {
		t.Error("a minted API key reached the console's log")
	}
	if bytes.Contains(e.logs(), []byte("ipk_playground")) {
		t.Error("the playground's key reached the console's log")
	}
}

// attacker serves a page with a form that posts to target, as another site would.
func attacker(t *testing.T, listen, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html lang="en"><title>Prize</title><form method="post" action=%q>
<input type="hidden" name="csrf" value="guessed"><button id="go">Claim your prize</button></form></html>`, target)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// wav is a short silent WAV file (what a user would upload).
func wav() []byte {
	var b bytes.Buffer
	data := make([]byte, 1600)
	b.WriteString("RIFF")
	b.Write(le32(uint32(36 + len(data))))
	b.WriteString("WAVEfmt ")
	b.Write(le32(16))
	b.Write([]byte{1, 0, 1, 0})
	b.Write(le32(16000))
	b.Write(le32(32000))
	b.Write([]byte{2, 0, 16, 0})
	b.WriteString("data")
	b.Write(le32(uint32(len(data))))
	b.Write(data)
	return b.Bytes()
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
