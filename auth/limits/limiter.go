package limits

import (
	"crypto/rand"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Options configure a Limiter.
type Options struct {
	// Store is the shared Redis; nil keeps every count in this process only (one replica, or
	// tests of the decision alone).
	Store *Redis
	// Tenants gives a tenant's limits, time zone and store-down mode (nil: none, UTC, open).
	Tenants func(tenant string) Tenant
	// Keys gives a key's tenant and limits, for the tokens counted from access logs (nil: only
	// the tenant's limits count tokens).
	Keys func(keyID string) (tenant string, limits Set, ok bool)
	// Now is the clock of the windows (default time.Now); tests move it to cross boundaries.
	Now func() time.Time
	// SyncTimeout bounds a round trip to the store on the check path (default 100 ms).
	SyncTimeout time.Duration
	// FlushInterval is how often counted tokens are added in the store and the shared counts
	// read back (default 100 ms).
	FlushInterval time.Duration
	// MaxStale is how old a replica's view of a shared token count may be when a check uses
	// it; an older one (a key this replica has not seen for a while) is read at the check, in
	// its round trip (default 2 s). Fresher views are read again in the background.
	MaxStale time.Duration
	// Grace is how long an unreachable store's last counts keep being enforced before a
	// tenant's onStoreDown applies (default 30 s).
	Grace time.Duration
	// LeaseDivisor and MaxLease size the units a replica reserves at once for a request limit:
	// remaining/LeaseDivisor, at least 1 and at most MaxLease (defaults 128 and 1024). Near the
	// limit a lease is one unit: every request is a round trip and the count is exact. A lease
	// running low (under a quarter left) is renewed in the background, so a key far from its
	// limits never waits for the store.
	LeaseDivisor, MaxLease int64
	Log                    *slog.Logger
}

// Limiter decides requests against limits and counts tokens. It is safe for concurrent use.
type Limiter struct {
	opt Options

	mu       sync.RWMutex
	counters map[ckey]*counter

	// flushMu makes flushes one at a time: a push that failed must be sent again, as it was,
	// before any later one.
	flushMu sync.Mutex
	replica string // names this limiter's pushes to the store
	pushes  int64  // the number of the last push
	unacked *push  // a push that failed, sent again first

	downSince atomic.Int64 // Unix nanoseconds of the first failure of an outage; 0: up
	restore   atomic.Bool  // the store came back: push floors once
	metrics   *metrics
}

type ckey struct {
	tenant, key string // key "" is the tenant's own counter
	kind        Kind
}

// counter is one replica's view of one shared count in its current window.
type counter struct {
	mu         sync.Mutex
	name       string // the Redis key of the current window
	start, end time.Time
	// shared is the store's value as last seen (including units leased to any replica);
	// pending is what this replica counted that the store does not have yet; lease is
	// request units reserved in the store for this replica and not spent. pushing is the
	// part of pending in a push not answered yet: the store may have it already, so a value
	// read meanwhile is taken without it (observe).
	shared, pending, lease, pushing int64
	seen                            bool  // shared was read in this window
	atCap                           bool  // the store refused a reservation: a hard request limit is reached
	grant                           int64 // the size of the last lease
	readAt                          int64 // Unix nanoseconds (real clock) when shared was last read
	wantRead                        bool  // a check found shared stale: the next flush reads it
	refilling                       bool  // a background reservation is under way
	touched                         int64 // Unix nanoseconds (real clock) of the last use
}

// New returns a limiter; call Run to keep the shared counts flowing.
func New(opt Options) *Limiter {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.SyncTimeout <= 0 {
		opt.SyncTimeout = 100 * time.Millisecond
	}
	if opt.FlushInterval <= 0 {
		opt.FlushInterval = 100 * time.Millisecond
	}
	if opt.MaxStale <= 0 {
		opt.MaxStale = 2 * time.Second
	}
	if opt.Grace <= 0 {
		opt.Grace = 30 * time.Second
	}
	if opt.LeaseDivisor <= 0 {
		opt.LeaseDivisor = 128
	}
	if opt.MaxLease <= 0 {
		opt.MaxLease = 1024
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	return &Limiter{opt: opt, counters: map[ckey]*counter{}, metrics: newMetrics(), replica: replicaID()}
}

func (l *Limiter) tenant(name string) Tenant {
	if l.opt.Tenants != nil {
		t := l.opt.Tenants(name)
		if t.Location == nil {
			t.Location = time.UTC
		}
		return t
	}
	return Tenant{Location: time.UTC, OnStoreDown: v1alpha1.StoreDownOpen}
}

// get returns the counter of k, rolled over to the window of now.
func (l *Limiter) get(k ckey, now time.Time, loc *time.Location) *counter {
	l.mu.RLock()
	c := l.counters[k]
	l.mu.RUnlock()
	if c == nil {
		l.mu.Lock()
		if c = l.counters[k]; c == nil {
			c = &counter{}
			l.counters[k] = c
		}
		l.mu.Unlock()
	}
	c.mu.Lock()
	if now.Before(c.start) || !now.Before(c.end) {
		start, end := Window(k.kind, now, loc)
		if !start.Equal(c.start) {
			c.name, c.start, c.end = counterKey(k.tenant, k.key, k.kind, start), start, end
			c.shared, c.pending, c.lease, c.pushing, c.seen, c.atCap, c.grant, c.wantRead = 0, 0, 0, 0, false, false, 0, false
		}
	}
	c.touched = time.Now().UnixNano()
	c.mu.Unlock()
	return c
}

// observe is the store's value v as this replica's view of the others' counts.
func (c *counter) observe(v int64) int64 { return observed(c.shared, c.pushing, v) }

// observed is v without the push in flight, whose delta pending still holds (counting it
// twice would refuse a request the budget has room for), and never below shared: the store
// may or may not have applied the push when it answered a read.
func observed(shared, pushing, v int64) int64 { return max(shared, v-pushing) }

// storeDown reports whether the store is unreachable, and since when.
func (l *Limiter) storeDown() (bool, time.Time) {
	n := l.downSince.Load()
	if n == 0 {
		return l.opt.Store == nil, time.Time{}
	}
	return true, time.Unix(0, n)
}

func (l *Limiter) markDown(err error) {
	if l.downSince.CompareAndSwap(0, time.Now().UnixNano()) {
		l.opt.Log.Warn("limits store unreachable: enforcing the last known counts", "err", err, "grace", l.opt.Grace)
		l.metrics.storeUp.Set(0)
	}
	l.metrics.storeErrors.Inc()
}

func (l *Limiter) markUp() {
	if n := l.downSince.Swap(0); n != 0 {
		l.restore.Store(true)
		l.opt.Log.Info("limits store reachable again: restoring counts", "down", time.Since(time.Unix(0, n)).Round(time.Millisecond))
		l.metrics.storeUp.Set(1)
	}
}

// replicaID names a limiter's pushes: random, so that no two replicas (nor a restarted one)
// share the store's guard.
func replicaID() string { return rand.Text() }
