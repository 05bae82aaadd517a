package agent

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/redact"
	"github.com/inferplane/inferplane/agent/runtime"
)

// serverLine is a line of the model server on its way to the console.
type serverLine struct {
	stream    guestlog.Stream
	at        time.Time
	text      string
	truncated bool
	cursor    runtime.Cursor
}

// sink writes records to the console: one writer, so Seq is assigned in console order. Lines
// queue without ever blocking the reader of the server's output: a full queue drops the line
// and counts it (a serial console is slow, and a server may print 10,000 lines a second).
// The agent's own lines and its status never drop. Every string is redacted here, the one
// place everything passes before it leaves the VM, and lines are cut at guestlog.MaxLine.
type sink struct {
	console  io.Writer
	state    *stateStore
	redactor *redact.Redactor
	limiter  *rate.Limiter
	rateDesc string
	interval time.Duration // status repeated this often
	logf     func(string, ...any)

	lines   chan serverLine
	dropped atomic.Int64

	mu         sync.Mutex
	agentLines []string
	changes    []guestlog.Status // stage changes, each written, in order
	status     *guestlog.Status  // the latest update within a stage: only the last one counts
	last       *guestlog.Status  // the last status written, repeated every interval
	lastAt     time.Time
	pokeLater  bool // a wake-up is scheduled for an update that came too soon
	statusLast bool // the last record written is a status
	minGap     time.Duration

	wake chan struct{}
	done chan struct{}
}

// statusMinGap: a status that only updates progress waits this long after the last one.
const statusMinGap = time.Second

func newSink(console io.Writer, st *stateStore, r *redact.Redactor, bytesPerSecond, burst, queue int,
	interval time.Duration, logf func(string, ...any)) *sink {
	return &sink{
		console: console, state: st, redactor: r, interval: interval, logf: logf, minGap: statusMinGap,
		limiter:  rate.NewLimiter(rate.Limit(bytesPerSecond), burst),
		rateDesc: fmt.Sprintf("%d bytes/s", bytesPerSecond),
		lines:    make(chan serverLine, queue),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// line queues a server line, or drops and counts it when the queue is full.
func (s *sink) line(l serverLine) {
	select {
	case s.lines <- l:
	default:
		s.dropped.Add(1)
	}
}

// agentLine queues one of the agent's own lines.
func (s *sink) agentLine(format string, args ...any) {
	s.mu.Lock()
	s.agentLines = append(s.agentLines, fmt.Sprintf(format, args...))
	s.mu.Unlock()
	s.poke()
}

// setStatus makes st the status to write. A stage change (urgent) is written whatever
// follows it, before lines still queued; an update within a stage may be replaced by the
// next one and waits minGap after the last status written.
func (s *sink) setStatus(st guestlog.Status, urgent bool) {
	s.mu.Lock()
	if urgent {
		if s.status != nil { // the stage's last update (a pull's 100%) goes before the change
			s.changes = append(s.changes, *s.status)
		}
		s.changes, s.status = append(s.changes, st), nil
	} else {
		s.status = &st
	}
	s.mu.Unlock()
	s.poke()
}

func (s *sink) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run writes until ctx ends, then writes what is still queued (the last status included) and
// returns; done closes then.
func (s *sink) run(ctx context.Context) {
	defer close(s.done)
	if p := s.state.get().Pending; p != "" {
		// The record the agent was writing when it stopped: again, with the same Seq.
		s.write(context.Background(), []byte(p))
	}
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		if s.flushAgentAndStatus(ctx, false) {
			continue
		}
		if n := s.dropped.Load(); n > 0 && len(s.lines) < cap(s.lines)/2 {
			s.dropped.Add(-n)
			s.record(ctx, guestlog.Record{Kind: guestlog.KindLine, Stream: guestlog.Agent,
				Line: fmt.Sprintf("dropped %d lines of the model server's output: more than the console takes (%s)", n, s.rateDesc)}, nil)
			continue
		}
		select {
		case l := <-s.lines:
			s.writeLine(ctx, l)
			continue
		default:
		}
		select {
		case l := <-s.lines:
			s.writeLine(ctx, l)
		case <-s.wake:
		case <-tick.C:
			s.mu.Lock()
			if s.last != nil && s.status == nil && time.Since(s.lastAt) >= s.interval {
				s.status = s.last // repeated, so a reader finds it in a short tail
			}
			s.mu.Unlock()
		case <-ctx.Done():
			s.drain()
			return
		}
	}
}

// flushAgentAndStatus writes the agent's queued lines, the stage changes and a due update;
// it reports whether it wrote anything. At the end (final) an update is due whatever its age.
func (s *sink) flushAgentAndStatus(ctx context.Context, final bool) bool {
	s.mu.Lock()
	agent, changes := s.agentLines, s.changes
	s.agentLines, s.changes = nil, nil
	if s.status != nil && (final || time.Since(s.lastAt) >= s.minGap) {
		changes, s.status = append(changes, *s.status), nil
	}
	waiting := s.status != nil && !s.pokeLater
	if waiting {
		// An update too soon after the last status: come back for it.
		s.pokeLater = true
		time.AfterFunc(s.minGap-time.Since(s.lastAt), func() {
			s.mu.Lock()
			s.pokeLater = false
			s.mu.Unlock()
			s.poke()
		})
	}
	s.mu.Unlock()
	for _, l := range agent {
		s.record(ctx, guestlog.Record{Kind: guestlog.KindLine, Stream: guestlog.Agent, Line: l}, nil)
	}
	for _, st := range changes {
		s.record(ctx, guestlog.Record{Kind: guestlog.KindStatus, Status: &st}, nil)
		s.mu.Lock()
		s.last, s.lastAt = &st, time.Now()
		s.mu.Unlock()
	}
	return len(changes) > 0 || len(agent) > 0
}

// drain writes what is left once the agent stops: the queued lines (without waiting for the
// rate limit: the agent is about to exit), the agent's lines and the last status.
func (s *sink) drain() {
	ctx := context.Background()
	s.limiter.SetLimit(rate.Inf)
	for {
		select {
		case l := <-s.lines:
			s.writeLine(ctx, l)
			continue
		default:
		}
		break
	}
	if n := s.dropped.Swap(0); n > 0 {
		s.record(ctx, guestlog.Record{Kind: guestlog.KindLine, Stream: guestlog.Agent,
			Line: fmt.Sprintf("dropped %d lines of the model server's output: more than the console takes (%s)", n, s.rateDesc)}, nil)
	}
	s.flushAgentAndStatus(ctx, true)
	s.mu.Lock()
	last, again := s.last, s.last != nil && !s.statusLast
	s.mu.Unlock()
	if again {
		// Lines queued before the last status went after it: the console ends on the status.
		s.record(ctx, guestlog.Record{Kind: guestlog.KindStatus, Status: last}, nil)
	}
}

func (s *sink) writeLine(ctx context.Context, l serverLine) {
	c := l.cursor
	s.record(ctx, guestlog.Record{Kind: guestlog.KindLine, Time: l.at, Stream: l.stream, Line: l.text, Truncated: l.truncated}, &c)
}

func (s *sink) redactStatus(st guestlog.Status) *guestlog.Status {
	st.Detail = s.redactor.String(st.Detail)
	if st.LastExit != nil {
		e := *st.LastExit
		e.LastLines = s.redactor.Strings(append([]string(nil), e.LastLines...))
		for i, l := range e.LastLines {
			e.LastLines[i], _ = truncate(l, guestlog.MaxLine)
		}
		st.LastExit = &e
	}
	return &st
}

// record redacts r, cuts its line, gives it the next Seq, keeps it as the pending record
// (with the cursor of its line), and writes it.
func (s *sink) record(ctx context.Context, r guestlog.Record, cursor *runtime.Cursor) {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	if r.Kind == guestlog.KindLine {
		var cut bool
		r.Line, cut = truncate(s.redactor.String(r.Line), guestlog.MaxLine)
		r.Truncated = r.Truncated || cut
	}
	if r.Status != nil {
		r.Status = s.redactStatus(*r.Status)
	}
	var b []byte
	err := s.state.update(func(st *state) {
		r.Seq = st.Seq + 1
		var err error
		if b, err = guestlog.Encode(r); err != nil {
			return
		}
		st.Seq, st.Pending = r.Seq, string(b)
		if cursor != nil {
			st.Cursor = *cursor
		}
		if r.Kind == guestlog.KindStatus {
			st.Status = r.Status
		}
	})
	if err != nil || b == nil {
		s.logf("agent: a record was not written: %v", err)
		return
	}
	s.mu.Lock()
	s.statusLast = r.Kind == guestlog.KindStatus
	s.mu.Unlock()
	s.write(ctx, b)
}

// write waits for the rate limit and writes one encoded record. A console that fails is
// reported on the agent's own log; the record is lost (nothing else could carry it).
func (s *sink) write(ctx context.Context, b []byte) {
	_ = s.limiter.WaitN(ctx, min(len(b), s.limiter.Burst()))
	if _, err := s.console.Write(b); err != nil {
		s.logf("agent: writing to the console: %v", err)
	}
}

// truncate cuts s to at most n bytes on a UTF-8 boundary.
func truncate(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}
