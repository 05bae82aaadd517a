package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inferplane/inferplane/console/consoletest"
	"github.com/inferplane/inferplane/e2e/browser"
	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/proc"
	"github.com/inferplane/inferplane/e2e/toolbin"
)

// TestConsoleOnTheDemo uses the console as make demo serves it (hack/demo), with nothing of the
// console's own test doubles: the real api serve with its console, signed in at the real Dex as
// the demo customer with the password the demo printed, over a real kube-apiserver, the real
// gateway (xds serve) and its key check. The demo's TEST DOUBLES are those of what cannot run
// here: Envoy (a stand-in calling the gateway's key check and writing its access log), Argo
// CD's sync and KubeVirt's controllers (they follow the tenants' repositories the API commits,
// moving the VMIs through their phases), and the model servers (replica doubles). In the
// browser: a job created from the form, its badge moving to serving without a reload, a key
// minted, a chat answered and a file transcribed in the playground through the gateway with
// that key, the key's requests on the usage page, a replica restarted (its VM made again), the
// job deleted; each change a commit of the inputs in the customer's name.
func TestConsoleOnTheDemo(t *testing.T) {
	browser.Path(t) // skips (or fails under INFERPLANE_REQUIRE_BROWSER=1) before the builds
	dexBin := dex.Bin(t)
	kube, err := kubeenv.BinDir()
	if err != nil {
		if os.Getenv(kubeenv.EnvRequire) == "1" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: make demo needs kube-apiserver and etcd: %v", err)
	}
	w := startDemo(t, kube, filepath.Dir(dexBin))
	e := &env{dex: &dex.Dex{Issuer: w.issuer}, srv: &consoletest.Server{URL: w.url}, browser: browser.Start(t, browser.Options{})}
	p := e.page(t, w.user, browser.PageOptions{})
	p.WaitURL(w.url + "/t/acme/jobs")

	// The bundled jobs, synced by the demo's stand-ins as it starts.
	p.WaitFor(`document.querySelector("#job-transcribe .badge") && document.querySelector("#job-transcribe .badge").textContent === "serving"`)

	p.Navigate(w.url + "/t/acme/jobs/new")
	p.Do(chromedp.SendKeys(chromedp.ID("name"), "assist"), chromedp.SendKeys(chromedp.ID("model"), "Qwen/Qwen3-32B"))
	p.WaitFor(`document.querySelector("#gpuCount").value === "1"`)
	p.Do(chromedp.Click(chromedp.CSS(`button[value="create"]`)))
	p.WaitURL(w.url + "/t/acme/jobs/assist")

	p.Navigate(w.url + "/t/acme/jobs")
	browser.Eval[bool](p, `window.__sameDocument = true`)
	p.WaitFor(`document.querySelector("#job-assist .badge") && document.querySelector("#job-assist .badge").textContent === "serving"`)
	if !browser.Eval[bool](p, `window.__sameDocument === true`) {
		t.Error("the jobs page was reloaded to show the new job's stage")
	}
	check(t, p, t.TempDir(), "demo-jobs-serving")

	p.Navigate(w.url + "/t/acme/keys")
	p.Do(chromedp.SendKeys(chromedp.ID("key-name"), "playground"), chromedp.Click(chromedp.CSS(`form[action$="/keys"] button`)))
	p.WaitFor(`document.querySelector("#new-key")`)
	key := browser.Run(p, chromedp.Text(chromedp.ID("new-key")))
	if !strings.HasPrefix(key, "ipk_") {
		t.Fatalf("no key shown: %q", key)
	}
	p.Navigate(w.url + "/t/acme/keys")
	id := browser.Eval[string](p, `document.querySelector("tbody th code").textContent`)

	playground(t, p, w.url, key)

	// The key's requests, from the stand-in's access log through the gateway and the API.
	waitReloading(t, p, w.url+"/t/acme/usage", fmt.Sprintf(`document.body.innerText.includes(%s) && document.body.innerText.includes("assist")`, jsString(id)))

	restartReplica(t, p, w.url, "assist")

	p.Navigate(w.url + "/t/acme/jobs/assist/delete")
	p.Do(chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	p.WaitFor(`location.pathname === "/t/acme/jobs" && document.readyState === "complete"`)
	p.WaitFor(`!document.querySelector("#job-assist")`)

	log, err := exec.Command("git", "--git-dir", filepath.Join(w.dir, "inputs.git"), "log", "--format=%ae %s", "main").CombinedOutput()
	if err != nil {
		t.Fatalf("the inputs' history: %v: %s", err, log)
	}
	if n := strings.Count(string(log), w.user.Email+" "); n != 2 || !strings.Contains(string(log), "assist") {
		t.Errorf("expected the create and the delete of assist in the inputs, each in %s's name (%d are):\n%s", w.user.Email, n, log)
	}
}

// demoWorld is a running make demo: its folder, the console's address and its Dex's, and the
// demo customer with the password the demo printed.
type demoWorld struct {
	dir, url, issuer string
	user             dex.User
}

var (
	demoConsoleRE = regexp.MustCompile(`The web console is at (http://127\.0\.0\.1:\d+)/`)
	demoDexRE     = regexp.MustCompile(`(?m)^\s+Dex\s+(http://127\.0\.0\.1:\d+\S*)$`)
	demoUserRE    = regexp.MustCompile(`signs in at Dex as (\S+), password ([0-9a-f]+) `)
	demoPassRE    = regexp.MustCompile(`password [0-9a-f]+`)
)

// startDemo builds inferplane and the demo from this checkout and runs the demo, as make demo
// does, until the test ends (stopped as Ctrl-C would).
func startDemo(t *testing.T, kube, dexDir string) demoWorld {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, b := range [][2]string{{"inferplane", "./cmd/inferplane"}, {"demo", "./hack/demo"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, b[0]), b[1])
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b[1], err, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "demo")
	proc.ReapOrphans()
	p, err := proc.Start("demo", filepath.Join(bin, "demo"),
		[]string{"-dir", dir, "-inferplane", filepath.Join(bin, "inferplane"), "-recipes", filepath.Join(root, "recipes"), "-tenants", filepath.Join(root, "tenants")},
		[]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), kubeenv.EnvBinDir + "=" + kube, toolbin.EnvVar(dex.Tool) + "=" + dexDir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(2 * time.Minute)
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("the demo left %s behind", dir)
		}
	})
	deadline := time.Now().Add(10 * time.Minute) // the first start of a busy machine's API server is slow
	for {
		out := p.Tail(200)
		if strings.Contains(out, "demo: ready") {
			c, d, u := demoConsoleRE.FindStringSubmatch(out), demoDexRE.FindStringSubmatch(out), demoUserRE.FindStringSubmatch(out)
			if c == nil || d == nil || u == nil {
				t.Fatalf("the demo's ready message does not give the console's address, Dex's and the customer's sign-in:\n%s", demoPasswordRedacted(out))
			}
			return demoWorld{dir: dir, url: c[1], issuer: d[1], user: dex.User{Email: u[1], Password: u[2]}}
		}
		if done, err := p.Exited(); done || time.Now().After(deadline) {
			t.Fatalf("the demo was not ready (exited %v, %v):\n%s", done, err, demoPasswordRedacted(out))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// demoPasswordRedacted keeps the demo customer's password out of the test's log.
func demoPasswordRedacted(s string) string {
	return demoPassRE.ReplaceAllString(s, "password <redacted>")
}

// playground chats with the new job and transcribes a file with the bundled Parakeet job,
// through the demo's gateway with the key the console minted.
func playground(t *testing.T, p *browser.Page, base, key string) {
	t.Helper()
	p.Navigate(base + "/t/acme/playground")
	p.Do(chromedp.SetValue(chromedp.ID("pg-endpoint"), "assist"), chromedp.SendKeys(chromedp.ID("pg-key"), key),
		chromedp.SendKeys(chromedp.ID("pg-prompt"), "Say hello"), chromedp.Click(chromedp.CSS(`#pg-chat button`)))
	p.WaitFor(`/^Replica assist-r0-n0 heard: Say hello$/.test(document.querySelector("#pg-reply").textContent)`)
	check(t, p, t.TempDir(), "demo-playground")

	audio := filepath.Join(t.TempDir(), "hello.wav")
	if err := os.WriteFile(audio, wav(), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Do(chromedp.SetValue(chromedp.ID("pg-endpoint"), "transcribe"), chromedp.SetUploadFiles(chromedp.ID("pg-file"), []string{audio}),
		chromedp.Click(chromedp.CSS(`#pg-transcribe button`)))
	p.WaitFor(`document.querySelector("#pg-text").textContent.length > 0 || !document.querySelector("#pg-error").hidden`)
	if msg := browser.Eval[string](p, `document.querySelector("#pg-error").hidden ? "" : document.querySelector("#pg-error").textContent`); msg != "" {
		t.Errorf("the transcription was refused: %s", msg)
	}
}

// restartReplica restarts replica 0 from the job's page, after the confirmation, and waits for
// its VM to be made again on another node and to serve.
func restartReplica(t *testing.T, p *browser.Page, base, job string) {
	t.Helper()
	page := base + "/t/acme/jobs/" + job
	const node = `document.querySelector("#replica-0").closest("section").querySelector("tbody td").textContent`
	p.Navigate(page)
	before := browser.Eval[string](p, node)
	if !strings.HasPrefix(before, "demo-gpu-") {
		t.Fatalf("replica 0 of %s runs on no node: %q", job, before)
	}
	p.Do(chromedp.Click(chromedp.CSS(`a[href$="/jobs/` + job + `/restart?replica=0"]`)))
	p.WaitFor(`location.pathname.endsWith("/restart") && document.readyState === "complete"`)
	p.Do(chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	p.WaitFor(`location.pathname === ` + jsString("/t/acme/jobs/"+job) + ` && document.readyState === "complete"`)
	waitReloading(t, p, page, node+` !== `+jsString(before)+` && document.querySelector("#replica-0 .badge").textContent === "serving"`)
}

// waitReloading loads u until expr holds on it (a page that does not update itself), for up to
// browser.WaitTimeout.
func waitReloading(t *testing.T, p *browser.Page, u, expr string) {
	t.Helper()
	deadline := time.Now().Add(browser.WaitTimeout)
	for {
		p.Navigate(u)
		if browser.Eval[bool](p, `(() => { try { return document.readyState === "complete" && !!(`+expr+`) } catch (e) { return false } })()`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %s, still not %s; the page's text:\n%s", u, browser.WaitTimeout, expr, text(p))
		}
		time.Sleep(time.Second)
	}
}
