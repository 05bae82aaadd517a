package agent

import (
	"bufio"
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/redact"
)

// console is a STAND-IN for the guest's serial console (no VM runs here): memory that can be
// made to block, as a slow serial line does.
type console struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	gate chan struct{} // when set, every write waits for it to close
}

func (c *console) Write(b []byte) (int, error) {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(b)
}

func (c *console) records(t *testing.T) []guestlog.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return decodeAll(t, c.buf.Bytes())
}

// decodeAll reads every complete record of a console's bytes.
func decodeAll(t *testing.T, b []byte) []guestlog.Record {
	t.Helper()
	var out []guestlog.Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		r, err := guestlog.Decode(sc.Bytes())
		require.NoError(t, err, "%q", sc.Text())
		out = append(out, r)
	}
	return out
}

func startSink(t *testing.T, dir string, c *console, r *redact.Redactor, rateBytes, queue int) (*sink, func()) {
	t.Helper()
	st, err := openState(dir)
	require.NoError(t, err)
	s := newSink(c, st, r, rateBytes, 64<<10, queue, time.Hour, t.Logf)
	ctx, cancel := context.WithCancel(context.Background())
	go s.run(ctx)
	return s, func() { cancel(); <-s.done }
}

// The record being written when the agent died is written again with its Seq (a reader that
// has it skips it), and the next one follows it.
func TestSinkWritesThePendingRecordAgainStandIn(t *testing.T) {
	dir := t.TempDir()
	c := &console{}
	s, stop := startSink(t, dir, c, redact.New(), 1<<20, 16)
	s.line(serverLine{stream: guestlog.Stdout, text: "one"})
	s.line(serverLine{stream: guestlog.Stdout, text: "two"})
	require.Eventually(t, func() bool { return len(c.records(t)) == 2 }, 5*time.Second, 10*time.Millisecond)
	stop()
	first := c.records(t)

	// A crash after the state was written and before (or after) the console was: the same
	// record again, then the next Seq.
	c2 := &console{}
	s2, stop2 := startSink(t, dir, c2, redact.New(), 1<<20, 16)
	s2.line(serverLine{stream: guestlog.Stdout, text: "three"})
	require.Eventually(t, func() bool { return len(c2.records(t)) == 2 }, 5*time.Second, 10*time.Millisecond)
	stop2()
	again := c2.records(t)
	assert.Equal(t, first[1], again[0], "the pending record, unchanged")
	assert.Equal(t, first[1].Seq+1, again[1].Seq)
	assert.Equal(t, "three", again[1].Line)
}

// A console that blocks never blocks the reader of the server's output: lines over the queue
// are dropped and counted, and the count is written when the console takes lines again.
func TestSinkDropsWhatTheConsoleCannotTakeStandIn(t *testing.T) {
	c := &console{gate: make(chan struct{})}
	s, stop := startSink(t, t.TempDir(), c, redact.New(), 1<<20, 8)
	const n = 500
	done := make(chan struct{})
	go func() {
		for i := range n {
			s.line(serverLine{stream: guestlog.Stdout, text: "line " + strconv.Itoa(i)})
		}
		close(done)
	}()
	select {
	case <-done: // all handed over while the console was blocked
	case <-time.After(30 * time.Second):
		t.Fatal("handing lines to a blocked console blocked")
	}
	c.mu.Lock()
	close(c.gate)
	c.gate = nil
	c.mu.Unlock()
	stop()
	written, dropped := 0, 0
	notice := regexp.MustCompile(`^dropped (\d+) lines of the model server's output: more than the console takes \(1048576 bytes/s\)$`)
	for _, r := range c.records(t) {
		switch {
		case r.Stream == guestlog.Stdout:
			written++
		case r.Stream == guestlog.Agent:
			m := notice.FindStringSubmatch(r.Line)
			require.NotNil(t, m, r.Line)
			d, _ := strconv.Atoi(m[1])
			dropped += d
		}
	}
	assert.Equal(t, n, written+dropped, "every line written or counted")
	assert.Positive(t, dropped)
}

// Everything is redacted on its way out, and lines are cut at guestlog.MaxLine.
func TestSinkRedactsAndCutsStandIn(t *testing.T) {
	const token = "hf_QmTyxZbWvKcNpRsLdJfGhEaUoIiYtRwXqZk"
	c := &console{}
	s, stop := startSink(t, t.TempDir(), c, redact.New(token), 1<<20, 16)
	s.line(serverLine{stream: guestlog.Stderr, text: "token " + token})
	s.line(serverLine{stream: guestlog.Stdout, text: strings.Repeat("é", guestlog.MaxLine)})
	s.agentLine("started with %s", token)
	s.setStatus(guestlog.Status{Stage: guestlog.StageCrashLooping, Detail: "exited: " + token,
		LastExit: &guestlog.Exit{Code: 1, LastLines: []string{"HF_TOKEN=" + token}}}, true)
	stop()
	all := c.buf.String()
	assert.NotContains(t, all, token[3:15])
	recs := c.records(t)
	require.Len(t, recs, 5, "the status again at the end: the console ends on the current status")
	var statuses []*guestlog.Status
	for _, r := range recs {
		if r.Kind == guestlog.KindStatus {
			statuses = append(statuses, r.Status)
		}
	}
	require.Len(t, statuses, 2)
	assert.Equal(t, statuses[0], statuses[1])
	assert.Equal(t, guestlog.KindStatus, recs[4].Kind)
	for _, r := range recs {
		if r.Kind == guestlog.KindLine && r.Stream == guestlog.Stdout {
			assert.True(t, r.Truncated)
			assert.LessOrEqual(t, len(r.Line), guestlog.MaxLine)
			assert.True(t, strings.HasSuffix(r.Line, "é"), "cut on a character boundary")
		}
	}
	assertSeqs(t, recs)
}
