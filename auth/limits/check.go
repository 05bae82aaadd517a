package limits

import (
	"context"
	"time"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Scope says whose limit a figure is.
type Scope uint8

const (
	ScopeKey Scope = iota
	ScopeTenant
)

func (s Scope) String() string {
	if s == ScopeTenant {
		return "tenant"
	}
	return "key"
}

// Hit is one limit as a request met it.
type Hit struct {
	Scope Scope
	Kind  Kind
	Rule  Rule
	// Used is the count after this request (requests) or so far (tokens), as this replica
	// knows it.
	Used int64
	// Reset is when the window ends.
	Reset time.Time
}

// Remaining is what is left of the limit (never below 0).
func (h Hit) Remaining() int64 { return max(0, h.Rule.Value-h.Used) }

// Result is the decision on one request.
type Result struct {
	// Allowed is false when a hard limit is reached (429) or the store has been down longer
	// than the grace for a tenant that fails closed (503).
	Allowed bool
	// StoreClosed: refused because the store is down and the tenant fails closed.
	StoreClosed bool
	// Denied is the limit that refused the request (the one that resets last, when several).
	Denied Hit
	// Requests and Tokens are the limits shown in the x-ratelimit-* headers: of each sort,
	// the one with the least left; ok is false when the request has no limit of that sort.
	Requests, Tokens       Hit
	HasRequests, HasTokens bool
	// Over are the soft limits past their value (the warning header).
	Over []Hit
	// StoreDown: the counts are this replica's own (the store is unreachable).
	StoreDown      bool
	StoreDownSince time.Time
	// Now is the clock of the decision (for the reset durations).
	Now time.Time
}

// ref is one counter a check involves.
type ref struct {
	c     *counter
	scope Scope
	kind  Kind
	rule  Rule
}

// Check decides a request of key keyID (with its own limits keyLimits, over its tenant's
// KeyDefaults) of tenant, and spends
// one request unit of each request limit when it is allowed. A request with no limits at all
// is allowed without touching anything.
func (l *Limiter) Check(tenant, keyID string, keyLimits Set) Result {
	pol := l.tenant(tenant)
	keyLimits = keyLimits.Or(pol.KeyDefaults)
	if keyLimits.Empty() && pol.Limits.Empty() {
		return Result{Allowed: true}
	}
	now := l.opt.Now()
	var buf [2 * NumKinds]ref
	refs := buf[:0]
	for k := range NumKinds {
		if r := keyLimits[k]; r.Value > 0 {
			refs = append(refs, ref{l.get(ckey{tenant, keyID, k}, now, pol.Location), ScopeKey, k, r})
		}
		if r := pol.Limits[k]; r.Value > 0 {
			refs = append(refs, ref{l.get(ckey{tenant, "", k}, now, pol.Location), ScopeTenant, k, r})
		}
	}
	for try := 0; ; try++ {
		down, since := l.storeDown()
		var held uint16
		if !down && l.needStore(refs) {
			held = l.reserve(refs, now)
			down, since = l.storeDown()
		}
		res, race := l.decide(refs, held, now, down, since, pol)
		if race && try == 0 {
			continue // a concurrent check spent the last leased unit: reserve once more
		}
		l.metrics.count(tenant, keyID, res)
		return res
	}
}

// needStore reports whether a request counter has no unit left (and is not known to be at its
// limit), or a token counter has not been read in this window or not for MaxStale.
func (l *Limiter) needStore(refs []ref) bool {
	for _, r := range refs {
		r.c.mu.Lock()
		need := (!r.kind.Tokens() && r.c.lease == 0 && !r.c.atCap) ||
			(r.kind.Tokens() && (!r.c.seen || time.Now().UnixNano()-r.c.readAt > int64(l.opt.MaxStale)))
		r.c.mu.Unlock()
		if need {
			return true
		}
	}
	return false
}

// reserve asks the store, in one round trip, for a lease for every request counter without
// units and for the value of every counter. One unit of each lease is this request's (bit i
// of held for refs[i]); the rest is kept for the next requests. A failure marks the store
// down and holds nothing.
func (l *Limiter) reserve(refs []ref, now time.Time) (held uint16) {
	var opsBuf [2 * NumKinds]Op
	var gotBuf, valBuf [2 * NumKinds]int64
	ops := opsBuf[:len(refs)]
	for i, r := range refs {
		c := r.c
		c.mu.Lock()
		ops[i] = Op{Key: c.name, TTL: c.end.Sub(now) + time.Hour}
		switch {
		case r.rule.Soft:
		case r.kind.Tokens():
			// The store refuses every grant once the shared count plus what this replica
			// counted and has not pushed yet reaches the limit.
			ops[i].Cap = max(1, r.rule.Value-c.pending)
		default:
			ops[i].Cap = r.rule.Value
		}
		if !r.kind.Tokens() && c.lease == 0 && !c.atCap {
			left := r.rule.Value - c.shared
			ops[i].Want = min(max(left/l.opt.LeaseDivisor, 1), l.opt.MaxLease)
		}
		c.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opt.SyncTimeout)
	defer cancel()
	l.metrics.syncCalls.Inc()
	if err := l.opt.Store.Reserve(ctx, ops, gotBuf[:len(refs)], valBuf[:len(refs)]); err != nil {
		l.markDown(err)
		return 0
	}
	for i, r := range refs {
		c := r.c
		c.mu.Lock()
		if c.name == ops[i].Key { // the window did not roll meanwhile
			c.shared = c.observe(valBuf[i])
			c.seen = true
			c.readAt = time.Now().UnixNano()
			if got := gotBuf[i]; got > 0 {
				c.lease += got - 1
				c.grant = got
				held |= 1 << i
			} else if ops[i].Want > 0 && !r.rule.Soft && valBuf[i] >= r.rule.Value {
				c.atCap = true
			}
		}
		c.mu.Unlock()
	}
	return held
}

// decide takes the decision with every counter locked (in refs' order, the same for every
// check, so two checks never wait on each other in a circle) and spends the request units.
// race is set when a request counter ran out of units since it was looked at (nothing is
// spent then).
func (l *Limiter) decide(refs []ref, held uint16, now time.Time, down bool, since time.Time, pol Tenant) (res Result, race bool) {
	var raced Hit
	for _, r := range refs {
		r.c.mu.Lock()
	}
	defer func() {
		for _, r := range refs {
			r.c.mu.Unlock()
		}
	}()
	local := l.opt.Store == nil
	res = Result{Allowed: true, Now: now, StoreDown: down && !local, StoreDownSince: since}
	if res.StoreDown && pol.OnStoreDown == v1alpha1.StoreDownClosed && time.Since(since) > l.opt.Grace {
		res.Allowed, res.StoreClosed = false, true
		l.giveBack(refs, held)
		return res, false
	}
	for i, r := range refs {
		c := r.c
		h := Hit{Scope: r.scope, Kind: r.kind, Rule: r.rule, Reset: c.end}
		switch {
		case r.kind.Tokens():
			h.Used = c.shared + c.pending
			if !r.rule.Soft && h.Used >= r.rule.Value {
				res.deny(h)
			}
			// Other replicas' tokens arrive through the store: read it again when the view
			// is older than the flush interval past half the limit, ten flushes before.
			every := 10 * l.opt.FlushInterval
			if 2*h.Used >= r.rule.Value {
				every = l.opt.FlushInterval
			}
			if time.Now().UnixNano()-c.readAt > int64(every) {
				c.wantRead = true
			}
		case held&(1<<i) != 0:
			h.Used = c.shared - c.lease + c.pending
		case c.lease > 0:
			h.Used = c.shared - c.lease + 1 + c.pending
		case down || local:
			h.Used = c.shared + c.pending + 1
			if !r.rule.Soft && h.Used > r.rule.Value {
				h.Used--
				res.deny(h)
			}
		case c.atCap:
			h.Used = c.shared
			res.deny(h)
		default:
			// No unit: spent by a concurrent check since the reservation, or refused by the
			// store because another counter is at its limit (which then denies).
			h.Used = c.shared
			if !race {
				raced = h
			}
			race = true
		}
		res.show(h)
	}
	if race && res.Allowed {
		// Refused unless the retry finds units (a second race is taken as the limit).
		res.deny(raced)
		l.giveBack(refs, held)
		return res, true
	}
	if !res.Allowed {
		res.Over = nil
		l.giveBack(refs, held)
		return res, false
	}
	for i, r := range refs {
		switch {
		case r.kind.Tokens(), held&(1<<i) != 0:
		case r.c.lease > 0:
			r.c.lease--
			if c := r.c; c.grant > 1 && c.lease < c.grant/4 && !c.refilling && !down && !local {
				c.refilling = true
				go l.refill(r)
			}
		default:
			r.c.pending++
		}
	}
	return res, false
}

// refill renews a lease that runs low, in the background, so that the checks after it find
// units in memory.
func (l *Limiter) refill(r ref) {
	c := r.c
	now := l.opt.Now()
	c.mu.Lock()
	op := Op{Key: c.name, TTL: c.end.Sub(now) + time.Hour, Want: min(max((r.rule.Value-c.shared)/l.opt.LeaseDivisor, 1), l.opt.MaxLease)}
	if !r.rule.Soft {
		op.Cap = r.rule.Value
	}
	c.mu.Unlock()
	var got, val [1]int64
	ctx, cancel := context.WithTimeout(context.Background(), l.opt.SyncTimeout)
	err := l.opt.Store.Reserve(ctx, []Op{op}, got[:], val[:])
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refilling = false
	if err != nil {
		l.markDown(err)
		return
	}
	if c.name != op.Key {
		return
	}
	c.shared = c.observe(val[0])
	c.lease += got[0]
	if got[0] > 0 {
		c.grant = got[0]
	} else if !r.rule.Soft && val[0] >= r.rule.Value {
		c.grant = 0 // the rest is this replica's lease: spent, the next check asks the store
	}
}

// giveBack keeps the units a refused request held for the next requests on this replica.
func (l *Limiter) giveBack(refs []ref, held uint16) {
	for i, r := range refs {
		if held&(1<<i) != 0 {
			r.c.lease++
		}
	}
}

func (res *Result) deny(h Hit) {
	if res.Allowed || !res.Denied.Reset.After(h.Reset) {
		res.Allowed = false
		res.Denied = h
	}
}

// show keeps, of each sort, the hit with the least left for the headers, and the soft limits
// that are past their value.
func (res *Result) show(h Hit) {
	if h.Rule.Soft && h.Used > h.Rule.Value || (h.Rule.Soft && h.Kind.Tokens() && h.Used >= h.Rule.Value) {
		res.Over = append(res.Over, h)
	}
	if h.Kind.Tokens() {
		if !res.HasTokens || h.Remaining() < res.Tokens.Remaining() {
			res.Tokens, res.HasTokens = h, true
		}
		return
	}
	if !res.HasRequests || h.Remaining() < res.Requests.Remaining() {
		res.Requests, res.HasRequests = h, true
	}
}
