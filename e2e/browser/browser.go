// Package browser drives a real Chromium for the console's tests: Debian's chromium package
// (hack/chromium.sh installs it when missing), started headless by chromedp with a fresh
// profile and every background service that would reach the network turned off.
//
// Each Page is a tab in its own browser context (its own cookies) that:
//   - lets requests reach 127.0.0.1 only (and hosts a test names): any other request is failed
//     before it leaves the browser, and reported; the test fails at its end if a page tried;
//   - fails the test on a console error or an uncaught exception, unless the test said it
//     expects one (AllowConsoleError);
//   - collects Content-Security-Policy violations as the page's own securitypolicyviolation
//     events report them; one the test did not take (TakeCSPViolations) fails it;
//   - runs axe-core inside the page (Axe, AssertAccessible), walks the page by keyboard
//     (KeyboardWalk), takes screenshots (Screenshot), and counts what each request transferred
//     (Transfers).
//
// A test asks for a browser with Start: when no Chromium is installed it skips, saying how to
// get one, unless INFERPLANE_REQUIRE_BROWSER=1 (set by `make test`), in which case it fails.
// Chromium runs marked with e2e/proc's owner mark, so hack/check-strays.sh finds one left
// running after the tests and the next run's ReapOrphans kills it; Chromium also dies with the
// test binary (Pdeathsig, set by chromedp on Linux).
package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inferplane/inferplane/e2e/proc"
)

// Environment variables the package reads.
const (
	// EnvRequire, when "1", turns a missing browser into a test failure instead of a skip.
	EnvRequire = "INFERPLANE_REQUIRE_BROWSER"
	// EnvChromium names the browser binary (default: chromium on PATH, then /usr/bin/chromium).
	EnvChromium = "INFERPLANE_CHROMIUM"
)

// Path finds Chromium, or skips the test (fails it under INFERPLANE_REQUIRE_BROWSER=1).
func Path(t testing.TB) string {
	t.Helper()
	for _, c := range []string{os.Getenv(EnvChromium), "chromium", "/usr/bin/chromium"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	msg := "no chromium browser found: run hack/chromium.sh (apt-get install chromium, as root) or set " + EnvChromium
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s=1 but %s", EnvRequire, msg)
	}
	t.Skip("SKIPPED: " + msg)
	return ""
}

// Options say how a browser is started.
type Options struct {
	// Width and Height are the window's size (default 1280 x 900).
	Width, Height int
}

// Browser is a running Chromium.
type Browser struct {
	ctx     context.Context
	logPath string
}

// flags are Chromium's switches besides headless and the profile: no sandbox (tests run as
// root), and nothing that phones home (component updates, sync, Safe Browsing, metrics,
// translation, field trials); any host but a loopback address resolves to nothing, so a
// lookup of a name never leaves the machine (each page's gate then allows 127.0.0.1 only,
// unless the test names another loopback address).
func flags(o Options) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(o.Width, o.Height),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-field-trial-config", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication,"+
			"CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,PrivacySandboxSettings4"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.*"),
	}
}

// Start starts Chromium for the test and stops it when the test ends.
func Start(t testing.TB, o Options) *Browser {
	t.Helper()
	bin := Path(t)
	proc.ReapOrphans()
	if o.Width == 0 {
		o.Width, o.Height = 1280, 900
	}
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	opts := append(flags(o),
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.Env(proc.OwnerEnv+"="+strconv.Itoa(os.Getpid())),
		chromedp.CombinedOutput(logFile),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &Browser{ctx: ctx, logPath: logFile.Name()}
	t.Cleanup(func() {
		// Close the browser gracefully, then make sure every process of it is gone.
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		done := make(chan struct{})
		go func() { _ = chromedp.Cancel(ctx); close(done) }()
		select {
		case <-done:
		case <-sctx.Done():
		}
		cancel()
		cancelAlloc()
		logFile.Close()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline on its life
		t.Fatalf("starting %s: %v\n%s", bin, err, b.Log())
	}
	return b
}

// Log is Chromium's own output (stderr), for failure messages.
func (b *Browser) Log() string {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return err.Error()
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// Process is the browser's main process (for tests of the harness itself).
func (b *Browser) Process() *os.Process {
	c := chromedp.FromContext(b.ctx)
	if c == nil || c.Browser == nil {
		return nil
	}
	return c.Browser.Process()
}
