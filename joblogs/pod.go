package joblogs

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/internal/sleep"
	"github.com/inferplane/inferplane/lifecycle"
)

// MaxConsoleLine is the longest console line read, in bytes: a record carries at most
// guestlog.MaxLine bytes of the server's line, which JSON may escape to several times that.
// A longer console line is skipped (with a notice), so a reader's buffer stays bounded.
const MaxConsoleLine = 64 << 10

// lineReader reads lines of at most max bytes from r, reusing one buffer; a longer line is
// skipped whole and its length reported.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
	max int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 8<<10), max: max}
}

// next is the next line without its end; skipped > 0 when a line over max was dropped
// instead. err is the reader's error after the last whole line (io.EOF at the end).
func (l *lineReader) next() (line []byte, skipped int, err error) {
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if skipped == 0 && len(l.buf)+len(chunk) <= l.max {
			l.buf = append(l.buf, chunk...)
		} else {
			skipped += len(l.buf) + len(chunk)
			l.buf = l.buf[:0]
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && len(l.buf) == 0 && skipped == 0 {
			return nil, 0, err
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, skipped, err // a line cut by a broken stream is not shown
		}
		return bytes.TrimRight(l.buf, "\r\n"), skipped, nil
	}
}

// podState is what one pod's reader remembers across the streams it opens.
type podState struct {
	// lastSeq and lastAt are the agent's number and time of the last record taken: a record
	// at or below lastSeq that is not newer than lastAt was shown already (a resumed stream
	// starts at the second of the last line).
	lastSeq uint64
	lastAt  time.Time
	// lastTS is the kubelet's time of the last console line read: where a resumed stream
	// starts.
	lastTS time.Time
	// shown is the last status shown, to show only changes.
	shown *guestlog.Status
	// noticed holds the notices said once per pod.
	noticed map[string]bool
}

// fresh says whether a record is new to this pod's reader, and whether the agent numbered
// it below what was seen although it is newer: its numbering started over.
func (st *podState) fresh(rec *guestlog.Record) (isNew, restarted bool) {
	if rec.Seq <= st.lastSeq && st.lastSeq > 0 {
		if !rec.Time.After(st.lastAt) {
			return false, false
		}
		restarted = true
	}
	st.lastSeq, st.lastAt = rec.Seq, rec.Time
	return true, restarted
}

// changed says whether a status differs from the last shown in what a reader cares about:
// the stage, the restarts or the last exit.
func (st *podState) changed(s *guestlog.Status) bool {
	p := st.shown
	if p != nil && p.Stage == s.Stage && p.Restarts == s.Restarts && exitAt(p) == exitAt(s) && p.Detail == s.Detail {
		return false
	}
	st.shown = s
	return true
}

func exitAt(s *guestlog.Status) time.Time {
	if s.LastExit == nil {
		return time.Time{}
	}
	return s.LastExit.At
}

// splitTimestamp cuts the kubelet's RFC 3339 time from a line it timestamped.
func splitTimestamp(line []byte) (time.Time, []byte) {
	ts, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return time.Time{}, line
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return time.Time{}, line
	}
	return t, rest
}

// podReader reads one pod's console log into send.
type podReader struct {
	r    *Reader
	q    *Query
	src  Source
	st   podState
	send func(Entry) bool
	// lims, following, bound the lines read a second (Query.MaxRate, shared by the follow's
	// pods; Reader.Limit, shared by every follow); skipFrom, after a skip, is the kubelet's
	// time before which lines are passed over unread.
	lims     []*rate.Limiter
	skipFrom time.Time
}

// errBehind ends a stream whose rate-bound follow fell MaxLag behind.
var errBehind = errors.New("the follow fell behind")

// run reads the pod's log; following, it resumes a stream that ends while the pod runs and
// stops once the pod has ended. fresh is a pod found after the follow began: all of it is
// new, so no tail is asked for.
func (p *podReader) run(ctx context.Context, fresh bool) {
	q := p.q
	o := &corev1.PodLogOptions{Container: Container, Follow: q.Follow, Timestamps: true}
	if q.Tail >= 0 && !fresh {
		tail := q.Tail
		o.TailLines = &tail
	}
	if !q.Since.IsZero() {
		o.SinceTime = &metav1.Time{Time: q.Since}
	}
	wait := p.r.retry()
	for {
		rc, err := p.r.Cluster.Log(ctx, q.Namespace, p.src.Pod, o)
		read := false
		if err == nil {
			read, err = p.read(ctx, rc)
			_ = rc.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errBehind) {
			now := p.r.now()
			if !p.send(p.src.notice(now, "this follow fell %s behind the lines of %s (it reads at most %s a second): skipping to the present; read the lines skipped without following (--since)",
				cmp.Or(p.r.MaxLag, 10*time.Second), p.src.VM, rateText(p.lims))) {
				return
			}
			p.skipFrom = now
			o.TailLines, o.SinceTime = nil, &metav1.Time{Time: now}
			continue
		}
		if err != nil && !read {
			if !p.once("read:"+strings.SplitN(err.Error(), ":", 2)[0], "the console log of %s cannot be read: %v", p.src.VM, err) {
				return
			}
		}
		if !q.Follow {
			return
		}
		if p.r.gone(ctx, q, p.src) {
			p.send(p.src.notice(p.r.now(), "VM instance of %s ended (pod %s)", p.src.VM, p.src.Pod))
			return
		}
		if read {
			wait = p.r.retry()
			why := ""
			if err != nil {
				why = " (" + err.Error() + ")"
			}
			p.send(p.src.notice(p.r.now(), "the console log stream of %s was cut%s; resuming where it stopped", p.src.VM, why))
		}
		if !p.st.lastTS.IsZero() {
			o.TailLines, o.SinceTime = nil, &metav1.Time{Time: p.st.lastTS}
		}
		if sleep.For(ctx, wait) != nil {
			return
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// once sends a notice the first time its key comes up; false when the caller is gone.
func (p *podReader) once(key, format string, args ...any) bool {
	if p.st.noticed == nil {
		p.st.noticed = map[string]bool{}
	}
	if p.st.noticed[key] {
		return true
	}
	p.st.noticed[key] = true
	return p.send(p.src.notice(p.r.now(), format, args...))
}

// read takes one stream's lines; read says whether any console line came, err why the stream
// ended (nil at its end).
func (p *podReader) read(ctx context.Context, rc io.Reader) (read bool, err error) {
	lr := newLineReader(rc, MaxConsoleLine)
	search := strings.ToLower(p.q.Search)
	for {
		line, skipped, err := lr.next()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return read, nil
			}
			return read, err
		}
		read = true
		if skipped > 0 {
			if !p.send(p.src.notice(p.r.now(), "a console line of %s of %d bytes was skipped (longer than %d)", p.src.VM, skipped, MaxConsoleLine)) {
				return read, nil
			}
			continue
		}
		ts, content := splitTimestamp(line)
		if !ts.IsZero() {
			p.st.lastTS = ts
		}
		if !ts.IsZero() && ts.Before(p.skipFrom) {
			continue // skipped to the present: not even decoded
		}
		if behind, err := p.pace(ctx, ts); err != nil || behind {
			if behind {
				return read, errBehind
			}
			return read, nil
		}
		e, ok := p.entry(content, ts, search)
		if ok && !p.send(e) {
			return read, nil
		}
	}
}

// pace waits for the rate limits; behind says the line is MaxLag old or more (the follow
// cannot keep up with the VM).
func (p *podReader) pace(ctx context.Context, ts time.Time) (behind bool, err error) {
	if len(p.lims) == 0 {
		return false, nil
	}
	for _, l := range p.lims {
		if err := l.Wait(ctx); err != nil {
			return false, err
		}
	}
	lag := cmp.Or(p.r.MaxLag, 10*time.Second)
	return !ts.IsZero() && p.r.now().Sub(ts) >= lag, nil
}

// entry turns a console line into what is shown: a line of the server's that the search
// matches, a status that changed, a notice about a record that does not decode; ok is false
// for the rest (the kernel's, systemd's and cloud-init's lines, records shown already).
func (p *podReader) entry(content []byte, ts time.Time, search string) (Entry, bool) {
	rec, err := guestlog.Decode(content)
	if errors.Is(err, guestlog.ErrNotRecord) {
		return Entry{}, false
	}
	if err != nil {
		if p.st.noticed["record"] {
			return Entry{}, false
		}
		p.once("record", "%s wrote a record this reader cannot read (%v); such records are skipped", p.src.VM, err)
		return Entry{}, false
	}
	isNew, restarted := p.st.fresh(&rec)
	if !isNew {
		return Entry{}, false
	}
	if restarted {
		p.send(p.src.notice(rec.Time, "the agent of %s numbers its records from %d again: its state was lost", p.src.VM, rec.Seq))
	}
	at := rec.Time
	if at.IsZero() {
		at = ts
	}
	e := Entry{Time: at, Replica: p.src.Replica, Node: p.src.Node, VM: p.src.VM, Pod: p.src.Pod}
	switch rec.Kind {
	case guestlog.KindStatus:
		if !p.st.changed(rec.Status) {
			return Entry{}, false
		}
		e.Kind, e.Status = KindStatus, rec.Status
		e.Text = string(rec.Status.Stage) + ": " + lifecycle.Describe(rec.Status)
		return e, true
	default:
		if search != "" && !strings.Contains(strings.ToLower(rec.Line), search) {
			return Entry{}, false
		}
		e.Kind, e.Stream, e.Line, e.Truncated = KindLine, rec.Stream, rec.Line, rec.Truncated
		return e, true
	}
}

// rateText is the tightest of the limits, in lines.
func rateText(lims []*rate.Limiter) string {
	least := rate.Inf
	for _, l := range lims {
		least = min(least, l.Limit())
	}
	return fmt.Sprintf("%.0f lines", float64(least))
}
