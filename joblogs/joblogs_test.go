package joblogs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/joblogs/joblogstest"
)

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

func query() joblogs.Query {
	return joblogs.Query{Namespace: "acme", Tenant: "acme", Job: "chat", Tail: -1}
}

// collect reads the whole stream (not following).
func collect(t *testing.T, r *joblogs.Reader, q joblogs.Query) []joblogs.Entry {
	t.Helper()
	var out []joblogs.Entry
	require.NoError(t, r.Stream(context.Background(), q, func(e joblogs.Entry) error { out = append(out, e); return nil }))
	return out
}

func lines(es []joblogs.Entry) []string {
	var out []string
	for _, e := range es {
		switch e.Kind {
		case joblogs.KindLine:
			out = append(out, fmt.Sprintf("%s %s", e.VM, e.Line))
		default:
			out = append(out, fmt.Sprintf("%s %s: %s", e.VM, e.Kind, e.Text))
		}
	}
	return out
}

// Two replicas' consoles, with the kernel's and cloud-init's lines among the agent's records:
// the records only, merged by the agent's time, each tagged with its replica, node and VM;
// narrowed to a replica, or to the lines a search matches; a tail per VM.
func TestReadMergesAndFilters(t *testing.T) {
	s := joblogstest.New(t)
	a := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	b := s.Pod("acme", "chat", "virt-launcher-chat-r1-n0-fghij", 1, 0)
	a.Kernel("[    0.000000] Linux version 6.1.0-28-amd64")
	a.Line(t0.Add(1*time.Second), "INFO vLLM API server version 0.11.0")
	b.Kernel("Cloud-init v. 22.4.2 running 'modules:final'")
	b.Line(t0.Add(2*time.Second), "INFO Loading weights took 12.4 seconds")
	a.Line(t0.Add(3*time.Second), "<script>alert(1)</script> stays text")
	b.Line(t0.Add(4*time.Second), "ERROR torch.OutOfMemoryError: CUDA out of memory")
	r := &joblogs.Reader{Cluster: s}

	got := collect(t, r, query())
	assert.Equal(t, []string{
		"chat-r0-n0 INFO vLLM API server version 0.11.0",
		"chat-r1-n0 INFO Loading weights took 12.4 seconds",
		"chat-r0-n0 <script>alert(1)</script> stays text",
		"chat-r1-n0 ERROR torch.OutOfMemoryError: CUDA out of memory",
	}, lines(got))
	assert.Equal(t, int32(1), got[1].Replica)
	assert.Equal(t, "virt-launcher-chat-r1-n0-fghij", got[1].Pod)
	assert.Equal(t, guestlog.Stderr, got[1].Stream)

	one := int32(1)
	q := query()
	q.Replica = &one
	assert.Equal(t, []string{"chat-r1-n0 INFO Loading weights took 12.4 seconds", "chat-r1-n0 ERROR torch.OutOfMemoryError: CUDA out of memory"}, lines(collect(t, r, q)))

	q = query()
	q.Search = "OUTOFMEMORY"
	assert.Equal(t, []string{"chat-r1-n0 ERROR torch.OutOfMemoryError: CUDA out of memory"}, lines(collect(t, r, q)))

	q = query()
	q.Tail = 1
	assert.Equal(t, []string{"chat-r0-n0 <script>alert(1)</script> stays text", "chat-r1-n0 ERROR torch.OutOfMemoryError: CUDA out of memory"},
		lines(collect(t, r, q)), "the last console line of each VM")
	for _, o := range s.Options() {
		assert.Equal(t, joblogs.Container, o.Container)
		assert.True(t, o.Timestamps, "the kubelet's time is where a resumed follow starts")
	}

	q = query()
	q.Job = "other"
	assert.Equal(t, []string{" notice: no VM of the job acme/other runs (no virt-launcher pod): nothing to show yet"}, lines(collect(t, r, q)))
	s.ListErr = errors.New(`pods is forbidden: User "x" cannot list resource "pods"`)
	err := r.Stream(context.Background(), query(), func(joblogs.Entry) error { return nil })
	assert.ErrorContains(t, err, "list the virt-launcher pods of acme/chat in namespace acme: pods is forbidden")
}

// follower runs a follow in the background and collects what it shows.
type follower struct {
	mu     sync.Mutex
	got    []joblogs.Entry
	cancel func()
	done   chan error
}

func follow(r *joblogs.Reader, q joblogs.Query) *follower {
	q.Follow = true
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cancel: cancel, done: make(chan error, 1)}
	go func() {
		f.done <- r.Stream(ctx, q, func(e joblogs.Entry) error {
			f.mu.Lock()
			f.got = append(f.got, e)
			f.mu.Unlock()
			return nil
		})
	}()
	return f
}

func (f *follower) lines() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lines(f.got)
}

func (f *follower) wait(t *testing.T, n int) []string {
	t.Helper()
	require.Eventually(t, func() bool { return len(f.lines()) >= n }, 10*time.Second, 5*time.Millisecond, "%d entries; have %q", n, f.lines())
	return f.lines()
}

func (f *follower) stop(t *testing.T) {
	f.cancel()
	select {
	case err := <-f.done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the follow did not end with its context")
	}
}

// A follow whose stream drops (an API server restart, a cut connection) resumes at the second
// of the last line it read (sinceTime has no finer precision, so the kubelet sends that
// second again) and shows every line exactly once, by the agent's record numbers.
func TestFollowResumesWithoutRepeats(t *testing.T) {
	s := joblogstest.New(t)
	c := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	r := &joblogs.Reader{Cluster: s, Retry: 10 * time.Millisecond}
	f := follow(r, query())
	defer f.stop(t)
	for i := range 5 {
		c.Line(time.Now(), fmt.Sprintf("line %d", i))
	}
	f.wait(t, 5)
	s.Drop()
	for i := 5; i < 10; i++ {
		c.Line(time.Now(), fmt.Sprintf("line %d", i))
	}
	got := f.wait(t, 11)
	var shown []string
	for _, l := range got {
		if strings.HasPrefix(l, "chat-r0-n0 line") {
			shown = append(shown, strings.TrimPrefix(l, "chat-r0-n0 "))
		}
	}
	assert.Equal(t, []string{"line 0", "line 1", "line 2", "line 3", "line 4", "line 5", "line 6", "line 7", "line 8", "line 9"}, shown)
	assert.Contains(t, got, "chat-r0-n0 notice: the console log stream of chat-r0-n0 was cut (unexpected EOF); resuming where it stopped")
	opts := s.Options()
	require.GreaterOrEqual(t, len(opts), 2)
	last := opts[len(opts)-1]
	require.NotNil(t, last.SinceTime, "the resumed stream starts at the last line's time")
	assert.Nil(t, last.TailLines)
}

// Records a new agent numbers from where the old one stopped (guestlog's Seq survives a
// restart); an agent that lost its state is said so, and its lines still shown.
func TestAgentNumbering(t *testing.T) {
	s := joblogstest.New(t)
	c := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	c.Line(t0, "before")
	c.Record(guestlog.Record{Seq: 1, Time: t0, Kind: guestlog.KindLine, Line: "before"}) // the same record, read twice
	c.Seq = 0
	c.Line(t0.Add(time.Minute), "after the state was lost")
	got := lines(collect(t, &joblogs.Reader{Cluster: s}, query()))
	assert.Equal(t, []string{"chat-r0-n0 before",
		"chat-r0-n0 notice: the agent of chat-r0-n0 numbers its records from 1 again: its state was lost",
		"chat-r0-n0 after the state was lost"}, got)
}

// The agent repeats its status every interval: a reader shows it when the stage, the restarts
// or the last exit change, in the words of the job's stages.
func TestStatusShownWhenItChanges(t *testing.T) {
	s := joblogstest.New(t)
	c := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	load := guestlog.Status{Stage: guestlog.StageLoadingModel, Since: t0, Detail: "Loading safetensors checkpoint shards: 3/8"}
	c.Status(t0, load)
	c.Status(t0.Add(15*time.Second), load)
	c.Line(t0.Add(16*time.Second), "torch.OutOfMemoryError: CUDA out of memory")
	crash := guestlog.Status{Stage: guestlog.StageCrashLooping, Since: t0.Add(17 * time.Second), Restarts: 1,
		LastExit: &guestlog.Exit{Code: 1, After: 17 * time.Second, At: t0.Add(17 * time.Second), LastLines: []string{"torch.OutOfMemoryError: CUDA out of memory"}}}
	c.Status(t0.Add(17*time.Second), crash)
	c.Status(t0.Add(32*time.Second), crash)
	crash.Restarts, crash.LastExit.At = 2, t0.Add(40*time.Second)
	c.Status(t0.Add(40*time.Second), crash)
	got := lines(collect(t, &joblogs.Reader{Cluster: s}, query()))
	assert.Equal(t, []string{
		"chat-r0-n0 status: loading-model: loading the model: Loading safetensors checkpoint shards: 3/8",
		"chat-r0-n0 torch.OutOfMemoryError: CUDA out of memory",
		`chat-r0-n0 status: crash-looping: exit 1 after 17 s, 1 restart; last line: "torch.OutOfMemoryError: CUDA out of memory"`,
		`chat-r0-n0 status: crash-looping: exit 1 after 17 s, 2 restarts; last line: "torch.OutOfMemoryError: CUDA out of memory"`,
	}, got)
}

// A VM started again while a follow is open (a restart makes a new VM instance and pod) is
// said so and followed from its first line; a pod that ends is said so too.
func TestFollowFindsNewInstances(t *testing.T) {
	s := joblogstest.New(t)
	old := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-aaaaa", 0, 0)
	old.Line(time.Now(), "old instance")
	f := follow(&joblogs.Reader{Cluster: s, PodPoll: 20 * time.Millisecond, Retry: 10 * time.Millisecond}, query())
	defer f.stop(t)
	f.wait(t, 1)
	s.End("virt-launcher-chat-r0-n0-aaaaa")
	fresh := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-bbbbb", 0, 0)
	fresh.Line(time.Now(), "new instance")
	got := f.wait(t, 4)
	assert.Contains(t, got, "chat-r0-n0 notice: replica 0: a new instance of VM chat-r0-n0 started (pod virt-launcher-chat-r0-n0-bbbbb): its guest booted again")
	assert.Contains(t, got, "chat-r0-n0 new instance")
	assert.Contains(t, got, "chat-r0-n0 notice: VM instance of chat-r0-n0 ended (pod virt-launcher-chat-r0-n0-aaaaa)")
}

// A client that does not take the lines holds the reads back: of a replica's 30,000 lines
// (4 MB), a stuck client's reader reads only as far as its bounded buffers.
func TestSlowClientHoldsTheReadsBack(t *testing.T) {
	s := joblogstest.New(t)
	c := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	const n = 30_000
	batch := make([]string, 0, 1000)
	for i := range n {
		b, err := guestlog.Encode(guestlog.Record{Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Millisecond), Kind: guestlog.KindLine,
			Stream: guestlog.Stdout, Line: fmt.Sprintf("INFO request %06d finished in 41 ms", i)})
		require.NoError(t, err)
		batch = append(batch, string(b))
		if len(batch) == cap(batch) {
			require.NoError(t, c.L.Append(batch...))
			batch = batch[:0]
		}
	}
	stuck := make(chan struct{})
	shown := 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		q := query()
		q.Follow = true
		done <- (&joblogs.Reader{Cluster: s}).Stream(ctx, q, func(joblogs.Entry) error {
			shown++
			if shown == 10 {
				<-stuck
			}
			return nil
		})
	}()
	require.Eventually(t, func() bool { return s.BytesServed() > 0 }, 5*time.Second, time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	served := s.BytesServed()
	assert.Less(t, served, int64(200<<10), "while the client is stuck, the reads stop: %d bytes of %d lines read", served, n)
	close(stuck)
	require.Eventually(t, func() bool { return s.BytesServed() > 1<<20 }, 60*time.Second, 10*time.Millisecond, "reads go on once the client takes lines")
	cancel()
	require.NoError(t, <-done)
}

// A console line longer than joblogs.MaxConsoleLine is skipped with a notice; the next one is read.
func TestLongLineSkipped(t *testing.T) {
	s := joblogstest.New(t)
	c := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	c.Kernel(strings.Repeat("x", joblogs.MaxConsoleLine+10))
	c.Line(t0, "after")
	got := lines(collect(t, &joblogs.Reader{Cluster: s}, query()))
	require.Len(t, got, 2)
	assert.Contains(t, got[0], "bytes was skipped (longer than 65536)")
	assert.Equal(t, "chat-r0-n0 after", got[1])
}

// The agent's last status comes from a short tail of the current instance's pod; a status
// older than three of the agent's intervals is not used.
func TestAgentReports(t *testing.T) {
	s := joblogstest.New(t)
	now := time.Now()
	c := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	c.Status(now.Add(-20*time.Second), guestlog.Status{Stage: guestlog.StageLoadingModel, Since: now.Add(-time.Minute)})
	c.Line(now.Add(-10*time.Second), "loading")
	c.Status(now.Add(-5*time.Second), guestlog.Status{Stage: guestlog.StageCrashLooping, Restarts: 2})
	for i := range 50 {
		c.Kernel(fmt.Sprintf("[  %d.0] kernel line", i))
	}
	stale := s.Pod("acme", "chat", "virt-launcher-chat-r1-n0-fghij", 1, 0)
	stale.Status(now.Add(-time.Hour), guestlog.Status{Stage: guestlog.StagePullingImage})
	vmis := []kubevirtv1.VirtualMachineInstance{
		{ObjectMeta: metav1.ObjectMeta{Name: "chat-r0-n0", UID: types.UID("vmi-virt-launcher-chat-r0-n0-abcde")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "chat-r1-n0"}},
	}
	cache := &joblogs.StatusCache{}
	got := joblogs.AgentReports(context.Background(), s, cache, "acme", "acme", "chat", vmis, []string{"chat-r0-n0", "chat-r1-n0", "chat-r2-n0"}, now)
	require.Len(t, got, 1, "the stale report and the VM without a pod are left out")
	assert.Equal(t, guestlog.StageCrashLooping, got["chat-r0-n0"].Status.Stage)
	assert.Equal(t, 2, got["chat-r0-n0"].Status.Restarts)
	asked := len(s.Options())
	joblogs.AgentReports(context.Background(), s, cache, "acme", "acme", "chat", vmis, []string{"chat-r0-n0"}, now)
	assert.Equal(t, asked, len(s.Options()), "read once per TTL")
	for _, o := range s.Options() {
		assert.Equal(t, int64(joblogs.StatusTail), *o.TailLines)
		assert.Equal(t, int64(joblogs.StatusLimitBytes), *o.LimitBytes)
	}
}

// A follow reads at most MaxRate lines a second: a VM printing faster is read more slowly,
// and once the follow is MaxLag behind it skips to the present, with a notice, and shows
// what comes next.
func TestFollowMaxRate(t *testing.T) {
	s := joblogstest.New(t)
	c := s.Pod("acme", "chat", "virt-launcher-chat-r0-n0-abcde", 0, 0)
	q := query()
	q.Tail, q.MaxRate = 0, 100
	f := follow(&joblogs.Reader{Cluster: s, MaxLag: 300 * time.Millisecond}, q)
	defer f.stop(t)
	require.Eventually(t, func() bool { return s.OpenStreams() == 1 }, 5*time.Second, 5*time.Millisecond)
	var burst []string
	for i := range 1000 {
		b, err := guestlog.Encode(guestlog.Record{Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Millisecond), Kind: guestlog.KindLine, Line: fmt.Sprintf("burst %d", i)})
		require.NoError(t, err)
		burst = append(burst, string(b))
	}
	require.NoError(t, c.L.Append(burst...))
	c.Seq = 1000
	f.wait(t, 100)
	time.Sleep(time.Second)
	c.Line(time.Now(), "after the burst")
	require.Eventually(t, func() bool { l := f.lines(); return l[len(l)-1] == "chat-r0-n0 after the burst" }, 10*time.Second, 5*time.Millisecond)
	got := f.lines()
	shown := 0
	for _, l := range got {
		if strings.HasPrefix(l, "chat-r0-n0 burst") {
			shown++
		}
	}
	assert.Less(t, shown, 500, "the rest of the burst was skipped")
	assert.Contains(t, strings.Join(got, "\n"), "chat-r0-n0 notice: this follow fell 300ms behind the lines of chat-r0-n0 (it reads at most 100 lines a second): skipping to the present")
	assert.Equal(t, "chat-r0-n0 after the burst", got[len(got)-1])
}
