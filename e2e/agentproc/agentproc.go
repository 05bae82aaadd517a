// Package agentproc runs `inferplane agent` as a guest's unit runs it, for tests: the command
// built with go build, started again after each end as systemd would, its console a file.
package agentproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/e2e/proc"
)

// Build compiles cmd/inferplane into dir and returns its path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "inferplane")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/inferplane/inferplane/cmd/inferplane").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/inferplane: %w\n%s", err, out)
	}
	return bin, nil
}

// Agent is the agent's command line; each Start runs it once more (logs agent-1.log, agent-2.log,
// ... in Dir).
type Agent struct {
	Bin, Dir  string
	Args, Env []string
	p         *proc.Process
	runs      int
}

// Start runs the agent.
func (a *Agent) Start() error {
	a.runs++
	p, err := proc.Start("agent-"+strconv.Itoa(a.runs), a.Bin, a.Args, a.Env, a.Dir)
	if err != nil {
		return err
	}
	a.p = p
	return nil
}

// Signal sends sig to the agent alone and waits up to timeout for it to end: its exit error, or
// an error saying it did not end.
func (a *Agent) Signal(sig syscall.Signal, timeout time.Duration) (exit error, err error) {
	if err := syscall.Kill(a.p.Pid(), sig); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok, exit := a.p.Exited(); ok {
			return exit, nil
		}
	}
	return nil, fmt.Errorf("the agent did not end on %v; its log ends:\n%s", sig, a.p.Tail(30))
}

// Stop ends the agent if it runs (SIGTERM, then SIGKILL after grace): a test's clean-up.
func (a *Agent) Stop(grace time.Duration) {
	if a.p != nil {
		a.p.Stop(grace)
	}
}

// Tail is the last n lines of the agent's own log (its standard error), for messages.
func (a *Agent) Tail(n int) string {
	if a.p == nil {
		return "(not started)"
	}
	return a.p.Tail(n)
}

// Records decodes the agent's records in a console file: whole lines only (a record being
// written is not read yet), the lines that are no records skipped.
func Records(console string) ([]guestlog.Record, error) {
	b, err := os.ReadFile(console)
	if err != nil {
		return nil, err
	}
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var recs []guestlog.Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		r, err := guestlog.Decode(sc.Bytes())
		if errors.Is(err, guestlog.ErrNotRecord) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", console, sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}
