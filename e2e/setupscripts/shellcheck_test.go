package setupscripts

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// shellcheck finds Debian's shellcheck through hack/debpkg.sh, which installs it when missing
// (as root); where it cannot, the test is skipped, saying why, unless
// INFERPLANE_REQUIRE_SHELLCHECK=1 (make test sets it), which fails it instead.
func shellcheck(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot(), "hack", "debpkg.sh"), "shellcheck", "shellcheck").Output()
	if err != nil {
		msg := fmt.Sprintf("no shellcheck: hack/debpkg.sh shellcheck shellcheck: %v", err)
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			msg += ": " + strings.TrimSpace(string(exit.Stderr))
		}
		if os.Getenv("INFERPLANE_REQUIRE_SHELLCHECK") == "1" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED: " + msg)
	}
	return strings.TrimSpace(string(out))
}

var shebangRE = regexp.MustCompile(`^#!\s*(/usr/bin/env\s+)?(/usr)?(/bin/)?(ba|da)?sh\b`)

// projectScripts are the shell scripts of the repository, relative to its root: every *.sh
// and every file that starts with a shell's #! line, outside git's, the caches', the build
// outputs' and the tests' data folders.
func projectScripts(t *testing.T) []string {
	t.Helper()
	root := repoRoot()
	skip := map[string]bool{".git": true, ".cache": true, ".demo": true, "out": true, "bin": true, "node_modules": true, "testdata": true}
	var scripts []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		head, err := readHead(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".sh") || shebangRE.Match(head) {
			rel, _ := filepath.Rel(root, path)
			scripts = append(scripts, rel)
		}
		return nil
	})
	require.NoError(t, err)
	for _, want := range []string{"hack/debpkg.sh", "hack/redis.sh", "hack/testbins.sh", ".ci/run"} {
		require.Contains(t, scripts, want, "the search for scripts misses one")
	}
	return scripts
}

func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 64)
	n, _ := f.Read(head)
	return head[:n], nil
}

// generatedScripts are the scripts the generator ships inside the VMs' cloud-init (the model
// server's launcher), as rendered for the bundled examples (generator/testdata/golden, which
// the generator's tests keep equal to what it renders), written out to dir.
func generatedScripts(t *testing.T, dir string) []string {
	t.Helper()
	secrets, err := filepath.Glob(filepath.Join(repoRoot(), "generator", "testdata", "golden", "*", "jobs", "*", "*cloud-init.yaml"))
	require.NoError(t, err)
	var scripts []string
	for _, p := range secrets {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		var secret struct {
			StringData struct{ Userdata string } `json:"stringData"`
		}
		require.NoError(t, yaml.Unmarshal(b, &secret), p)
		var cloudConfig struct {
			WriteFiles []struct{ Path, Content string } `json:"write_files"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(secret.StringData.Userdata), &cloudConfig), p)
		for _, f := range cloudConfig.WriteFiles {
			if !shebangRE.MatchString(f.Content) {
				continue
			}
			rel, _ := filepath.Rel(repoRoot(), p)
			out := filepath.Join(dir, strings.ReplaceAll(strings.TrimSuffix(rel, ".yaml"), "/", "_")+strings.ReplaceAll(f.Path, "/", "_"))
			require.NoError(t, os.WriteFile(out, []byte(f.Content), 0o644))
			scripts = append(scripts, out)
		}
	}
	require.NotEmpty(t, scripts, "the bundled examples' cloud-init ships no script: the search is wrong")
	return scripts
}

// shellcheck (its default checks) finds nothing in any shell script the project ships: hack/'s
// set-up scripts, CI's, and the launchers the generator writes into the VMs.
func TestShellcheck(t *testing.T) {
	sc := shellcheck(t)
	scripts := append(projectScripts(t), generatedScripts(t, t.TempDir())...)
	cmd := exec.Command(sc, append([]string{"--norc", "--format=gcc"}, scripts...)...)
	cmd.Dir = repoRoot()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	assert.NoError(t, cmd.Run(), "shellcheck on %d scripts:\n%s", len(scripts), out.String())
}

var (
	setERE  = regexp.MustCompile(`(?m)^\s*set\s+-[a-z]*e`)
	trapRE  = regexp.MustCompile(`(?m)^\s*trap\s+('[^']*'|"[^"]*"|\S+)((?:\s+[A-Z0-9]+)+)\s*(?:#.*)?$`)
	funcsRE = regexp.MustCompile(`(?m)^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\)\s*\{`)
)

// exitTrapFaults are the EXIT traps of a set -e script that can fail. Under set -e a failing
// command in an EXIT trap makes the script exit with its status, whatever the script's own:
// hack/redis.sh's `cleanup() { [[ -n $made_policy ]] && rm -f "$policy"; }` made the first
// `make test` on a new machine exit 1. A trap passes when its command ends with `|| true`, or
// it names a function whose last command is `return 0`.
func exitTrapFaults(script string) []string {
	if !setERE.MatchString(script) {
		return nil
	}
	var faults []string
	for _, m := range trapRE.FindAllStringSubmatch(script, -1) {
		handler, signals := m[1], strings.Fields(m[2])
		if handler == "-" || !(contains(signals, "EXIT") || contains(signals, "0")) {
			continue
		}
		last := handler
		if q := handler[0]; q == '\'' || q == '"' {
			last = lastCommand(handler[1 : len(handler)-1])
		} else if body, ok := functionBody(script, handler); ok {
			last = lastCommand(body)
		}
		if !strings.HasSuffix(last, "|| true") && last != "return 0" {
			faults = append(faults, fmt.Sprintf("the EXIT trap %s can fail: its last command is `%s`", handler, last))
		}
	}
	return faults
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// functionBody is the text between the braces of the shell function name: a one-liner, or the
// lines down to the first `}` alone on a line.
func functionBody(script, name string) (string, bool) {
	for _, loc := range funcsRE.FindAllStringSubmatchIndex(script, -1) {
		if script[loc[2]:loc[3]] != name {
			continue
		}
		rest := script[loc[1]:]
		if line, _, _ := strings.Cut(rest, "\n"); strings.HasSuffix(strings.TrimSpace(line), "}") {
			return strings.TrimSuffix(strings.TrimSpace(line), "}"), true
		}
		if i := strings.Index(rest, "\n}"); i >= 0 {
			return rest[:i], true
		}
	}
	return "", false
}

// lastCommand is the last command of a piece of shell, by lines and semicolons (comments
// dropped): enough for the short bodies of traps.
func lastCommand(body string) string {
	last := ""
	for _, line := range strings.Split(body, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		for _, c := range strings.Split(line, ";") {
			if c = strings.TrimSpace(c); c != "" && !strings.HasPrefix(c, "#") {
				last = c
			}
		}
	}
	return last
}

// No EXIT trap of a set -e script the project ships can fail.
func TestExitTrapsCannotFail(t *testing.T) {
	for _, rel := range projectScripts(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot(), rel))
		require.NoError(t, err)
		assert.Empty(t, exitTrapFaults(string(b)), rel)
	}
}

// The check finds the trap that failed the first make test on a new machine, and passes the
// forms that cannot fail.
func TestExitTrapFaults(t *testing.T) {
	const setE = "#!/usr/bin/env bash\nset -euo pipefail\n"
	cases := []struct {
		name, script string
		faults       int
	}{
		{"hack/redis.sh before the fix", setE + "made_policy=\"\"\ncleanup() { [[ -n $made_policy ]] && rm -f \"$policy\"; }\ntrap cleanup EXIT\n", 1},
		{"a command that can fail", setE + "trap 'rm -rf \"$tmp\"' EXIT\n", 1},
		{"a function that can fail", setE + "on_exit() {\n  rm -f \"$a\"\n}\ntrap on_exit INT EXIT\n", 1},
		{"|| true", setE + "trap 'rm -rf \"$tmp\" || true' EXIT # a comment\n", 0},
		{"return 0", setE + "on_exit() {\n  put_back || echo failed >&2\n  return 0\n}\ntrap on_exit EXIT\n", 0},
		{"cleared", setE + "trap - EXIT\n", 0},
		{"not an EXIT trap", setE + "trap 'exit 130' INT TERM\n", 0},
		{"no set -e", "#!/bin/sh\ntrap 'rm -f \"$x\"' EXIT\n", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Len(t, exitTrapFaults(c.script), c.faults, "%q", exitTrapFaults(c.script))
		})
	}
}
