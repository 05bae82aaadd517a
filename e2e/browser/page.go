package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Bounds on waiting. They are generous because the tests run on shared machines (two `make
// test` runs side by side on two cores put the load at 15 to 25, where a browser's step can take
// tens of seconds): they bound a wait, they assert nothing about speed.
const (
	// Timeout bounds each step a Page runs (a navigation, a click, an evaluation).
	Timeout = 2 * time.Minute
	// WaitTimeout bounds WaitFor: a condition the page reaches by itself (a list the server
	// streams, a page a form posts to).
	WaitTimeout = 3 * time.Minute
)

// PageOptions say what else a page may reach, and what it may print.
type PageOptions struct {
	// AllowHosts are hosts besides 127.0.0.1 that requests may go to: only other loopback
	// addresses (a cross-site attacker page on 127.0.0.2, say).
	AllowHosts []string
	// Init are scripts run in every document before its own (injected by the DevTools
	// protocol, which the page's CSP does not govern): probes a test reads when it fails.
	Init []string
	// Slow holds each request whose URL contains a key that long before it goes on: a slow
	// network, for one file.
	Slow map[string]time.Duration
}

// Page is one tab in its own browser context.
type Page struct {
	t      testing.TB
	ctx    context.Context
	cancel context.CancelFunc
	allow  []string

	mu        sync.Mutex
	blocked   []string
	errors    []string
	allowErrs []string
	csp       []CSPViolation
	// cspTaken counts the violations TakeCSPViolations took: as many of the console errors
	// the browser prints for CSP violations are expected (they arrive on their own schedule).
	cspTaken int
	// held are the requests the gate paused and has not let go yet, gateErrs the gate's
	// failures: what a wait that fails reports, to tell a request stuck in the gate.
	held      map[fetch.RequestID]string
	gateErrs  []string
	slow      map[string]time.Duration
	requests  map[network.RequestID]*Transfer
	transfers []Transfer
}

// CSPViolation is one securitypolicyviolation event of the page.
type CSPViolation struct {
	Directive string `json:"directive"`
	Blocked   string `json:"blocked"`
	Sample    string `json:"sample"`
	Source    string `json:"source"`
	Document  string `json:"document"`
}

// Transfer is one finished request: what it fetched and how many bytes crossed the network
// for it (headers and the encoded body).
type Transfer struct {
	URL   string
	Type  network.ResourceType
	Bytes int64
}

// cspHook reports every CSP violation of every document the tab loads to the Go side. It runs
// before the page's own scripts, injected by the DevTools protocol (which the page's CSP does
// not govern).
const cspHook = `document.addEventListener("securitypolicyviolation", (e) => {
  window.__inferplaneCSP({directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample,
    source: e.sourceFile + ":" + e.lineNumber, document: e.documentURI});
}, true);`

// NewPage opens a tab with its own cookies; the test fails at its end on anything the page
// did wrong (see the package's documentation).
func (b *Browser) NewPage(t testing.TB, o PageOptions) *Page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	p := &Page{t: t, ctx: ctx, cancel: cancel, allow: append([]string{"127.0.0.1"}, o.AllowHosts...), requests: map[network.RequestID]*Transfer{},
		held: map[fetch.RequestID]string{}, slow: o.Slow}
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("opening a tab: %v\n%s", err, b.Log())
	}
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	console := chromedp.Console(ctx)
	if err := chromedp.Listen(ctx, p.onEvent); err != nil {
		t.Fatal(err)
	}
	go p.gate(paused)
	go p.watchConsole(console)
	p.Do(
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if _, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*"}}}); err != nil {
				return err
			}
			// The page is told it has the focus, as a window in front would: keyboard focus and
			// :focus-visible behave as for a person.
			if _, err := cdp.Call(ctx, tg, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
				return err
			}
			for _, src := range append([]string{cspHook}, o.Init...) {
				if _, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src}); err != nil {
					return err
				}
			}
			return nil
		}),
		chromedp.ExposeFunc("__inferplaneCSP", func(_ context.Context, v CSPViolation) (bool, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.csp = append(p.csp, v)
			return true, nil
		}),
	)
	t.Cleanup(p.close)
	return p
}

// Ctx is the tab's context, for chromedp calls the Page has no helper for.
func (p *Page) Ctx() context.Context { return p.ctx }

// gate lets a request through when it goes to an allowed host and fails it otherwise.
func (p *Page) gate(paused iter.Seq2[fetch.EventRequestPaused, error]) {
	for ev, err := range paused {
		if err != nil {
			return
		}
		allowed := p.allowed(ev.Request.URL)
		what := ev.Request.Method + " " + ev.Request.URL
		p.mu.Lock()
		p.held[ev.RequestID] = time.Now().Format("15:04:05.000") + " " + what
		p.mu.Unlock()
		go func() {
			for k, d := range p.slow {
				if strings.Contains(ev.Request.URL, k) {
					time.Sleep(d)
				}
			}
			var err error
			if allowed {
				_, err = chromedp.Call(p.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			} else {
				p.mu.Lock()
				p.blocked = append(p.blocked, what)
				p.mu.Unlock()
				_, err = chromedp.Call(p.ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
			}
			p.mu.Lock()
			delete(p.held, ev.RequestID)
			if err != nil && p.ctx.Err() == nil { // else the tab is closing
				p.gateErrs = append(p.gateErrs, time.Now().Format("15:04:05.000")+" "+what+": "+err.Error())
			}
			p.mu.Unlock()
		}()
	}
}

func (p *Page) allowed(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "data", "blob", "about":
		return true
	}
	return slices.Contains(p.allow, u.Hostname())
}

// Messages of the browser's own log that say nothing about the page.
var benign = []string{
	// The profile's first start on a machine without a D-Bus session.
	"Failed to connect to the bus",
}

func (p *Page) watchConsole(messages iter.Seq2[chromedp.ConsoleMessage, error]) {
	for m, err := range messages {
		if err != nil {
			return
		}
		if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException {
			continue
		}
		text := m.Text
		if m.URL != "" {
			text += " (" + m.URL + ")"
		}
		if slices.ContainsFunc(benign, func(s string) bool { return strings.Contains(text, s) }) {
			continue
		}
		p.mu.Lock()
		p.errors = append(p.errors, text)
		p.mu.Unlock()
	}
}

// onEvent counts each request's transferred bytes (it runs in the tab's loop: quick, no
// commands).
func (p *Page) onEvent(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventResponseReceived:
		p.requests[ev.RequestID] = &Transfer{URL: ev.Response.URL, Type: ev.Type}
	case *network.EventLoadingFinished:
		if tr := p.requests[ev.RequestID]; tr != nil {
			tr.Bytes = int64(ev.EncodedDataLength)
			p.transfers = append(p.transfers, *tr)
			delete(p.requests, ev.RequestID)
		}
	}
}

// Do runs steps one after the other, each within Timeout; an error fails the test. A step whose
// element went stale under it (see Run) is run again.
func (p *Page) Do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	for _, s := range steps {
		Run(p, s)
	}
}

// Run runs one action that returns a value, within Timeout; an error fails the test.
//
// An element action (a click, keys sent, a value set or read) finds its element and then acts
// on it by the browser's node id. A page that re-renders in between (a list the server streams
// swapped in, a navigation) removes that node, and the action fails with the browser's "No node
// with given id" before it did anything: such an action is run again, finding the element anew,
// until Timeout.
func Run[T any](p *Page, a chromedp.Action[T]) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	for {
		v, err := chromedp.Run(ctx, a)
		if err == nil {
			return v
		}
		if !stale(err) || ctx.Err() != nil {
			p.t.Fatalf("browser: %v (page %s)", err, p.location())
		}
		p.t.Logf("browser: %v: the page changed under the action, trying again", err)
		time.Sleep(50 * time.Millisecond)
	}
}

// staleErrors are the browser's answers to an action on a node (or a JavaScript context) that
// the page has just replaced: the action did nothing, and can be run again.
var staleErrors = []string{
	"No node with given id",
	"Could not find node with given id",
	"Node is detached from document",
	"Node does not have a layout object",
	"Cannot find context with specified id",
}

func stale(err error) bool {
	if errors.Is(err, chromedp.ErrInvalidDimensions) {
		return true // the node had no box: it is being replaced
	}
	return slices.ContainsFunc(staleErrors, func(s string) bool { return strings.Contains(err.Error(), s) })
}

// Eval evaluates JavaScript in the page and decodes its result.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	return Run(p, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

func (p *Page) location() string {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "?"
	}
	return loc
}

// Location is the page's URL.
func (p *Page) Location() string { return Run(p, chromedp.Location()) }

// Navigate loads a URL and waits for its load event.
func (p *Page) Navigate(u string) { p.t.Helper(); p.Do(chromedp.Navigate(u)) }

// Screenshot writes a PNG of the whole page to path (its folder is made when missing).
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		// A page whose layout reports no size (some forms of other sites): the viewport.
		png = Run(p, chromedp.CaptureScreenshot())
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// ScreenshotViewport writes a PNG of what the window shows (a page too long for a full
// screenshot to be worth its bytes).
func (p *Page) ScreenshotViewport(path string) {
	p.t.Helper()
	png := Run(p, chromedp.CaptureScreenshot())
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// AllowConsoleError lets console errors containing substr pass (a test that provokes a 404 or
// a refusal on purpose).
func (p *Page) AllowConsoleError(substr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.allowErrs = append(p.allowErrs, substr)
}

// TakeCSPViolations waits (up to WaitTimeout) until the page reported a violation of each of
// the directives and returns every violation so far, which then no longer fail the test; nor
// do as many console errors about the Content Security Policy (the browser prints one for each
// violation, whenever its console gets to it).
func (p *Page) TakeCSPViolations(directives ...string) []CSPViolation {
	p.t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		p.mu.Lock()
		seen := map[string]bool{}
		for _, v := range p.csp {
			seen[v.Directive] = true
		}
		p.mu.Unlock()
		missing := slices.DeleteFunc(slices.Clone(directives), func(d string) bool { return seen[d] })
		if len(seen) > 0 && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			p.t.Errorf("browser: waited %s for violations of %v; none of %v (load %s)", WaitTimeout, directives, missing, loadavg())
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.csp
	p.csp = nil
	p.cspTaken += len(out)
	return out
}

// Transfers are the requests finished so far, with their bytes; ClearTransfers forgets them.
func (p *Page) Transfers() []Transfer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.transfers)
}

func (p *Page) ClearTransfers() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.transfers = nil
}

// Problems are what the page did wrong so far: requests blocked, console errors not allowed,
// CSP violations not taken.
func (p *Page) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, b := range p.blocked {
		out = append(out, "a request to a host other than loopback was blocked: "+b)
	}
	cspTaken := p.cspTaken
	for _, e := range p.errors {
		if slices.ContainsFunc(p.allowErrs, func(s string) bool { return strings.Contains(e, s) }) {
			continue
		}
		if cspTaken > 0 && strings.Contains(e, "Content Security Policy") {
			cspTaken--
			continue
		}
		out = append(out, "console error: "+e)
	}
	for _, v := range p.csp {
		out = append(out, fmt.Sprintf("Content-Security-Policy violation: %s blocked %q (%s) in %s", v.Directive, v.Blocked, v.Sample, v.Source))
	}
	return out
}

func (p *Page) close() {
	// Events still on their way (a console line after the last step) get a moment to arrive.
	time.Sleep(150 * time.Millisecond)
	for _, pr := range p.Problems() {
		p.t.Error(pr)
	}
	p.cancel()
}

// WaitFor waits until the JavaScript expression is true in the page (a new page after a
// click, a swapped list), within WaitTimeout. It polls with plain evaluations, so a navigation
// in between (which destroys the page's JavaScript context) is waited out, not an error. When
// it gives up, the message has the page's text and the machine's load, to tell a slow machine
// from a page that went wrong.
func (p *Page) WaitFor(expr string) {
	p.t.Helper()
	if err := p.Until(expr); err != nil {
		p.t.Fatal(err)
	}
}

// Until is WaitFor that returns the failure instead of failing the test (which can then say
// more about it).
func (p *Page) Until(expr string) error {
	p.t.Helper()
	start := time.Now()
	deadline := start.Add(WaitTimeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(p.ctx, min(time.Until(deadline), 20*time.Second))
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			if d := time.Since(start); d > 10*time.Second {
				p.t.Logf("browser: waited %s for %s (load %s)", d.Round(time.Second), expr, loadavg())
			}
			return nil
		}
		if p.ctx.Err() != nil {
			break
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("browser: waited %s for %s (page %s, last error %v, load %s); %s; the page's text:\n%s",
		WaitTimeout, expr, p.location(), last, loadavg(), p.gateState(), p.text())
}

// gateState says which requests the gate holds and what failed in it.
func (p *Page) gateState() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := slices.Sorted(maps.Values(p.held))
	return fmt.Sprintf("requests held at the gate: %q; the gate's errors: %q", held, p.gateErrs)
}

// text is the page's visible text (its start), for failure messages.
func (p *Page) text() string {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(s) > 3000 {
		s = s[:3000] + "..."
	}
	return s
}

// loadavg is the machine's load averages (Linux), for messages about waits.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// WaitURL waits until the page's URL starts with prefix and the page has loaded.
func (p *Page) WaitURL(prefix string) {
	p.t.Helper()
	js, _ := json.Marshal(prefix)
	p.WaitFor("location.href.startsWith(" + string(js) + ") && document.readyState === \"complete\"")
}

// NavigateStatus loads a URL and returns the HTTP status of the document.
func (p *Page) NavigateStatus(u string) int64 {
	p.t.Helper()
	resp := Run(p, chromedp.NavigateResponse(u))
	if resp == nil {
		p.t.Fatalf("no response for %s", u)
	}
	return resp.Status
}

// Cookies are the browser's cookies for a URL (HttpOnly ones included).
func (p *Page) Cookies(u string) []*network.Cookie {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
	if err != nil {
		p.t.Fatal(err)
	}
	return res.Cookies
}
