package e2e

import (
	"testing"
	"time"

	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/consoletest"
	"github.com/inferplane/inferplane/e2e/browser"
)

// TestLiveListWhateverOrderTheScriptsArrive: the jobs list follows the stages even when htmx's
// SSE extension reaches the browser well after htmx itself (a slow network; on a loaded
// machine, the tests' own request gate). With both scripts deferred as two files, htmx
// processed the page before the extension had registered, and the list never connected its
// stream: two `make test` runs side by side saw a badge stay "syncing" for minutes. They are
// one deferred file now (console.htmxBundle, whose URL holds "hx-sse": held here).
func TestLiveListWhateverOrderTheScriptsArrive(t *testing.T) {
	backend := consoletest.Example(time.Now())
	srv := consoletest.Start(t, func(addr string) console.Options {
		return console.Options{Backend: backend, Dev: true, ListenAddr: addr, SessionKeys: [][]byte{consoletest.Key()},
			LiveInterval: 300 * time.Millisecond}
	})
	e := &env{backend: backend, srv: srv, log: &syncBuffer{}, browser: browser.Start(t, browser.Options{})}
	p := e.browser.NewPage(t, browser.PageOptions{Init: []string{liveProbe}, Slow: map[string]time.Duration{"hx-sse": 2 * time.Second}})
	devSignIn(p, srv.URL, "dana@acme.example", "acme-ml", "/t/acme/jobs")
	backend.SetStage("acme", "transcribe", "failed", "the VM was evicted")
	e.waitLive(t, p, `document.querySelector("#job-transcribe .badge").textContent === "failed"`)
}
