package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/serverlog"
)

// tracker is the agent's view of one run of the server: its stage from what the runtime, the
// server's lines (agent/serverlog) and its health say; the cause of a failure its lines named;
// its last lines for the report of its exit. Every change goes to the console as a status.
type tracker struct {
	out       *sink
	headless  bool // no health check: serving once the model is loaded
	lastLines int

	mu           sync.Mutex
	st           guestlog.Status
	running      bool
	startedAt    time.Time
	servingSince time.Time
	cause        string // the last specific cause the lines named
	generic      string // the first generic one
	ring         []string
	healthFails  int
}

func newTracker(a *agent, restarts int, lastExit *guestlog.Exit) *tracker {
	return &tracker{out: a.out, headless: a.cfg.HealthURL == "", lastLines: a.cfg.LastLines,
		st: guestlog.Status{Stage: guestlog.StageStarting, Since: time.Now().UTC(), Restarts: restarts, LastExit: lastExit}}
}

// rank orders the stages of a run: a line never moves the stage back (a config file fetched
// after the weights loaded does not make the server "downloading" again).
var rank = map[guestlog.Stage]int{
	guestlog.StagePullingImage: 1, guestlog.StageStarting: 2, guestlog.StageDownloadingWeights: 3,
	guestlog.StageLoadingModel: 4, guestlog.StageServing: 5,
}

// set enters stage (or updates its detail) and writes the status.
func (t *tracker) set(stage guestlog.Stage, detail string, p *guestlog.Progress) {
	t.mu.Lock()
	urgent := t.setLocked(stage, detail, p)
	st := t.st
	t.mu.Unlock()
	t.out.setStatus(st, urgent)
}

func (t *tracker) setLocked(stage guestlog.Stage, detail string, p *guestlog.Progress) bool {
	changed := stage != t.st.Stage
	if changed {
		t.st.Since = time.Now().UTC()
	}
	t.st.Stage, t.st.Detail, t.st.Progress = stage, detail, p
	return changed
}

// restore continues from the status a previous agent wrote, for a run it reattached to.
func (t *tracker) restore(st *guestlog.Status, startedAt time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st != nil {
		t.st = *st
		if st.Stage == guestlog.StageServing {
			t.servingSince = st.Since
		}
	}
	t.running, t.startedAt = true, startedAt
}

func (t *tracker) started(at time.Time) {
	t.mu.Lock()
	t.running, t.startedAt = true, at
	t.mu.Unlock()
}

// segment reads one carriage-return segment of the server's output.
func (t *tracker) segment(_ guestlog.Stream, text string) {
	ev := serverlog.Parse(text)
	if ev == (serverlog.Event{}) {
		return
	}
	t.mu.Lock()
	switch {
	case ev.Cause == "":
	case ev.Generic:
		if t.generic == "" {
			t.generic = ev.Cause
		}
	default:
		t.cause = ev.Cause
	}
	stage := ev.Stage
	if ev.Loaded && t.headless {
		stage, ev.Detail = guestlog.StageServing, "the model is loaded; this node serves no HTTP (a worker of a multi-node replica)"
		t.servingSince = time.Now()
	}
	if stage == "" && ev.Detail != "" && t.st.Stage != guestlog.StageServing && rank[t.st.Stage] > 0 {
		stage = t.st.Stage // a detail within the current stage
	}
	if stage == "" || !t.running || t.st.Stage == guestlog.StageServing || rank[stage] < rank[t.st.Stage] {
		t.mu.Unlock()
		return
	}
	p := ev.Progress
	if p == nil && stage == t.st.Stage {
		p = t.st.Progress
	}
	urgent := t.setLocked(stage, ev.Detail, p)
	st := t.st
	t.mu.Unlock()
	t.out.setStatus(st, urgent)
}

// line keeps a forwarded line for the report of the run's exit.
func (t *tracker) line(text string) {
	t.mu.Lock()
	t.ring = append(t.ring, text)
	if len(t.ring) > t.lastLines {
		t.ring = t.ring[len(t.ring)-t.lastLines:]
	}
	t.mu.Unlock()
}

// healthy takes a health check's answer.
func (t *tracker) healthy(ok bool, why string) {
	t.mu.Lock()
	if !t.running {
		t.mu.Unlock()
		return
	}
	serving := t.st.Stage == guestlog.StageServing
	var urgent, changed bool
	switch {
	case ok && (!serving || t.healthFails >= healthFailsShown):
		if !serving {
			t.servingSince = time.Now()
		}
		urgent = t.setLocked(guestlog.StageServing, "the model server's /health answers", nil)
		changed = true
		t.healthFails = 0
	case ok:
		t.healthFails = 0
	case serving:
		t.healthFails++
		if t.healthFails == healthFailsShown {
			t.setLocked(guestlog.StageServing, fmt.Sprintf("the model server's /health has failed %d times in a row: %s", t.healthFails, why), nil)
			changed = true
		}
	}
	st := t.st
	t.mu.Unlock()
	if changed {
		t.out.setStatus(st, urgent)
	}
}

// healthFailsShown: a serving server's failed checks in a row before the status says so.
const healthFailsShown = 3

func (t *tracker) isServing() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.Stage == guestlog.StageServing
}

// exit ends the run: the report of its exit, with its last lines.
func (t *tracker) exit(code int, at time.Time) *guestlog.Exit {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running = false
	after := time.Duration(0)
	if !t.startedAt.IsZero() {
		after = at.Sub(t.startedAt).Round(time.Millisecond)
	}
	e := &guestlog.Exit{Code: code, After: after, At: at.UTC(), LastLines: append([]string(nil), t.ring...)}
	t.st.LastExit = e
	return e
}

// servedFor is how long the run served before at.
func (t *tracker) servedFor(at time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.servingSince.IsZero() {
		return 0
	}
	return at.Sub(t.servingSince)
}

// failure is what the run's lines said made it fail ("" if nothing).
func (t *tracker) failure() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cause != "" {
		return t.cause
	}
	return t.generic
}

func (t *tracker) lastExit() *guestlog.Exit {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.LastExit
}

func (t *tracker) setRestarts(n int) {
	t.mu.Lock()
	t.st.Restarts = n
	t.mu.Unlock()
}
