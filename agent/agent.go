// Package agent is the inference agent that runs in every VM of a replica: it owns the model
// server's container (the runtime image with the master's arguments), restarts it when it
// exits with a capped exponential backoff that resets once the server has been healthy for a
// while, stops it gracefully on shutdown, and reads every line it prints. Each line, redacted,
// goes to the guest's serial console as an agent/guestlog record, with the stage the agent
// sees the server in (pulling the image, downloading the weights, loading, serving,
// crash-looping): KubeVirt's guest-console-log container turns the console into the
// virt-launcher pod's log, which the tenant cluster's API server serves (docs/agent.md).
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/redact"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/internal/sleep"
)

// Defaults of Config.
const (
	DefaultStopGrace      = 30 * time.Second
	DefaultBackoffInitial = 5 * time.Second
	DefaultBackoffMax     = 5 * time.Minute
	DefaultHealthyPeriod  = 10 * time.Minute
	DefaultHealthInterval = 2 * time.Second
	DefaultConsoleRate    = 32 << 10 // bytes a second
	DefaultConsoleBurst   = 256 << 10
	DefaultQueueLines     = 4096
	DefaultLastLines      = 20
)

// Config is what the agent runs and where it writes.
type Config struct {
	Spec    runtime.Spec
	Runtime runtime.Runtime
	// Console receives the records (the serial console's device).
	Console io.Writer
	// StateDir keeps the agent's state across its restarts.
	StateDir string
	// HealthURL is the server's health check; "" for a node that serves no HTTP (a vLLM
	// --headless worker), which counts as serving once its model is loaded.
	HealthURL string
	// Redactor masks secrets in everything written to the console.
	Redactor *redact.Redactor

	StopGrace time.Duration // SIGTERM to SIGKILL on stop
	// Backoff before a restart: BackoffInitial, doubled after each exit up to BackoffMax, and
	// back to BackoffInitial after a run that served for HealthyPeriod.
	BackoffInitial, BackoffMax, HealthyPeriod time.Duration
	HealthInterval                            time.Duration
	StatusInterval                            time.Duration // status repeated this often
	// StatusMinGap: updates within a stage (progress) are written at most this often.
	StatusMinGap              time.Duration
	ConsoleRate, ConsoleBurst int // bytes per second, and at once
	QueueLines                int // lines waiting for the console
	LastLines                 int // lines kept for an exit's report
	// Logf reports the agent's own troubles (its standard error, the journal in the guest).
	Logf func(format string, args ...any)
	// Notes are written to the console first, as the agent's lines (what the agent was told
	// and could not do: a secret file missing).
	Notes []string
}

func (c *Config) defaults() error {
	if c.Runtime == nil || c.Console == nil || c.StateDir == "" || c.Spec.Name == "" || c.Spec.Image == "" {
		return errors.New("agent: the runtime, the console, the state folder and the container's name and image are required")
	}
	c.StopGrace = cmp.Or(c.StopGrace, DefaultStopGrace)
	c.BackoffInitial = cmp.Or(c.BackoffInitial, DefaultBackoffInitial)
	c.BackoffMax = max(cmp.Or(c.BackoffMax, DefaultBackoffMax), c.BackoffInitial)
	c.HealthyPeriod = cmp.Or(c.HealthyPeriod, DefaultHealthyPeriod)
	c.HealthInterval = cmp.Or(c.HealthInterval, DefaultHealthInterval)
	c.StatusInterval = cmp.Or(c.StatusInterval, guestlog.StatusInterval)
	c.StatusMinGap = cmp.Or(c.StatusMinGap, statusMinGap)
	c.ConsoleRate = cmp.Or(c.ConsoleRate, DefaultConsoleRate)
	c.ConsoleBurst = max(cmp.Or(c.ConsoleBurst, DefaultConsoleBurst), 2*guestlog.MaxLine)
	c.QueueLines = cmp.Or(c.QueueLines, DefaultQueueLines)
	c.LastLines = cmp.Or(c.LastLines, DefaultLastLines)
	if c.Redactor == nil {
		c.Redactor = redact.New()
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// Run supervises the model server until ctx ends, then stops it (StopGrace, then kill) and
// returns once its last lines and the final status are on the console.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	st, err := openState(cfg.StateDir)
	if err != nil {
		return err
	}
	sinkCtx, stopSink := context.WithCancel(context.Background())
	out := newSink(cfg.Console, st, cfg.Redactor, cfg.ConsoleRate, cfg.ConsoleBurst, cfg.QueueLines, cfg.StatusInterval, cfg.Logf)
	out.minGap = cfg.StatusMinGap
	go out.run(sinkCtx)
	a := &agent{cfg: cfg, state: st, out: out}
	for _, n := range cfg.Notes {
		out.agentLine("%s", n)
	}
	a.loop(ctx)
	stopSink()
	<-out.done
	return nil
}

type agent struct {
	cfg   Config
	state *stateStore
	out   *sink
}

// loop starts (or reattaches to) the server, supervises each run, and restarts it after
// each exit until ctx ends.
func (a *agent) loop(ctx context.Context) {
	bo := backoff{initial: a.cfg.BackoffInitial, max: a.cfg.BackoffMax}
	c, from, tr := a.reattach(ctx)
	var lastExit *guestlog.Exit
	if st := a.state.get().Status; st != nil {
		lastExit = st.LastExit
	}
	for ctx.Err() == nil {
		if c == nil {
			tr = newTracker(a, a.state.get().Restarts, lastExit)
			var err error
			if c, err = a.start(ctx, tr); err != nil {
				if ctx.Err() != nil {
					break
				}
				a.failedStart(ctx, tr, &bo, err)
				continue
			}
			from = runtime.Cursor{}
		}
		res := a.supervise(ctx, c, from, tr)
		if res.stopped {
			return
		}
		a.exited(ctx, c, tr, &bo, res)
		lastExit, c = tr.lastExit(), nil
	}
	if tr == nil {
		tr = newTracker(a, a.state.get().Restarts, lastExit)
	}
	tr.set(guestlog.StageStopping, "the agent stopped; no model server runs", nil)
}

// reattach finds a container of the server that outlived the agent: the one of its state,
// running or exited meanwhile (its output is read from the cursor on, its exit reported), or
// a running one of its name (from the start of its output: the state does not know it).
func (a *agent) reattach(ctx context.Context) (runtime.Container, runtime.Cursor, *tracker) {
	c, err := a.cfg.Runtime.Find(ctx, a.cfg.Spec.Name)
	if err != nil {
		a.cfg.Logf("agent: looking for a running model server: %v", err)
		return nil, runtime.Cursor{}, nil
	}
	if c == nil {
		return nil, runtime.Cursor{}, nil
	}
	s, err := c.State(ctx)
	st := a.state.get()
	ours := c.ID() == st.ContainerID
	if err != nil || (!s.Running && !ours) {
		_ = c.Remove(ctx)
		return nil, runtime.Cursor{}, nil
	}
	var lastExit *guestlog.Exit
	if st.Status != nil {
		lastExit = st.Status.LastExit
	}
	tr := newTracker(a, st.Restarts, lastExit)
	from := runtime.Cursor{}
	if ours {
		from = st.Cursor
		tr.restore(st.Status, s.StartedAt)
		a.out.agentLine("the agent restarted and reattached to the model server's container %s; its output goes on from where the agent stopped", short(c.ID()))
	} else {
		tr.restore(nil, s.StartedAt)
		a.out.agentLine("the agent found the model server's container %s running and reattached to it (its output from the start: the agent's state does not know it)", short(c.ID()))
		_ = a.state.update(func(st *state) { st.ContainerID = c.ID() })
	}
	return c, from, tr
}

// start pulls the image and starts the container.
func (a *agent) start(ctx context.Context, tr *tracker) (runtime.Container, error) {
	spec := a.cfg.Spec
	tr.set(guestlog.StagePullingImage, "pulling "+spec.Image, nil)
	err := a.cfg.Runtime.Pull(ctx, spec.Image, func(p runtime.PullProgress) {
		tr.set(guestlog.StagePullingImage, fmt.Sprintf("pulling %s: %s of %s", spec.Image, bytesWord(p.Done), bytesWord(p.Total)),
			&guestlog.Progress{Done: p.Done, Total: p.Total, Unit: "bytes"})
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		a.out.agentLine("pulling %s failed: %v; starting the image already on the node, if there is one", spec.Image, err)
	}
	tr.set(guestlog.StageStarting, "starting the model server", nil)
	c, err := a.cfg.Runtime.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	_ = a.state.update(func(st *state) { st.ContainerID, st.Cursor = c.ID(), runtime.Cursor{} })
	tr.started(time.Now())
	a.out.agentLine("started the model server: container %s, image %s", short(c.ID()), spec.Image)
	return c, nil
}

// failedStart reports a start that did not happen (the image missing, the runtime down) and
// waits out the backoff: a failure like an exit.
func (a *agent) failedStart(ctx context.Context, tr *tracker, bo *backoff, err error) {
	delay := bo.next()
	a.out.agentLine("could not start the model server: %v; trying again in %s", err, delay)
	tr.set(guestlog.StageCrashLooping, fmt.Sprintf("could not start the model server (%v); trying again in %s (%d in a row)", err, delay, bo.n), nil)
	a.restartAfter(ctx, delay)
}

// restartAfter waits out a backoff and counts the restart that follows it.
func (a *agent) restartAfter(ctx context.Context, delay time.Duration) {
	if sleep.For(ctx, delay) == nil {
		_ = a.state.update(func(st *state) { st.Restarts++ })
	}
}

func short(id string) string { return id[:min(len(id), 12)] }

// backoff is the restart delay: initial, doubled per exit in a row, capped at max.
type backoff struct {
	initial, max time.Duration
	n            int // exits in a row
}

func (b *backoff) next() time.Duration {
	d := b.initial
	for i := 0; i < b.n && d < b.max; i++ {
		d *= 2
	}
	b.n++
	return min(d, b.max)
}

func (b *backoff) reset() { b.n = 0 }

// bytesWord writes a byte count for people: "1.5 GB".
func bytesWord(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
