package joblogs

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// Query says which lines of a job to show.
type Query struct {
	// Namespace holds the job's VMs in the tenant's cluster; Tenant and Job select them.
	Namespace, Tenant, Job string
	// Replica and Node narrow to one replica, one node rank (nil: all).
	Replica, Node *int32
	// Follow keeps the stream open for new lines, and for VM instances started later.
	Follow bool
	// Since leaves out console lines before it (zero: none left out).
	Since time.Time
	// Tail is how many of each VM's last console lines to start from (< 0: all).
	Tail int64
	// Search keeps the server's lines that contain it, ignoring case (statuses and notices
	// are always shown).
	Search string
	// MaxRate, following, is how many console lines a second the follow reads at most (0: no
	// limit): a VM printing faster is read more slowly (the kubelet's stream waits), and once
	// the follow is Reader.MaxLag behind, it skips to the present with a notice. Reading
	// costs at most MaxRate lines a second, however fast a VM prints.
	MaxRate float64
}

// Reader reads jobs' logs from one cluster.
type Reader struct {
	Cluster Cluster
	// PodPoll is how often a follow looks for new VM instances (default 5 s); Retry how long
	// it waits before opening a stream again (default 1 s, doubling up to 10 s).
	PodPoll, Retry time.Duration
	// Window is how long a follow holds a line back for an earlier line of another VM
	// (default 100 ms); lines of one VM are never held.
	Window time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Idle, when set, is called when Stream has shown what it had and waits for more: where a
	// writer flushes (one flush per burst of lines, not per line).
	Idle func() error
	// Limit, when set, bounds the console lines every follow of this Reader's user reads a
	// second, together (a server's share for all its clients), as MaxRate bounds one follow.
	Limit *rate.Limiter
	// MaxLag is how far behind its VM's lines a rate-bound follow may fall before it skips to
	// the present (default 10 s).
	MaxLag time.Duration
}

func (r *Reader) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reader) retry() time.Duration { return cmp.Or(r.Retry, time.Second) }

// maxHeld bounds the lines a merge holds back to order them: past it, the oldest goes out.
const maxHeld = 256

// item is what a pod's reader hands the merge: an entry, or its end.
type item struct {
	src  int
	e    Entry
	done bool
}

// Stream shows the job's lines, statuses and notices to emit, merged over its VMs by time,
// until they end (or, following, until ctx ends or emit fails). Each VM's log is read in a
// goroutine of its own only as fast as emit returns. The error is emit's, or why the pods
// could not be listed.
func (r *Reader) Stream(ctx context.Context, q Query, emit func(Entry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	sel := Selector(q.Tenant, q.Job, q.Replica, q.Node)
	pods, err := r.Cluster.Pods(ctx, q.Namespace, sel)
	if err != nil {
		return fmt.Errorf("list the virt-launcher pods of %s/%s in namespace %s: %w", q.Tenant, q.Job, q.Namespace, err)
	}
	in := make(chan item, 16)
	m := newMerge(q.Follow, cmp.Or(r.Window, 100*time.Millisecond))
	var lim *rate.Limiter
	if q.Follow && q.MaxRate > 0 {
		lim = rate.NewLimiter(rate.Limit(q.MaxRate), max(int(q.MaxRate), 1))
	}
	started := map[types.UID]bool{}
	start := func(s Source, fresh bool) {
		started[s.UID] = true
		idx := m.add()
		p := &podReader{r: r, q: &q, src: s, lims: slices.DeleteFunc([]*rate.Limiter{lim, r.Limit}, func(l *rate.Limiter) bool { return l == nil })}
		p.send = func(e Entry) bool {
			select {
			case in <- item{src: idx, e: e}:
				return true
			case <-ctx.Done():
				return false
			}
		}
		wg.Go(func() {
			p.run(ctx, fresh)
			select {
			case in <- item{src: idx, done: true}:
			case <-ctx.Done():
			}
		})
	}
	srcs := sources(pods)
	if len(srcs) == 0 {
		if err := emit(Entry{Kind: KindNotice, Time: r.now(), Text: noPods(q)}); err != nil {
			return err
		}
	}
	for _, s := range srcs {
		start(s, false)
	}
	var poll <-chan time.Time
	if q.Follow {
		t := time.NewTicker(cmp.Or(r.PodPoll, 5*time.Second))
		defer t.Stop()
		poll = t.C
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	shown := false
	for {
		for e, ok := m.pop(r.now()); ok; e, ok = m.pop(r.now()) {
			if err := emit(e); err != nil {
				return err
			}
			shown = true
		}
		if shown && r.Idle != nil && len(in) == 0 {
			if err := r.Idle(); err != nil {
				return err
			}
			shown = false
		}
		if !q.Follow && m.finished() {
			return nil
		}
		var wake <-chan time.Time
		if d, ok := m.due(r.now()); ok {
			timer.Reset(d)
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case it := <-in:
			if it.done {
				m.end(it.src)
			} else {
				m.push(it.src, it.e, r.now())
			}
		case <-wake:
		case <-poll:
			pods, err := r.Cluster.Pods(ctx, q.Namespace, sel)
			if err != nil {
				continue // the readers go on; the next poll tries again
			}
			for _, s := range sources(pods) {
				if !started[s.UID] {
					e := s.notice(r.now(), "replica %d: a new instance of VM %s started (pod %s): its guest booted again", s.Replica, s.VM, s.Pod)
					if err := emit(e); err != nil {
						return err
					}
					start(s, true)
				}
			}
		}
	}
}

func noPods(q Query) string {
	what := "the job " + q.Tenant + "/" + q.Job
	switch {
	case q.Replica != nil && q.Node != nil:
		what = fmt.Sprintf("replica %d, node %d of %s", *q.Replica, *q.Node, what)
	case q.Replica != nil:
		what = fmt.Sprintf("replica %d of %s", *q.Replica, what)
	case q.Node != nil:
		what = fmt.Sprintf("node %d of %s", *q.Node, what)
	}
	if q.Follow {
		return "no VM of " + what + " runs yet (no virt-launcher pod); waiting for one"
	}
	return "no VM of " + what + " runs (no virt-launcher pod): nothing to show yet"
}

// gone says whether a pod has ended (or cannot be found any more).
func (r *Reader) gone(ctx context.Context, q *Query, s Source) bool {
	pods, err := r.Cluster.Pods(ctx, q.Namespace, Selector(q.Tenant, q.Job, &s.Replica, &s.Node))
	if err != nil {
		return false // cannot tell: try the stream again
	}
	for i := range pods {
		if pods[i].UID == s.UID {
			return ended(&pods[i])
		}
	}
	return true
}

// merge orders the entries of several VMs' streams by time: an entry goes out once every
// stream that is still open has one waiting (so the earliest is known), or once it has
// waited Window while following (a VM that prints nothing holds no one back for long), or
// when more than maxHeld are waiting. Not following, streams end, and the order is exact.
type merge struct {
	follow bool
	window time.Duration
	h      entryHeap
	held   []int  // entries waiting, per stream
	open   []bool // streams not ended
	nOpen  int
	seq    uint64
}

func newMerge(follow bool, window time.Duration) *merge {
	return &merge{follow: follow, window: window}
}

func (m *merge) add() int {
	m.held, m.open = append(m.held, 0), append(m.open, true)
	m.nOpen++
	return len(m.open) - 1
}

func (m *merge) end(src int) {
	if m.open[src] {
		m.open[src] = false
		m.nOpen--
	}
}

func (m *merge) push(src int, e Entry, now time.Time) {
	m.seq++
	heap.Push(&m.h, held{e: e, src: src, arrived: now, seq: m.seq})
	m.held[src]++
}

func (m *merge) finished() bool { return m.nOpen == 0 && m.h.Len() == 0 }

// pop is the next entry to show, if one may go now.
func (m *merge) pop(now time.Time) (Entry, bool) {
	if m.h.Len() == 0 {
		return Entry{}, false
	}
	go_ := m.h.Len() > maxHeld || m.allWaiting()
	if !go_ && m.follow {
		go_ = !now.Before(m.oldestArrival().Add(m.window))
	}
	if !go_ {
		return Entry{}, false
	}
	x := heap.Pop(&m.h).(held)
	m.held[x.src]--
	return x.e, true
}

// allWaiting: every open stream has an entry waiting.
func (m *merge) allWaiting() bool {
	for i, open := range m.open {
		if open && m.held[i] == 0 {
			return false
		}
	}
	return true
}

func (m *merge) oldestArrival() time.Time {
	return slices.MinFunc(m.h, func(a, b held) int { return a.arrived.Compare(b.arrived) }).arrived
}

// due is how long until a held entry may go (following only).
func (m *merge) due(now time.Time) (time.Duration, bool) {
	if !m.follow || m.h.Len() == 0 {
		return 0, false
	}
	return max(m.oldestArrival().Add(m.window).Sub(now), time.Millisecond), true
}

type held struct {
	e       Entry
	src     int
	arrived time.Time
	seq     uint64
}

// entryHeap orders by the entry's time, then by arrival (a stream's own order stands).
type entryHeap []held

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if c := h[i].e.Time.Compare(h[j].e.Time); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h entryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)   { *h = append(*h, x.(held)) }
func (h *entryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = held{}
	*h = old[:len(old)-1]
	return x
}
