package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/readmetest"
)

// apiKeyRE finds API keys, which are kept out of the test log.
var apiKeyRE = regexp.MustCompile(`ipk_[A-Za-z0-9_-]+`)

// TestREADMEWalkthrough runs README's walkthrough ("Try it: a customer's job, from login to
// chat") as a reader on a fresh machine would, from every shell block of that section of
// README.md (e2e/readmetest): in a copy of the checkout, each block through bash with only PATH
// and HOME in its environment, on 127.0.0.1 only. The first block builds inferplane, the second
// (make demo, left running as in a second terminal) starts the product API, Dex, the local
// clusters and gateway, the third is the customer's: it signs in (the test, reading the sign-in
// address login printed, fills in Dex's form with the email and password the demo's terminal
// shows, as the reader does in the browser), then runs the customer's commands through the
// API, each of which must succeed; what each printed is checked here, and that no operator file
// was written. The copy shares the checkout's .cache, where make test built kube-apiserver,
// etcd and Dex, as a reader's would after make test.
func TestREADMEWalkthrough(t *testing.T) {
	bins, err := kubeenv.BinDir()
	if err != nil {
		if os.Getenv(kubeenv.EnvRequire) == "1" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: make demo needs kube-apiserver and etcd: %v", err)
	}
	dex.Bin(t) // skips (or fails under INFERPLANE_REQUIRE_DEX=1) without a Dex build
	for _, tool := range []string{"bash", "make", "go", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("README's walkthrough needs %s on PATH: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	reader := &signInReader{t: t}
	w := readmetest.Walk{
		README: "../../README.md", Test: t.Name(), Root: root, Cache: filepath.Dir(filepath.Dir(bins)),
		// Every shell block of the section: one added to it is run too.
		Section: "Try it: a customer's job, from `login` to `chat`",
		// make build, make demo (a second terminal), then the commands
		Hows:       []string{"run", "background", "run"},
		RunTimeout: 20 * time.Minute, // a cold machine compiles everything first
		// The demo writes the customer's env file last: ready.
		Ready: func(dir string) bool {
			_, err := os.Stat(filepath.Join(dir, ".demo", "customer.env"))
			return err == nil
		},
		ReadyTimeout: 20 * time.Minute,
		Redact: func(s string) string {
			return demoPasswordRE.ReplaceAllString(apiKeyRE.ReplaceAllString(s, "ipk_<redacted>"), "password <redacted>")
		},
		OnLine: reader.onLine,
	}
	// Registered before Walk's clean-ups, which stop the demo, so it runs after them.
	var dir string
	t.Cleanup(func() {
		if dir != "" {
			assert.NoDirExists(t, filepath.Join(dir, ".demo"), "the demo removes its folder when it stops")
		}
	})
	dir, blocks, outs := w.Run(t)
	require.FileExists(t, filepath.Join(dir, "bin", "inferplane"))
	require.NoError(t, reader.wait(), "signing in at Dex as the reader")
	checkWalkthrough(t, dir, blocks[2], outs[2])
	// The customer wrote no operator file: the jobs went to the API's inputs repository.
	assert.NoFileExists(t, filepath.Join(dir, "tenants", "acme", "jobs", "chat.yaml"))
	assert.NoDirExists(t, filepath.Join(dir, "out"))
	log, err := exec.Command("git", "--git-dir", filepath.Join(dir, ".demo", "inputs.git"), "log", "--format=%ae %s").CombinedOutput()
	require.NoError(t, err, "%s", log)
	assert.Contains(t, string(log), "dana@acme.example", "the API commits as the signed-in customer:\n%s", log)
}

// demoPasswordRE finds the demo user's password in the demo's output.
var demoPasswordRE = regexp.MustCompile(`password ([0-9a-f]+)`)

// signInReader is the reader at the browser: when login prints Dex's sign-in address, it signs
// in there with the email and password the demo printed.
type signInReader struct {
	t    *testing.T
	mu   sync.Mutex
	done chan error
}

var (
	authURLRE  = regexp.MustCompile(`http://127\.0\.0\.1:\d+/auth\?\S+`)
	demoUserRE = regexp.MustCompile(`signs in at Dex as (\S+), password ([0-9a-f]+) `)
)

func (r *signInReader) onLine(line string, before []readmetest.Output) {
	u := authURLRE.FindString(line)
	if u == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return // the address is printed once per login; a second sign-in is not the walkthrough's
	}
	r.done = make(chan error, 1)
	var m []string
	for _, o := range before {
		if m = demoUserRE.FindStringSubmatch(string(o)); m != nil {
			break
		}
	}
	if m == nil {
		r.done <- errors.New("login printed a sign-in address, but the demo's terminal shows no user and password")
		return
	}
	parsed, err := url.Parse(u)
	if err != nil {
		r.done <- err
		return
	}
	idp := &dex.Dex{Issuer: parsed.Scheme + "://" + parsed.Host}
	go func() {
		status, err := idp.Browse(context.Background(), u, dex.PasswordLogin{Email: m[1], Password: m[2]})
		if err == nil && status != 200 {
			err = fmt.Errorf("the CLI's sign-in page answered %d", status)
		}
		r.done <- err
	}()
}

// wait is the sign-in's outcome.
func (r *signInReader) wait() error {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done == nil {
		return errors.New("login never printed a sign-in address")
	}
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		return errors.New("signing in did not finish within a minute")
	}
}

// checkWalkthrough holds each command README runs to what it must print (readmetest.Check:
// a command README runs that this test does not know, or one it knows that README no longer
// runs, fails it).
func checkWalkthrough(t *testing.T, dir string, b readmetest.Block, out readmetest.Output) {
	readmetest.Check(t, b, out, commandOf, map[string]func(out string){
		"export PATH": func(string) {},
		".": func(out string) {
			for _, v := range []string{"INFERPLANE_API", "INFERPLANE_GATEWAY", "INFERPLANE_CONFIG_DIR"} {
				assert.Contains(t, out, "export "+v+"=", "the customer's env file sets %s", v)
			}
			for _, v := range []string{"KUBECONFIG", "INFERPLANE_SERVER", "INFERPLANE_KEYS_FILE", "INFERPLANE_KEYS_SECRET_FILE", "INFERPLANE_DOMAIN"} {
				assert.NotContains(t, out, v+"=", "the customer has no operator variable")
			}
			assert.NotRegexp(t, `=https?://[^1]`, out, "everything is on 127.0.0.1")
		},
		"login": func(out string) {
			assert.Regexp(t, `Signed in to http://127\.0\.0\.1:\d+ as dana@acme\.example`, out)
			assert.Contains(t, out, "Tenants: acme (developer)")
		},
		"models": func(out string) {
			assert.Regexp(t, `(?m)^Qwen/Qwen3-32B$`, out)
		},
		"jobs create": func(out string) {
			assert.Contains(t, out, "created acme/chat: Qwen/Qwen3-32B, 2 replica(s) x 1 GPU of metal3.gpu-h100; inputs commit ")
		},
		"keys create": func(out string) {
			assert.Regexp(t, `key [0-9a-f]{16} for endpoint chat of acme, never expires; written to \.demo/acme-chat\.key \(mode 0600\)`, out)
			assert.NotContains(t, out, "ipk_", "the key is shown nowhere but in its file")
			st, err := os.Stat(filepath.Join(dir, ".demo", "acme-chat.key"))
			if assert.NoError(t, err) {
				assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
			}
		},
		"jobs detail": func(out string) {
			for _, want := range []string{"acme/chat: syncing: ", "Stage:      serving since ", "Endpoint:   https://chat.acme.models.example.com (API key required)",
				"Gateway:    healthy, 2 of 2 replicas in rotation"} {
				assert.Contains(t, out, want)
			}
			assert.Regexp(t, `1\s+serving\s+\S+\s+1\s+demo-gpu-\d+\s+Running\s+127\.0\.0\.1\s+in the gateway's rotation`, out)
		},
		"chat": func(out string) {
			assert.Regexp(t, `(?m)^Replica chat-r[01]-n0 heard: Write a haiku about GPUs$`, out)
		},
		"jobs restart": func(out string) {
			assert.Contains(t, out, "restarted acme/chat: VM chat-r1-n0 (deleted the VMI)")
		},
		"jobs delete": func(out string) {
			assert.Contains(t, out, "deleted acme/chat; inputs commit ")
			assert.Regexp(t, `revoked key [0-9a-f]{16} of acme`, out)
		},
		"logout": func(out string) {
			assert.Regexp(t, `Signed out of context "127\.0\.0\.1:\d+"`, out)
		},
	})
}

// commandOf names a command line: "jobs create", "chat", "export PATH", ".".
func commandOf(line string) string {
	f := strings.Fields(line)
	switch {
	case len(f) == 0:
		return ""
	case f[0] == "export" && len(f) > 1:
		name, _, _ := strings.Cut(f[1], "=")
		return "export " + name
	case f[0] != "inferplane" || len(f) < 2:
		return f[0]
	case (f[1] == "jobs" || f[1] == "keys") && len(f) > 2:
		return f[1] + " " + f[2]
	}
	return f[1]
}
