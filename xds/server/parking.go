package server

import "sync"

// parking is what both caches share to answer watches: the cache's mutex and the budget of
// bytes in flight. A watch stays parked in its cache's set (of its protocol) from its creation
// until it is sent a response: while it waits for a change it needs, and while a response
// waits for its share of the budget.
type parking struct {
	mu     sync.Mutex
	budget *budget // nil: large responses never wait
}

// parkWatch parks a new watch in set and answers it at once if it can be; the cancel it
// returns takes the watch out and gives back any share of the budget it held.
func parkWatch[W comparable](p *parking, set map[W]struct{}, w W, t **ticket, answer func(W)) func() {
	p.mu.Lock()
	set[w] = struct{}{}
	answer(w)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(set, w)
		held := *t
		p.mu.Unlock()
		held.release() // the node answered (or left): its response's share is free
	}
}

// answerParked is one answer to a parked watch w of set: respond makes its response (false:
// nothing to send, and any share it waited for goes back at once rather than when the hold
// runs out); a response the budget admits is sent and w leaves the set; otherwise w stays
// parked and answer runs again once its share is granted, from the state of that moment. mu
// is held.
func answerParked[W comparable, R interface{ size() int64 }](p *parking, set map[W]struct{}, w W, t **ticket,
	answer func(W), respond func() (R, bool), send func(R)) {
	r, ok := respond()
	if !ok {
		(*t).release()
		*t = nil
		return
	}
	if p.budget.admit(t, r.size(), &p.mu, func() {
		if _, parked := set[w]; parked {
			answer(w)
		}
	}) {
		delete(set, w)
		send(r)
	}
}
