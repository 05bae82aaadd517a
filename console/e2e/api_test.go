package e2e

import (
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/apibackend"
	"github.com/inferplane/inferplane/console/consoletest"
	"github.com/inferplane/inferplane/e2e/browser"
	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/usage"
)

// apiEnv is the console on the real product API (productapi, over the bundled examples in a
// bare inputs repository, each tenant pushing to a bare repository of its own), signed in
// through a real Dex, with API keys in a bbolt file and usage and health from the gateway's
// own aggregator (usage.Aggregator behind usage.Handler, the admin API of xds serve) fed with
// access-log entries the test writes (Envoy, which would write them, cannot run here).
type apiEnv struct {
	env
	inputs string // the inputs' bare repository
	agg    *usage.Aggregator
	store  string // the keys' bbolt file
}

// replicasUp is a TEST DOUBLE of the xDS server's probe view (which needs VMs running): every
// endpoint of acme has its one replica ready.
type replicasUp struct{}

func (replicasUp) EachReplicaCount(f func(tenant, job string, ready, total int)) {
	f("acme", "qwen3-32b", 2, 2)
}

func newAPIEnv(t *testing.T) *apiEnv {
	t.Helper()
	e := &apiEnv{env: env{log: &syncBuffer{}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e.dex = dex.Start(t, dex.Options{
		Clients: []dex.Client{{ID: clientID, Secret: "console-secret", RedirectURIs: []string{"http://" + addr + "/auth/callback"}}},
		Users:   []dex.User{dana, vic, gus, ops},
	})
	v, err := access.NewVerifier(access.VerifierConfig{Issuer: e.dex.Issuer, ClientID: clientID})
	if err != nil {
		t.Fatal(err)
	}

	// The gateway's admin API: the real aggregator and handler, on loopback.
	e.agg = usage.NewAggregator(usage.Options{Replicas: replicasUp{}})
	gw := httptest.NewServer(usage.Handler(e.agg))
	t.Cleanup(gw.Close)

	r := apitest.Remotes{Dir: t.TempDir()}
	url := apitest.BundledInputs(t, r)
	e.inputs = r.Path("inputs")
	e.store = filepath.Join(t.TempDir(), "keys.db")
	h, err := keys.NewHasher([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api := apitest.StartReplica(t, r, url, apibackend.Verifier(v), productapi.Options{
		Policy: access.Policy{AdminGroups: []string{consoletest.AdminGroup}}, Domain: "inference.test",
		Keys: keys.NewFileStore(e.store), Hasher: h, Gateways: []string{gw.URL}, Logger: log,
	})
	e.srv = startOn(t, addr, console.Options{
		Backend:     apibackend.New(api.Server.Handler()),
		OIDC:        &console.OIDC{Issuer: e.dex.Issuer, ClientID: clientID, ClientSecret: "console-secret", Verifier: v},
		ExternalURL: "http://" + addr, SessionKeys: [][]byte{consoletest.Key()}, LiveInterval: 300 * time.Millisecond,
		Logger: log,
	})
	e.browser = browser.Start(t, browser.Options{})
	return e
}

// TestConsoleOnProductAPI: the console reading and writing through the product API, in a real
// browser signed in through Dex: the bundled jobs listed, a create refused by the rules
// generate applies (the words beside the field), a create committed to the inputs repository,
// a key shown once and kept only hashed, its usage charted and the endpoints' health, and a
// viewer refused by the API itself.
func TestConsoleOnProductAPI(t *testing.T) {
	e := newAPIEnv(t)
	dir := shots(t)

	t.Run("the tenant's jobs, from the API", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.WaitURL(e.srv.URL + "/t/acme/jobs")
		got := text(p)
		for _, want := range []string{"qwen3-32b", "mistral-small", "transcribe", "Qwen/Qwen3-32B", "unknown", "without a host cluster"} {
			if !strings.Contains(got, want) {
				t.Errorf("the jobs page does not say %q:\n%s", want, got)
			}
		}
		check(t, p, dir, "api-jobs")
	})

	t.Run("a create refused by the rules shows them beside the field; then one is committed", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.AllowConsoleError("status of 422")
		p.Navigate(e.srv.URL + "/t/acme/jobs/new")
		p.Do(chromedp.SendKeys(chromedp.ID("name"), "forced"), chromedp.SendKeys(chromedp.ID("model"), "Qwen/Qwen3-32B"))
		p.WaitFor(`document.querySelector("#gpuCount").value === "1"`)
		browser.Eval[bool](p, `(() => { const g = document.querySelector("#gpuCount"); g.readOnly = false; g.value = "3"; return true })()`)
		p.Do(chromedp.Click(chromedp.CSS(`button[value="create"]`)))
		p.WaitFor(`document.querySelector("#gpuCount-errors li")`)
		msg := browser.Run(p, chromedp.Text(chromedp.CSS("#gpuCount-errors")))
		if !strings.Contains(msg, "spec.gpuCount") || !strings.Contains(msg, "tenants/acme/jobs/forced.yaml") {
			t.Errorf("the API's refusal of the GPU count is not beside the field: %q", msg)
		}
		// The API lists every recipe: the page is long, so the picture is of the window.
		p.ScreenshotViewport(filepath.Join(dir, "api-create-refused.png"))
		p.AssertAccessible("api-create-refused")
		p.AssertKeyboardReachable("api-create-refused")
		before := gitLog(t, e.inputs)

		p.Navigate(e.srv.URL + "/t/acme/jobs/new")
		p.Do(chromedp.SendKeys(chromedp.ID("name"), "summarize"), chromedp.SendKeys(chromedp.ID("model"), "Qwen/Qwen3-32B"))
		p.WaitFor(`document.querySelector("#gpuCount").value === "1"`)
		p.Do(chromedp.Click(chromedp.CSS(`button[value="create"]`)))
		p.WaitURL(e.srv.URL + "/t/acme/jobs/summarize")
		if got := text(p); !strings.Contains(got, "committed to the inputs") {
			t.Errorf("the new job's page:\n%s", got)
		}
		after := gitLog(t, e.inputs)
		if len(after) != len(before)+1 || !strings.Contains(after[0], "summarize") {
			t.Errorf("expected one commit of summarize in the inputs, got:\n%s", strings.Join(after, "\n"))
		}
		p.Navigate(e.srv.URL + "/t/acme/jobs")
		p.WaitFor(`!!document.querySelector("#job-summarize")`)
	})

	t.Run("a key shown once, kept hashed, its usage charted, the endpoints' health", func(t *testing.T) {
		p := e.page(t, dana, browser.PageOptions{})
		p.Navigate(e.srv.URL + "/t/acme/keys")
		p.Do(chromedp.SendKeys(chromedp.ID("key-name"), "ci pipeline"), chromedp.Click(chromedp.CSS(`form[action$="/keys"] button`)))
		p.WaitFor(`document.querySelector("#new-key")`)
		minted := browser.Run(p, chromedp.Text(chromedp.ID("new-key")))
		if !strings.HasPrefix(minted, "ipk_") {
			t.Fatalf("no key shown: %q", minted)
		}
		check(t, p, dir, "api-keys-created")
		db, err := os.ReadFile(e.store)
		if err != nil || strings.Contains(string(db), minted) || strings.Contains(string(db), hex.EncodeToString([]byte(minted))) {
			t.Errorf("the key store holds the key itself (or cannot be read: %v)", err)
		}
		p.Navigate(e.srv.URL + "/t/acme/keys")
		got := text(p)
		if strings.Contains(got, minted) || !strings.Contains(got, "ci pipeline") {
			t.Errorf("after a reload the key must be listed by name, never shown:\n%s", got)
		}
		id := browser.Eval[string](p, `document.querySelector("tbody th code").textContent`)

		// Traffic as the gateway's access log reports it: two hours of the key on qwen3-32b.
		now := time.Now()
		for i, tok := range []int64{120, 300} {
			e.agg.Add(usage.Entry{Done: now.Add(-time.Duration(1-i) * time.Hour), Tenant: "acme", Job: "qwen3-32b", KeyID: id,
				Code: 200, Latency: 800 * time.Millisecond, HasUsage: true, TokensIn: tok, TokensOut: 2 * tok})
		}
		p.Navigate(e.srv.URL + "/t/acme/usage")
		p.WaitFor(`document.querySelectorAll(".uplot").length >= 2`)
		got = text(p)
		for _, want := range []string{"qwen3-32b", "healthy", id} {
			if !strings.Contains(got, want) {
				t.Errorf("the usage page does not say %q:\n%s", want, got)
			}
		}
		check(t, p, dir, "api-usage")
		p.Navigate(e.srv.URL + "/t/acme/keys")
		lastUsed := browser.Eval[string](p, `document.querySelector("tbody tr td:nth-of-type(6)").textContent`)
		if want := now.UTC().Truncate(time.Hour).Format("2006-01-02 15:04 UTC"); lastUsed != want {
			t.Errorf("the key's last use: %q, want the last hour with traffic, %q", lastUsed, want)
		}
	})

	t.Run("a viewer sees no create button, and the API refuses a forced create", func(t *testing.T) {
		p := e.page(t, vic, browser.PageOptions{})
		p.AllowConsoleError("status of 403")
		p.WaitURL(e.srv.URL + "/t/acme/jobs")
		if browser.Eval[bool](p, `!!document.querySelector('a[href$="/jobs/new"]')`) {
			t.Error("a viewer sees the create button")
		}
		csrf := browser.Eval[string](p, `document.querySelector('meta[name="csrf-token"]').content`)
		status := browser.Eval[float64](p, `fetch("/t/acme/jobs", {method: "POST", headers: {"X-CSRF-Token": `+jsString(csrf)+`,
			"Content-Type": "application/x-www-form-urlencoded"}, body: "name=sneaky&model=Qwen%2FQwen3-32B&gpuCount=1&replicas=1&intent=create"}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("a viewer's forced create: %v, want 403", status)
		}
		if log := gitLog(t, e.inputs); strings.Contains(strings.Join(log, "\n"), "sneaky") {
			t.Error("the viewer's job was committed")
		}
	})
}

// gitLog is the inputs repository's commit subjects, newest first.
func gitLog(t *testing.T, repo string) []string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", repo, "log", "--format=%s", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
