// Package proc runs the processes of the e2e harnesses (Argo CD's, Dex): each in its own
// process group, logging to a file, marked with the pid of the test binary that started it and
// killed by the kernel when that binary dies; ReapOrphans kills what a crashed run left behind,
// and hack/check-strays.sh finds any left running after the tests.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inferplane/inferplane/internal/spawn"
)

// OwnerEnv marks every process the harness starts with the pid of the test binary that started
// it. A later run kills the marked processes whose owner is gone (reapOrphans) and leaves those
// of test binaries still running alone; hack/check-strays.sh looks for the mark too.
const OwnerEnv = "INFERPLANE_E2E_OWNER"

// Process is a child process with its output in a log file.
type Process struct {
	Name, LogPath string
	cmd           *exec.Cmd
	done          chan struct{}
	err           error // set before done is closed
}

// Start starts bin with args and env (added to a clean base: no inherited variables but
// PATH), logging to logDir/name.log. The child gets its own process group (so stop reaches the
// git and kustomize runs it spawns) and is killed by the kernel if the test binary dies first.
func Start(name, bin string, args, env []string, logDir string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{OwnerEnv + "=" + strconv.Itoa(os.Getpid())}, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	spawn.Do(func() { err = cmd.Start() })
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id (and its process group's).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited says whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then kills the group.
func (p *Process) Stop(grace time.Duration) {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children the process left in its group (a git fetch in flight) go too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// Tail returns the last n lines of the process's log, for failure messages.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// ReapOrphans kills processes marked with OwnerEnv whose owner no longer runs: leftovers of a
// run that died before it could stop them (Pdeathsig makes that rare).
func ReapOrphans() {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		owner, ok := ownerOf(p)
		if !ok || ownerAlive(owner, p) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, _ := os.Readlink(filepath.Join(p, "exe"))
		fmt.Fprintf(os.Stderr, "e2e harness: killing %s (pid %d), left by test binary %d\n", filepath.Base(exe), pid, owner)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// ownerOf reads the OwnerEnv mark from a process's environment.
func ownerOf(procDir string) (int, bool) {
	env, err := os.ReadFile(filepath.Join(procDir, "environ"))
	if err != nil {
		return 0, false
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := strings.CutPrefix(string(kv), OwnerEnv+"="); ok {
			pid, err := strconv.Atoi(v)
			return pid, err == nil
		}
	}
	return 0, false
}

// ownerAlive: a process of the owner's pid runs and started no later than the marked one, so
// it is the owner and not a later process given its pid. The owner need not be a test binary:
// make demo's Dex is marked with the demo's pid, and another checkout's make test must leave it
// alone.
func ownerAlive(owner int, procDir string) bool {
	o, ok := startTime(filepath.Join("/proc", strconv.Itoa(owner)))
	c, ok2 := startTime(procDir)
	return ok && ok2 && o <= c
}

// startTime is when the process started, in clock ticks since boot (field 22 of
// /proc/<pid>/stat).
func startTime(procDir string) (uint64, bool) {
	f, ok := StatFields(procDir)
	if !ok || len(f) < 20 {
		return 0, false
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	return t, err == nil
}

// StatFields are the fields of /proc/<pid>/stat after the command name, the state (field 3)
// first: the name, in parentheses, may itself hold spaces and parentheses.
func StatFields(procDir string) ([]string, bool) {
	b, err := os.ReadFile(filepath.Join(procDir, "stat"))
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

// ErrExited names a process that ended while it should be serving.
func ErrExited(p *Process) error {
	if ok, err := p.Exited(); ok {
		return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.Name, err, p.Tail(30))
	}
	return errors.New(p.Name + " is running")
}
