package setupscripts

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/proc"
)

// aptGetStandIn is apt-get for the scripts under test: nothing is downloaded or installed on
// this machine. "update" makes the package lists; "install" fails as the real one does on a
// fresh image (no lists), after an interrupted dpkg, or when the world says the mirror is down,
// and otherwise writes an executable named after each package into the world's usr/bin (on the
// scripts' PATH) and, as a package's post-install does through invoke-rc.d, asks policy-rc.d
// whether the package's service may start (started unless it exits 101), logging each start.
const aptGetStandIn = `#!/bin/bash
set -eu
s=$STANDIN_STATE
cmd="" pkgs=()
while (( $# > 0 )); do
  case $1 in
    -o) shift ;;
    -*) ;;
    *) if [[ -z $cmd ]]; then cmd=$1; else pkgs+=("$1"); fi ;;
  esac
  shift
done
echo "apt-get $cmd ${pkgs[*]}" >>"$s/calls"
case $cmd in
  update) touch "$s/lists"; echo "stand-in: package lists updated" ;;
  install)
    if [[ -e $s/dpkg-interrupted ]]; then
      echo "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem." >&2
      exit 100
    fi
    if [[ -e $s/apt-fails ]]; then echo "E: stand-in: the mirror cannot be reached" >&2; exit 100; fi
    if [[ ! -e $s/lists ]]; then echo "E: Unable to locate package ${pkgs[0]}" >&2; exit 100; fi
    if [[ -e $s/hold ]]; then
      touch "$s/entered"
      while [[ ! -e $s/release ]]; do sleep 0.05; done
    fi
    for p in "${pkgs[@]}"; do
      [[ -e $STANDIN_ROOT/usr/bin/$p ]] && continue
      echo "Setting up $p (stand-in) ..."
      printf '#!/bin/sh\nexit 0\n' >"$STANDIN_ROOT/usr/bin/$p"
      chmod 0755 "$STANDIN_ROOT/usr/bin/$p"
      echo "$p" >>"$s/installed"
      rc=0
      if [[ -x $INFERPLANE_POLICY_RC_D ]]; then "$INFERPLANE_POLICY_RC_D" "$p" start || rc=$?; fi
      if (( rc != 101 )); then echo "$p" >>"$s/services-started"; fi
    done
    ;;
  *) echo "stand-in apt-get: unexpected command $cmd" >&2; exit 64 ;;
esac
`

// dpkgStandIn is dpkg for the scripts under test: only "--configure -a", which finishes the
// install an earlier run left half-done.
const dpkgStandIn = `#!/bin/bash
set -eu
echo "dpkg $*" >>"$STANDIN_STATE/calls"
[[ "$*" == "--configure -a" ]] || { echo "stand-in dpkg: unexpected dpkg $*" >&2; exit 64; }
rm -f "$STANDIN_STATE/dpkg-interrupted"
`

// idStandIn is id for the scripts under test: "id -u" is the uid the world says.
const idStandIn = `#!/bin/bash
[[ "$*" == "-u" ]] || { echo "stand-in id: unexpected id $*" >&2; exit 64; }
cat "$STANDIN_STATE/uid"
`

// goStandIn is go for the build scripts under test: it reports a Go version and module
// versions, and "go build -o OUT" writes an executable OUT instead of compiling (or fails, when
// the world says that build fails), logging each build by the name of its output.
const goStandIn = `#!/bin/bash
set -eu
s=$STANDIN_STATE
case $1 in
  env) echo go1.26.8-standin ;;
  list) if [[ $4 == '{{.Dir}}' ]]; then echo "$s/module"; else echo v1.37.2-standin; fi ;;
  build)
    out="" prev=""
    for a in "$@"; do if [[ $prev == -o ]]; then out=$a; fi; prev=$a; done
    name=${out##*/}
    if [[ -e $s/build-fails-$name ]]; then echo "stand-in go: building $name failed" >&2; exit 1; fi
    if [[ -e $s/hold ]]; then
      touch "$s/entered"
      while [[ ! -e $s/release ]]; do sleep 0.05; done
    fi
    printf '#!/bin/sh\nexit 0\n' >"$out"
    chmod 0755 "$out"
    echo "$name" >>"$s/built"
    ;;
  *) echo "stand-in go: unexpected go $*" >&2; exit 64 ;;
esac
`

// The machine's tools the scripts and stand-ins may use: nothing that installs, builds or
// starts anything (those are the stand-ins), nor any program a script installs.
var worldTools = []string{
	"bash", "sh", "env", "flock", "mktemp", "chmod", "mv", "rm", "cp", "ln", "mkdir", "cat",
	"dirname", "sleep", "touch", "find", "sort", "xargs", "sha256sum", "cut", "awk", "tr", "sed",
}

// world is a stand-in machine for a set-up script: its own PATH (stand-ins first, then what
// the stand-in apt-get installs, then the tools), policy-rc.d, lock and cache, and the state
// the stand-ins read and log into.
type world struct {
	t                          *testing.T
	dir, state, policy, usrBin string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, state: filepath.Join(dir, "state"),
		policy: filepath.Join(dir, "sbin", "policy-rc.d"), usrBin: filepath.Join(dir, "usr", "bin")}
	for _, d := range []string{"standins", "tools", "sbin", "usr/bin", "state/module/manifests/crds", "cache"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	for name, text := range map[string]string{"apt-get": aptGetStandIn, "dpkg": dpkgStandIn, "id": idStandIn, "go": goStandIn} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "standins", name), []byte(text), 0o755))
	}
	for _, tool := range worldTools {
		p, err := exec.LookPath(tool)
		require.NoError(t, err, "the set-up scripts' tests need %s on PATH", tool)
		require.NoError(t, os.Symlink(p, filepath.Join(dir, "tools", tool)))
	}
	w.write("state/uid", "0\n")
	w.write("state/lists", "")
	w.write("state/module/manifests/crds/application-crd.yaml", "kind: CustomResourceDefinition\n")
	return w
}

// write writes a file of the world (a path relative to it), making its folder.
func (w *world) write(rel, text string) {
	w.t.Helper()
	p := filepath.Join(w.dir, rel)
	require.NoError(w.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(w.t, os.WriteFile(p, []byte(text), 0o755))
}

// lines are the lines of a state file (a log), none when it does not exist.
func (w *world) lines(name string) []string {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.state, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	require.NoError(w.t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func (w *world) env(extra ...string) []string {
	return append([]string{
		"PATH=" + strings.Join([]string{filepath.Join(w.dir, "standins"), w.usrBin, filepath.Join(w.dir, "tools")}, ":"),
		"HOME=" + w.dir, "LC_ALL=C", "TMPDIR=" + w.dir,
		"STANDIN_ROOT=" + w.dir, "STANDIN_STATE=" + w.state,
		"INFERPLANE_POLICY_RC_D=" + w.policy,
		"INFERPLANE_DEBPKG_LOCK=" + filepath.Join(w.dir, "debpkg.lock"),
		"INFERPLANE_CACHE=" + filepath.Join(w.dir, "cache"),
	}, extra...)
}

// run is one run of a script: started by start, ended by wait.
type run struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	cancel         context.CancelFunc
	waited         bool
}

// start starts a script of the repository's (hack/redis.sh) with args, in the world, in its own
// process group, which is killed if the run outlives the test's deadline.
func (w *world) start(script string, args []string, env ...string) *run {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	r := &run{cancel: cancel}
	r.cmd = exec.CommandContext(ctx, filepath.Join(repoRoot(), script), args...)
	r.cmd.Env = w.env(env...)
	r.cmd.Dir = w.dir
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.cmd.Cancel = func() error { return syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) }
	r.cmd.WaitDelay = 5 * time.Second
	require.NoError(w.t, r.cmd.Start())
	w.t.Cleanup(func() {
		if !r.waited { // a test that failed before waiting: no process of it outlives the test
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			_ = r.cmd.Wait()
		}
		cancel()
	})
	return r
}

// result is how a run ended.
type result struct {
	code           int
	stdout, stderr string
}

func (r *run) wait(t *testing.T) result {
	t.Helper()
	err := r.cmd.Wait()
	r.waited = true
	r.cancel()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return result{code: r.cmd.ProcessState.ExitCode(), stdout: r.stdout.String(), stderr: r.stderr.String()}
}

// runScript runs a script to its end.
func (w *world) runScript(script string, args []string, env ...string) result {
	w.t.Helper()
	return w.start(script, args, env...).wait(w.t)
}

// waitFor waits until cond holds, failing the test after a minute: the stand-ins only wait for
// the test, so a minute means a script is stuck.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitingOnLock says whether the run's script is blocked in `flock`: it has a child process of
// that name.
func (r *run) waitingOnLock() bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		f, ok := proc.StatFields(d)
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if ok && err == nil && len(f) > 1 && f[1] == strconv.Itoa(r.cmd.Process.Pid) && strings.TrimSpace(string(comm)) == "flock" {
			return true
		}
	}
	return false
}

// holdInstalls makes the stand-ins' installs and builds wait until release.
func (w *world) holdInstalls() (entered func() bool, release func()) {
	w.write("state/hold", "")
	entered = func() bool { _, err := os.Stat(filepath.Join(w.state, "entered")); return err == nil }
	release = func() { w.write("state/release", "") }
	return entered, release
}

// twoAtOnce runs the same script twice at once: the first holds inside its install (or build)
// until the second waits on the lock; both must end as one run would, and it returns both.
func (w *world) twoAtOnce(script string, args ...string) (first, second result) {
	w.t.Helper()
	entered, release := w.holdInstalls()
	a := w.start(script, args)
	waitFor(w.t, "the first run to reach its install", entered)
	b := w.start(script, args)
	waitFor(w.t, "the second run to wait on the lock", b.waitingOnLock)
	release()
	return a.wait(w.t), b.wait(w.t)
}

// fileState is what is at a path: nothing, a link and its target, or a file's mode and bytes.
type fileState struct {
	Exists  bool
	Link    string
	Mode    fs.FileMode
	Content string
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileState{}
	}
	require.NoError(t, err)
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		require.NoError(t, err)
		return fileState{Exists: true, Link: target}
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return fileState{Exists: true, Mode: fi.Mode(), Content: string(b)}
}

// names lists a folder.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
