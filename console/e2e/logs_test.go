package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/consoletest"
	"github.com/inferplane/inferplane/e2e/browser"
)

// logLine is a line of acme/chat's replica r as the API would send it.
func logLine(r int32, at time.Time, line string) console.LogLine {
	n := int32(0)
	return console.LogLine{Kind: "line", Time: at, Replica: &r, Node: &n, VM: "chat-r" + strconv.Itoa(int(r)) + "-n0", Stream: "stderr", Line: line}
}

// TestJobLogPane: the job page's log pane follows the job's log (consoletest's TEST DOUBLE of
// the API): lines arrive at the bottom as the replicas print them, markup in a line is shown
// as text (never made into elements), pause holds the new lines and resume shows them, the
// replica filter and the search narrow the stream, the page keeps at most LogPaneMax lines,
// and another tenant's job's log is not found. The page passes axe-core and the keyboard walk.
func TestJobLogPane(t *testing.T) {
	now := time.Now()
	backend := consoletest.Example(now)
	backend.AppendLog("acme", "chat",
		logLine(0, now.Add(-3*time.Second), "INFO 12-03 07:00:01 [api_server.py:1] vLLM API server version 0.11.0"),
		logLine(1, now.Add(-2*time.Second), `<img src=x onerror="window.__xss=1"><b>bold?</b> &amp; <script>window.__xss=2</script>`),
		console.LogLine{Kind: "status", Time: now.Add(-time.Second), Replica: ptr(int32(1)), Node: ptr(int32(0)), VM: "chat-r1-n0",
			Message: "loading-model: loading the model: Loading safetensors checkpoint shards: 3/8"})
	srv := consoletest.Start(t, func(addr string) console.Options {
		return console.Options{Backend: backend, Dev: true, ListenAddr: addr, SessionKeys: [][]byte{consoletest.Key()}}
	})
	b := browser.Start(t, browser.Options{})
	p := b.NewPage(t, browser.PageOptions{})
	devSignIn(p, srv.URL, "dana@acme.example", "acme-ml", "/t/acme/jobs/chat")
	count := func() int { return int(browser.Eval[float64](p, `document.querySelectorAll("#log-lines li").length`)) }
	last := func() string {
		return browser.Eval[string](p, `document.querySelector("#log-lines li:last-child .log-text").textContent`)
	}

	p.WaitFor(`document.querySelectorAll("#log-lines li").length === 3`)
	assert.Equal(t, `<img src=x onerror="window.__xss=1"><b>bold?</b> &amp; <script>window.__xss=2</script>`,
		browser.Eval[string](p, `document.querySelectorAll("#log-lines li .log-text")[1].textContent`), "markup is shown as text")
	assert.True(t, browser.Eval[bool](p, `document.querySelector("#log-lines img, #log-lines b, #log-lines script") === null && window.__xss === undefined`),
		"no element was made of a line, no script ran")
	assert.Equal(t, "r1/n0", browser.Eval[string](p, `document.querySelectorAll("#log-lines li .log-who")[1].textContent`))
	assert.Equal(t, "Following: new lines appear at the bottom.", browser.Eval[string](p, `document.querySelector("#log-status").textContent`))
	check(t, p, shots(t), "job-logs")

	// A line printed now arrives at the bottom.
	backend.AppendLog("acme", "chat", logLine(0, time.Now(), "INFO 12-03 07:00:09 Started server process [1]"))
	p.WaitFor(`document.querySelectorAll("#log-lines li").length === 4`)
	assert.Equal(t, "INFO 12-03 07:00:09 Started server process [1]", last())

	// Pause holds what comes; resume shows it.
	p.Do(chromedp.Click(chromedp.ID("log-pause")))
	assert.Equal(t, "true", browser.Eval[string](p, `document.querySelector("#log-pause").getAttribute("aria-pressed")`))
	backend.AppendLog("acme", "chat", logLine(1, time.Now(), "held while paused"))
	p.WaitFor(`document.querySelector("#log-status").textContent === "Paused: 1 new lines held."`)
	assert.Equal(t, 4, count(), "nothing new is shown while paused")
	p.Do(chromedp.Click(chromedp.ID("log-pause")))
	p.WaitFor(`document.querySelectorAll("#log-lines li").length === 5`)
	assert.Equal(t, "held while paused", last())

	// The replica filter: a new stream of replica 1's entries only.
	choose := func(value string) {
		browser.Eval[bool](p, `(() => { const s = document.querySelector("#log-replica"); s.value = `+jsString(value)+`; return s.dispatchEvent(new Event("change")); })()`)
	}
	choose("1")
	p.WaitFor(`document.querySelectorAll("#log-lines li").length === 3 && [...document.querySelectorAll("#log-lines .log-who")].every((w) => w.textContent === "r1/n0")`)
	// The search narrows the lines (a stage change is always shown).
	p.Do(chromedp.SendKeys(chromedp.ID("log-search"), "paused"))
	p.WaitFor(`document.querySelectorAll("#log-lines li").length === 2 && document.querySelector("#log-lines li:last-child .log-text").textContent === "held while paused"`)

	// A fast printer: the page keeps the last LogPaneMax lines.
	browser.Eval[string](p, `document.querySelector("#log-search").value = ""`)
	choose("")
	p.WaitFor(`document.querySelectorAll("#log-lines li").length === 5`)
	var burst []console.LogLine
	at := time.Now()
	for i := range console.LogPaneMax + 500 {
		burst = append(burst, logLine(int32(i%2), at.Add(time.Duration(i)*time.Microsecond), fmt.Sprintf("INFO request %04d finished", i)))
	}
	backend.AppendLog("acme", "chat", burst...)
	p.WaitFor(fmt.Sprintf(`document.querySelector("#log-lines li:last-child .log-text").textContent === "INFO request %04d finished"`, console.LogPaneMax+499))
	assert.Equal(t, console.LogPaneMax, count(), "at most LogPaneMax lines in the page")

	// Another tenant's job: not found, as every page of it.
	p.AllowConsoleError("/t/globex/jobs/llama/logs/events")
	status := browser.Eval[float64](p, `fetch("/t/globex/jobs/llama/logs/events").then((r) => { r.body.cancel(); return r.status; })`)
	assert.Equal(t, 404.0, status)
	require.Empty(t, p.Problems())
}

func ptr[T any](v T) *T { return &v }
