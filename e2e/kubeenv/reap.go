package kubeenv

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inferplane/inferplane/e2e/proc"
)

// processMarker starts the name of the folder every API server and etcd the harness starts
// keeps its certificates and data in; it is on their command lines (--cert-dir, --data-dir).
const processMarker = "inferplane-kubeenv-"

// reapOrphans kills the kube-apiserver and etcd processes that the harness started (from dir,
// with processMarker on their command line) and whose test binary is gone. envtest starts them
// in their own process group, so when a test binary dies without running its deferred Stop (a
// panic, `go test -timeout`, a kill), they live on, re-parented to init, holding ports and CPU.
// Servers of test binaries still running keep their parent and are left alone, and so is any
// server the harness did not start (a developer's own API server, even from the same binaries).
func reapOrphans(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		exe, err := os.Readlink(filepath.Join(p, "exe"))
		if err != nil || filepath.Dir(exe) != dir || !startedByHarness(p) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || parentAlive(p) {
			continue
		}
		fmt.Fprintf(os.Stderr, "kubeenv: killing orphaned %s (pid %d) left by an earlier test run\n", filepath.Base(exe), pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// startedByHarness reports whether the process at procDir has the harness's marker in a
// folder argument of its command line.
func startedByHarness(procDir string) bool {
	cmdline, err := os.ReadFile(filepath.Join(procDir, "cmdline"))
	if err != nil {
		return false
	}
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		_, value, _ := strings.Cut(arg, "=")
		if strings.HasPrefix(filepath.Base(filepath.Dir(value)), processMarker) {
			return true
		}
	}
	return false
}

// parentAlive reports whether the process at procDir still has the parent that started it:
// a parent of 1 (or a parent that is not a Go test binary) means it was re-parented.
func parentAlive(procDir string) bool {
	fields, ok := proc.StatFields(procDir)
	if !ok || len(fields) < 2 {
		return true // cannot tell: leave it alone
	}
	ppid := fields[1]
	if ppid == "1" {
		return false
	}
	parent, err := os.Readlink(filepath.Join("/proc", ppid, "exe"))
	if err != nil {
		return false
	}
	return strings.HasSuffix(parent, ".test")
}

// stopBeforeTimeout arms a timer that stops env shortly before `go test -timeout` would kill
// the binary: the testing package's timeout panics in its own goroutine and runs no deferred
// calls, which would leave the servers running.
func stopBeforeTimeout(env *Env) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	d, ok := f.Value.(flag.Getter).Get().(time.Duration)
	if !ok || d <= 0 {
		return
	}
	margin := 15 * time.Second
	if d < 2*margin {
		margin = d / 2
	}
	time.AfterFunc(d-margin, func() {
		fmt.Fprintln(os.Stderr, "kubeenv: test timeout is near: stopping kube-apiserver and etcd")
		_ = env.Stop()
	})
}

// childWithArg finds the process this one started from the binary at path with arg on its
// command line.
func childWithArg(path, arg string) (int, bool) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		if exe, err := os.Readlink(filepath.Join(p, "exe")); err != nil || exe != path {
			continue
		}
		fields, ok := proc.StatFields(p)
		if !ok || len(fields) < 2 || fields[1] != self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		return pid, err == nil
	}
	return 0, false
}
