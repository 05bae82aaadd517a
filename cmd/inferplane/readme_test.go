package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/readmetest"
)

// apiKeyRE finds API keys, which are kept out of the test log.
var apiKeyRE = regexp.MustCompile(`ipk_[A-Za-z0-9_-]+`)

// TestREADMEWalkthrough runs README's walkthrough ("Try it: one job, from jobs create to chat")
// as a reader on a fresh machine would, from every shell block of that section of README.md
// (e2e/readmetest): in a copy of the checkout, each block through bash with only PATH and HOME
// in its environment, on 127.0.0.1 only. The first block builds inferplane, the second (make
// demo, left running as in a second terminal) starts the local clusters and gateway, the third
// puts inferplane on PATH, reads the demo's env file and runs the customer's commands, each of
// which must succeed; what each printed is checked here. The copy shares the checkout's .cache,
// where make test built kube-apiserver and etcd, as a reader's would after make test.
func TestREADMEWalkthrough(t *testing.T) {
	bins, err := kubeenv.BinDir()
	if err != nil {
		if os.Getenv(kubeenv.EnvRequire) == "1" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: make demo needs kube-apiserver and etcd: %v", err)
	}
	for _, tool := range []string{"bash", "make", "go", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("README's walkthrough needs %s on PATH: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	w := readmetest.Walk{
		README: "../../README.md", Test: t.Name(), Root: root, Cache: filepath.Dir(filepath.Dir(bins)),
		// Every shell block of the section: one added to it is run too.
		Section: "Try it: one job, from `jobs create` to `chat`",
		// make build, make demo (a second terminal), then the commands
		Hows:       []string{"run", "background", "run"},
		RunTimeout: 20 * time.Minute, // a cold machine compiles everything first
		// The demo writes its env file last: ready.
		Ready:        func(dir string) bool { _, err := os.Stat(filepath.Join(dir, ".demo", "env")); return err == nil },
		ReadyTimeout: 20 * time.Minute,
		Redact:       func(s string) string { return apiKeyRE.ReplaceAllString(s, "ipk_<redacted>") },
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
	checkWalkthrough(t, dir, blocks[2], outs[2])
}

// checkWalkthrough holds each command README runs to what it must print (readmetest.Check:
// a command README runs that this test does not know, or one it knows that README no longer
// runs, fails it).
func checkWalkthrough(t *testing.T, dir string, b readmetest.Block, out readmetest.Output) {
	readmetest.Check(t, b, out, commandOf, map[string]func(out string){
		"export PATH": func(string) {},
		".": func(out string) {
			for _, v := range []string{"KUBECONFIG", "INFERPLANE_SERVER", "INFERPLANE_GATEWAY", "INFERPLANE_DOMAIN", "INFERPLANE_KEYS_FILE", "INFERPLANE_KEYS_SECRET_FILE"} {
				assert.Contains(t, out, "export "+v+"=", "the demo's env file sets %s", v)
			}
			assert.NotRegexp(t, `=https?://[^1]`, out, "everything is on 127.0.0.1")
		},
		"jobs create": func(out string) {
			assert.Contains(t, out, "wrote tenants/acme/jobs/chat.yaml and committed out/acme")
		},
		"keys create": func(out string) {
			assert.Regexp(t, `Created key [0-9a-f]{16} for endpoint chat of acme`, out)
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
			assert.Contains(t, out, "acme/chat: chat-r1-n0: deleted the VMI")
		},
		"jobs delete": func(out string) {
			assert.Contains(t, out, "removed tenants/acme/jobs/chat.yaml and committed out/acme without the job")
			assert.Regexp(t, `revoked [0-9a-f]{16} \(tenant acme\)`, out)
		},
	})
	assert.NoFileExists(t, filepath.Join(dir, "tenants", "acme", "jobs", "chat.yaml"), "jobs delete removed the job")
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
