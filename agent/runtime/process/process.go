// Package process is the agent's runtime for a plain process: the "image" is the program to
// run (or the entrypoint, when one is given) and the container's arguments its arguments. It
// runs with the agent's environment plus the spec's, in its own process group, and dies with
// the agent (the kernel kills it when the agent's process ends, so nothing outlives the agent
// to reattach to: Find finds nothing). Images, binds, GPUs and the other isolation settings
// mean nothing to a process and are ignored. For the agent's tests and hosts without a
// container engine.
package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/internal/spawn"
)

// Runtime starts processes.
type Runtime struct{}

// Pull has nothing to pull.
func (Runtime) Pull(context.Context, string, func(runtime.PullProgress)) error { return nil }

// Find finds nothing: a process does not outlive the agent that started it.
func (Runtime) Find(context.Context, string) (runtime.Container, error) { return nil, nil }

// Start runs the spec's program.
func (Runtime) Start(_ context.Context, spec runtime.Spec) (runtime.Container, error) {
	argv := append([]string{spec.Image}, spec.Args...)
	if len(spec.Entrypoint) > 0 {
		argv = append(append([]string{}, spec.Entrypoint...), spec.Args...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), spec.Env...)
	// Pdeathsig: the kernel kills the server when the agent dies, even by SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	spawn.Do(func() { err = cmd.Start() })
	// The child holds its own ends; once it and every process it started are gone, reads end.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &proc{cmd: cmd, out: outR, err: errR, started: time.Now(), exited: make(chan struct{})}
	go p.wait()
	return p, nil
}

type proc struct {
	cmd      *exec.Cmd
	out, err *os.File
	started  time.Time

	exited   chan struct{}
	code     int
	finished time.Time
	logsOnce sync.Once
}

func (p *proc) wait() {
	err := p.cmd.Wait()
	p.finished = time.Now()
	p.code = exitCode(p.cmd.ProcessState, err)
	// Whatever the server started dies with it, so that its output ends.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	close(p.exited)
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if ps.ExitCode() >= 0 {
		return ps.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func (p *proc) ID() string { return fmt.Sprintf("pid-%d", p.cmd.Process.Pid) }

func (p *proc) State(context.Context) (runtime.State, error) {
	select {
	case <-p.exited:
		return runtime.State{ExitCode: p.code, StartedAt: p.started, FinishedAt: p.finished}, nil
	default:
		return runtime.State{Running: true, StartedAt: p.started}, nil
	}
}

// Logs reads the process's output once, as it comes; from means nothing (there is only one
// reading of a pipe).
func (p *proc) Logs(ctx context.Context, _ runtime.Cursor, emit func(runtime.Chunk)) error {
	started := false
	p.logsOnce.Do(func() { started = true })
	if !started {
		return errors.New("the output of a process can be read once")
	}
	chunks := make(chan runtime.Chunk)
	var wg sync.WaitGroup
	for _, s := range []struct {
		f      *os.File
		stream guestlog.Stream
	}{{p.out, guestlog.Stdout}, {p.err, guestlog.Stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.f.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.f.Read(buf)
				if n > 0 {
					select {
					case chunks <- runtime.Chunk{Stream: s.stream, Time: time.Now(), Data: append([]byte(nil), buf[:n]...)}:
					case <-ctx.Done():
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(chunks) }()
	for c := range chunks {
		emit(c)
	}
	return ctx.Err()
}

func (p *proc) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.exited:
		return p.code, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *proc) Stop(ctx context.Context, grace time.Duration) error {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.exited
	return nil
}

func (p *proc) Remove(context.Context) error { return nil }
