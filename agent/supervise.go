package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/internal/sleep"
)

// runEnd is how a run ended.
type runEnd struct {
	code    int
	at      time.Time
	stopped bool // the agent stopped it
}

type waited struct {
	code int
	err  error
}

// logsDrainWait bounds how long the agent waits for the last output of a server that exited.
const logsDrainWait = 10 * time.Second

// supervise reads the run's output and health until the server exits or ctx ends (the agent
// is stopping: then it stops the server).
func (a *agent) supervise(ctx context.Context, c runtime.Container, from runtime.Cursor, tr *tracker) runEnd {
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logsDone := make(chan struct{})
	asm := newAssembler(2*guestlog.MaxLine, tr.segment, func(l serverLine) {
		tr.line(l.text)
		a.out.line(l)
	})
	go func() {
		defer close(logsDone)
		last := from
		err := c.Logs(runCtx, from, func(ch runtime.Chunk) {
			last = ch.Cursor
			asm.feed(ch)
		})
		asm.flush(last)
		if err != nil && runCtx.Err() == nil {
			a.out.agentLine("reading the model server's output: %v", err)
		}
	}()
	if a.cfg.HealthURL != "" {
		go a.probe(runCtx, tr)
	}
	waitDone := make(chan waited, 1)
	go func() {
		code, err := c.Wait(runCtx)
		waitDone <- waited{code, err}
	}()
	select {
	case w := <-waitDone:
		at := time.Now()
		if w.err != nil {
			a.out.agentLine("waiting for the model server: %v", w.err)
			w.code = -1
		}
		waitFor(logsDone, logsDrainWait)
		return runEnd{code: w.code, at: at}
	case <-ctx.Done():
		return a.stop(c, tr, waitDone, logsDone)
	}
}

// stop stops the server (SIGTERM, SIGKILL after the grace), reads its last lines and removes
// its container.
func (a *agent) stop(c runtime.Container, tr *tracker, waitDone <-chan waited, logsDone <-chan struct{}) runEnd {
	grace := a.cfg.StopGrace
	tr.set(guestlog.StageStopping, fmt.Sprintf("stopping the model server (SIGTERM; SIGKILL after %s)", grace), nil)
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	if err := c.Stop(ctx, grace); err != nil {
		a.out.agentLine("stopping the model server: %v", err)
	}
	code := -1
	select {
	case w := <-waitDone:
		code = w.code
	case <-ctx.Done():
	}
	at := time.Now()
	waitFor(logsDone, logsDrainWait)
	ex := tr.exit(code, at)
	if err := c.Remove(ctx); err != nil {
		a.out.agentLine("removing the model server's container: %v", err)
	}
	_ = a.state.update(func(st *state) { st.ContainerID, st.Cursor = "", runtime.Cursor{} })
	a.out.agentLine("stopped the model server: exit code %d after %s", code, ex.After)
	tr.set(guestlog.StageStopping, fmt.Sprintf("the model server stopped (exit code %d); the agent is stopping", code), nil)
	return runEnd{code: code, at: at, stopped: true}
}

// exited reports an exit the agent did not ask for, and waits out the backoff before the
// restart: the stage is crash-looping meanwhile.
func (a *agent) exited(ctx context.Context, c runtime.Container, tr *tracker, bo *backoff, end runEnd) {
	ex := tr.exit(end.code, end.at)
	if tr.servedFor(end.at) >= a.cfg.HealthyPeriod {
		bo.reset() // it served long enough: this exit starts a new count
	}
	delay := bo.next()
	if err := c.Remove(ctx); err != nil {
		a.out.agentLine("removing the model server's container: %v", err)
	}
	_ = a.state.update(func(st *state) { st.ContainerID, st.Cursor = "", runtime.Cursor{} })
	why := ""
	if cause := tr.failure(); cause != "" {
		why = ": " + cause
	}
	a.out.agentLine("the model server exited with code %d after %s%s; restarting it in %s", end.code, ex.After, why, delay)
	tr.set(guestlog.StageCrashLooping, fmt.Sprintf("exited with code %d after %s%s; restarting in %s (%d exits in a row)",
		end.code, ex.After, why, delay, bo.n), nil)
	a.restartAfter(ctx, delay)
}

// probe asks the server's health check until runCtx ends: often while it starts, less once it
// serves.
func (a *agent) probe(ctx context.Context, tr *tracker) {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		interval := a.cfg.HealthInterval
		if tr.isServing() {
			interval *= 5
		}
		if sleep.For(ctx, interval) != nil {
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.cfg.HealthURL, nil)
		if err != nil {
			tr.healthy(false, err.Error())
			continue
		}
		resp, err := client.Do(req)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			tr.healthy(false, err.Error())
		default:
			resp.Body.Close()
			tr.healthy(resp.StatusCode == http.StatusOK, resp.Status)
		}
	}
}

func waitFor(ch <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}
