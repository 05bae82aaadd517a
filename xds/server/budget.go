package server

import (
	"sync"
	"time"
)

// budget bounds the bytes of large responses that are on their way to Envoy nodes: sent but
// not yet acknowledged. Without it, a fleet that connects at once (a restart of the xDS
// server, or of every Envoy) is sent its whole configuration at the same moment, and every
// one of those responses sits in gRPC's buffers, encoded, until the connection drains it: a
// peak of (nodes x configuration size) bytes. With it, at most limit bytes are in flight and
// the other nodes wait their turn, which costs them little: each waits only for responses
// ahead of it to be read.
//
// A response holds its share until the node's next request of the same type on the stream
// (its ACK or NACK), until the stream closes, or until hold has passed (a node that never
// answers cannot keep others waiting forever). Responses under min bytes (an endpoint
// change, a listener) never wait. A response larger than the whole budget goes out alone.
type budget struct {
	limit int64 // <= 0: unlimited
	min   int64
	hold  time.Duration

	mu    sync.Mutex
	used  int64
	queue []*ticket
}

// ticket is one response's share of the budget.
type ticket struct {
	b       *budget
	size    int64
	granted bool
	done    bool
	wake    func() // run (on its own goroutine) when a waiting ticket is granted
	timer   *time.Timer
}

const (
	defaultBudget     = 16 << 20
	defaultBudgetMin  = 64 << 10
	defaultBudgetHold = 10 * time.Second
)

// budgetMin is the size from which responses wait for the budget (tests lower it).
var budgetMin int64 = defaultBudgetMin

func newBudget(limit int64) *budget {
	return &budget{limit: limit, min: budgetMin, hold: defaultBudgetHold}
}

// acquire asks for size bytes. It returns nil when the response need not wait (small, or no
// limit). Otherwise the ticket is granted at once (granted true) or queued; a queued ticket
// runs wake once it is granted. The caller must release every ticket it got.
func (b *budget) acquire(size int64, wake func()) *ticket {
	if b == nil || b.limit <= 0 || size < b.min {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := &ticket{b: b, size: size, wake: wake}
	if len(b.queue) == 0 && b.fits(size) {
		b.grant(t)
		return t
	}
	b.queue = append(b.queue, t)
	return t
}

// admit is every cache's hand-off of a response to a watch: the first time, it asks for the
// response's share into *t (the watch's ticket); it reports whether the response may go now.
// When it may not, wake runs, under the cache's lock mu, once the share is granted, to answer
// the watch again from the state of that moment.
func (b *budget) admit(t **ticket, size int64, mu *sync.Mutex, wake func()) bool {
	if *t == nil {
		*t = b.acquire(size, func() {
			mu.Lock()
			defer mu.Unlock()
			wake()
		})
	}
	return (*t).isGranted()
}

// fits says whether size more bytes may go now; mu is held.
func (b *budget) fits(size int64) bool { return b.used == 0 || b.used+size <= b.limit }

// grant gives t its share and starts its hold timer; mu is held.
func (b *budget) grant(t *ticket) {
	t.granted = true
	b.used += t.size
	t.timer = time.AfterFunc(b.hold, t.release)
}

// isGranted says whether the ticket may be sent (nil tickets always may).
func (t *ticket) isGranted() bool {
	if t == nil {
		return true
	}
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	return t.granted && !t.done
}

// release gives the ticket's share back (or takes it out of the queue) and grants the
// tickets waiting behind it, in order. It may be called more than once.
func (t *ticket) release() {
	if t == nil {
		return
	}
	b := t.b
	b.mu.Lock()
	if t.done {
		b.mu.Unlock()
		return
	}
	t.done = true
	if t.granted {
		b.used -= t.size
		t.timer.Stop()
	} else {
		for i, q := range b.queue {
			if q == t {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	var woken []*ticket
	for len(b.queue) > 0 && b.fits(b.queue[0].size) {
		next := b.queue[0]
		b.queue = b.queue[1:]
		b.grant(next)
		woken = append(woken, next)
	}
	b.mu.Unlock()
	for _, w := range woken {
		// Not on this goroutine: the caller may hold the lock of the cache that wakes.
		go w.wake()
	}
}

// inFlight reports the bytes granted and the tickets waiting (for tests and metrics).
func (b *budget) inFlight() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, len(b.queue)
}
