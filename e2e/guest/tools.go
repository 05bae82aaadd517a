package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

// EnvRequire, when "1", turns a missing tool into a test failure instead of a skip.
const EnvRequire = "INFERPLANE_REQUIRE_GUEST"

var (
	toolsMu sync.Mutex
	found   = map[string]string{}
)

// Tools returns the paths of the commands of hack/guesttools.sh's groups (check, vm, image) by
// name, installing the missing ones; it skips the test when that fails (fails it under
// INFERPLANE_REQUIRE_GUEST=1).
func Tools(t testing.TB, groups ...string) map[string]string {
	t.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(kubeenv.RepoRoot(), "hack", "guesttools.sh"), groups...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := fmt.Sprintf("hack/guesttools.sh %s: %v: %s", strings.Join(groups, " "), err, strings.TrimSpace(stderr.String()))
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but the guest's tools are missing: %s", EnvRequire, msg)
		}
		t.Skipf("SKIPPED: %s", msg)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p != "" {
			found[filepath.Base(p)] = p
		}
	}
	m := map[string]string{}
	for k, v := range found {
		m[k] = v
	}
	return m
}

// DebianPython is the interpreter Debian's cloud-init package runs on (its modules live in
// Debian's dist-packages, not in any other Python on PATH).
const DebianPython = "/usr/bin/python3"

// DebianRoot unpacks the given Debian packages (the archive's current versions, downloaded once
// into $INFERPLANE_CACHE/guest/debs with apt-get) into a new folder, a root for checks that
// need the guest's files (systemd's units, Docker's): the same packages the guest image
// installs. It skips the test when they cannot be had (fails it under INFERPLANE_REQUIRE_GUEST=1).
func DebianRoot(t testing.TB, pkgs ...string) string {
	t.Helper()
	fail := func(err error) {
		t.Helper()
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but Debian's %s cannot be unpacked: %v", EnvRequire, strings.Join(pkgs, " "), err)
		}
		t.Skipf("SKIPPED: Debian's %s cannot be unpacked: %v", strings.Join(pkgs, " "), err)
	}
	debs := filepath.Join(CacheDir(), "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		fail(err)
	}
	toolsMu.Lock()
	defer toolsMu.Unlock()
	dl := exec.Command("apt-get", append([]string{"download", "-q"}, pkgs...)...)
	dl.Dir = debs
	if out, err := dl.CombinedOutput(); err != nil {
		fail(fmt.Errorf("apt-get download: %v: %s", err, out))
	}
	root := t.TempDir()
	for _, p := range pkgs {
		out, err := exec.Command("apt-cache", "show", "--no-all-versions", p).Output()
		if err != nil {
			fail(fmt.Errorf("apt-cache show %s: %v", p, err))
		}
		var version string
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "Version: "); ok {
				version = strings.ReplaceAll(v, ":", "%3a")
			}
		}
		m, _ := filepath.Glob(filepath.Join(debs, p+"_"+version+"_*.deb"))
		if version == "" || len(m) != 1 {
			fail(fmt.Errorf("no single %s_%s_*.deb in %s after apt-get download", p, version, debs))
		}
		if out, err := exec.Command("dpkg-deb", "-x", m[0], root).CombinedOutput(); err != nil {
			fail(fmt.Errorf("dpkg-deb -x %s: %v: %s", m[0], err, out))
		}
	}
	return root
}

// CacheDir is where the guest's builds and downloads are kept: $INFERPLANE_CACHE/guest (the
// cache of the other test binaries), default <repo>/.cache/guest.
func CacheDir() string {
	c := os.Getenv("INFERPLANE_CACHE")
	if c == "" {
		c = filepath.Join(kubeenv.RepoRoot(), ".cache")
	}
	return filepath.Join(c, "guest")
}
