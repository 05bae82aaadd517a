package e2e

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inferplane/inferplane/e2e/browser"
	"github.com/inferplane/inferplane/e2e/proc"
)

// TestConsoleDemo runs the README's command for the console (make console, which runs
// hack/console-demo.sh) as a reader would, and uses it in the browser: the development
// sign-in, the bundled jobs of acme, a job created from the form, a key minted. Then it stops
// the command as Ctrl-C would and checks that its temporary folder is gone.
func TestConsoleDemo(t *testing.T) {
	browser.Path(t) // skips (or fails under INFERPLANE_REQUIRE_BROWSER=1) before the build
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tmp := t.TempDir()
	proc.ReapOrphans()
	p, err := proc.Start("console-demo", filepath.Join(root, "hack", "console-demo.sh"), nil,
		append(os.Environ(), "CONSOLE_LISTEN="+addr, "TMPDIR="+tmp), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(20 * time.Second) })
	base := "http://" + addr
	// go run builds the binary first: on a busy machine (another `make test` building beside
	// this one) that takes minutes.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ok, _ := p.Exited(); ok || time.Now().After(deadline) {
			t.Fatalf("the console did not come up at %s:\n%s", base, p.Tail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}

	b := browser.Start(t, browser.Options{})
	pg := b.NewPage(t, browser.PageOptions{})
	devSignIn(pg, base, "dana@acme.example", "acme-ml", "/t/acme/jobs")
	if got := text(pg); !strings.Contains(got, "qwen3-32b") || !strings.Contains(got, "transcribe") {
		t.Errorf("the demo's jobs page does not list the bundled acme jobs:\n%s", got)
	}
	check(t, pg, shots(t), "demo-jobs")

	pg.Navigate(base + "/t/acme/jobs/new")
	pg.Do(chromedp.SendKeys(chromedp.ID("name"), "demo"), chromedp.SendKeys(chromedp.ID("model"), "Qwen/Qwen3-32B"))
	pg.WaitFor(`document.querySelector("#gpuCount").value === "1"`)
	pg.Do(chromedp.Click(chromedp.CSS(`button[value="create"]`)))
	pg.WaitURL(base + "/t/acme/jobs/demo")

	pg.Navigate(base + "/t/acme/keys")
	pg.Do(chromedp.SendKeys(chromedp.ID("key-name"), "laptop"), chromedp.Click(chromedp.CSS(`form[action$="/keys"] button`)))
	pg.WaitFor(`document.querySelector("#new-key")`)
	if k := browser.Run(pg, chromedp.Text(chromedp.ID("new-key"))); !strings.HasPrefix(k, "ipk_") {
		t.Errorf("no key shown: %q", k)
	}
	pg.Navigate(base + "/t/acme/usage")
	if got := text(pg); !strings.Contains(got, "knows no gateway") {
		t.Errorf("the usage page does not say why there is no usage:\n%s", got)
	}

	p.Stop(20 * time.Second)
	left, _ := filepath.Glob(filepath.Join(tmp, "inferplane-console.*"))
	if len(left) > 0 {
		t.Errorf("the demo left %v behind", left)
	}
}
