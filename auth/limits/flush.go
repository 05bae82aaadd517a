package limits

import (
	"context"
	"time"
)

// Count adds the tokens of one finished request (from its access-log entry) to the token
// counters of its key and its tenant that have a limit. It never waits for the store: the
// counts are pushed by Run within FlushInterval.
func (l *Limiter) Count(tenant, keyID string, tokens int64, at time.Time) {
	if tokens <= 0 {
		return
	}
	var keyLimits Set
	if l.opt.Keys != nil && keyID != "" {
		if t, s, ok := l.opt.Keys(keyID); ok && t == tenant {
			keyLimits = s
		}
	}
	pol := l.tenant(tenant)
	if keyID != "" {
		keyLimits = keyLimits.Or(pol.KeyDefaults)
	}
	if keyLimits.Empty() && pol.Limits.Empty() {
		return
	}
	now := l.opt.Now()
	if at.IsZero() || at.After(now) {
		at = now
	}
	for k := TokensPerMinute; k < NumKinds; k++ {
		if keyLimits[k].Value > 0 {
			l.add(ckey{tenant, keyID, k}, at, now, pol, tokens)
		}
		if pol.Limits[k].Value > 0 {
			l.add(ckey{tenant, "", k}, at, now, pol, tokens)
		}
	}
	l.metrics.countedTokens.Add(float64(tokens))
}

// add counts n on k's counter when at falls in its current window: tokens of a request that
// ended before the window rolled over belong to the window they were spent in, which is over.
func (l *Limiter) add(k ckey, at, now time.Time, pol Tenant, n int64) {
	c := l.get(k, now, pol.Location)
	c.mu.Lock()
	if !at.Before(c.start) {
		c.pending += n
	}
	c.mu.Unlock()
}

// activeFor is how long a counter nobody used is still read back from the store.
const activeFor = 30 * time.Second

// Run pushes counted tokens (and requests counted while the store was down) to the store and
// reads the shared counts back, every FlushInterval, until ctx ends; then it pushes once more.
// While the store is unreachable it pings it instead, and once it answers, every counter is
// pushed with its last known value as a floor, so a Redis that restarted empty gets its
// counts back from the replicas.
func (l *Limiter) Run(ctx context.Context) {
	if l.opt.Store == nil {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(l.opt.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), time.Second)
			l.Flush(fctx)
			cancel()
			return
		case <-t.C:
			l.Flush(ctx)
		}
	}
}

// Flush is one round of Run.
func (l *Limiter) Flush(ctx context.Context) {
	if l.opt.Store == nil {
		return
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if l.downSince.Load() != 0 {
		pctx, cancel := context.WithTimeout(ctx, l.opt.SyncTimeout)
		err := l.opt.Store.Ping(pctx)
		cancel()
		if err != nil {
			l.metrics.storeErrors.Inc()
			return
		}
		l.markUp()
	}
	// A push that failed goes first, as it was: its counts stay pending until it lands, and
	// the store applies it once even if the failed attempt reached it.
	if l.unacked != nil {
		l.unacked.id.Again = true
		if !l.push(ctx, l.unacked) {
			return
		}
		l.unacked = nil
	}
	restore := l.restore.Swap(false)
	cs, ops := l.collect(restore)
	if len(ops) == 0 {
		// Nothing to push: a ping, so that a store gone down is noticed even by a replica
		// whose checks are all served from its leases.
		pctx, cancel := context.WithTimeout(ctx, l.opt.SyncTimeout)
		defer cancel()
		if err := l.opt.Store.Ping(pctx); err != nil {
			l.markDown(err)
		}
		return
	}
	l.pushes++
	b := &push{id: PushID{Replica: l.replica, Seq: l.pushes}, cs: cs, ops: ops}
	if !l.push(ctx, b) {
		l.unacked = b
		if restore {
			l.restore.Store(true)
		}
	}
}

// push is one push of counts to the store, kept to be sent again when it fails.
type push struct {
	id  PushID
	cs  []*counter
	ops []Op
}

// push sends b and, once the store has it, takes its deltas off the counters' pending counts.
func (l *Limiter) push(ctx context.Context, b *push) bool {
	vals := make([]int64, len(b.ops))
	ctx, cancel := context.WithTimeout(ctx, 4*l.opt.SyncTimeout)
	defer cancel()
	if err := l.opt.Store.Push(ctx, b.id, b.ops, vals); err != nil {
		l.markDown(err)
		return false
	}
	read := time.Now().UnixNano()
	for i, c := range b.cs {
		c.mu.Lock()
		if c.name == b.ops[i].Key { // the window did not roll meanwhile
			c.pending -= b.ops[i].Delta
			c.pushing -= b.ops[i].Delta
			c.shared = max(c.shared, vals[i])
			c.seen, c.readAt = true, read
		}
		c.mu.Unlock()
	}
	return true
}

// collect lists the counters to push: those with pending counts, those a check found stale
// (to read them back), and with restore every counter of a current window (with its floor).
// Counters whose window ended long ago are dropped.
func (l *Limiter) collect(restore bool) ([]*counter, []Op) {
	now := l.opt.Now()
	real := time.Now().UnixNano()
	var cs []*counter
	var ops []Op
	var stale []ckey
	l.mu.RLock()
	for k, c := range l.counters {
		c.mu.Lock()
		active := real-c.touched < int64(activeFor)
		switch {
		case c.pending != 0 || (restore && now.Before(c.end)) || (c.wantRead && now.Before(c.end)):
			o := Op{Key: c.name, Delta: c.pending, TTL: c.end.Sub(now) + time.Hour}
			c.pushing = c.pending
			if restore {
				o.Floor = c.shared
			}
			c.wantRead = false
			cs, ops = append(cs, c), append(ops, o)
		case !active && now.Sub(c.end) > time.Hour:
			stale = append(stale, k)
		}
		c.mu.Unlock()
	}
	l.mu.RUnlock()
	if len(stale) > 0 {
		l.mu.Lock()
		for _, k := range stale {
			delete(l.counters, k)
		}
		l.mu.Unlock()
	}
	return cs, ops
}
