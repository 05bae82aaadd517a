package metering

import (
	"cmp"
	"slices"
	"time"
)

// VMIState is the meter's account of one VMI: the interval it held its GPUs, as far as it is
// proven, and how much of it is already recorded. It is what the checkpoint keeps.
type VMIState struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Labels    Labels `json:"labels"`
	GPUs      int    `json:"gpus"`
	// Start is when it first held its GPUs, End when it let them go (zero: holds them still,
	// or never did); EndObserved says End is the VMI's own word (a terminal phase), not the
	// meter's estimate for a VMI that went away without one.
	Start       time.Time `json:"start,omitzero"`
	End         time.Time `json:"end,omitzero"`
	EndObserved bool      `json:"endObserved,omitempty"`
	// Counted: records cover [Start, Counted) (or from the meter's Since when it started later).
	Counted time.Time `json:"counted,omitzero"`
	// LastSeen is the last moment the meter saw the VMI in its cluster: an interval is only
	// recorded up to what was seen.
	LastSeen time.Time `json:"lastSeen"`
	// Gone: the VMI is no longer in its cluster. Held: it carries the meter's finalizer.
	Gone bool `json:"gone,omitempty"`
	Held bool `json:"held,omitempty"`
}

// Meter turns what is seen of VMIs into GPU records. It is pure (no clock, no I/O): every call
// says what time it is, and Close returns the records it can prove. Not safe for concurrent
// use: the Service serialises its calls.
type Meter struct {
	// Source is the records' CloudEvents source.
	Source string
	// Since is when metering began: no record starts before it (a VM that ran before the meter
	// was installed is not billed for that time).
	Since time.Time
	// Settle is how long a running VMI's time waits before it is recorded (the Service's
	// default is a minute): KubeVirt writes a stop into the VMI's status seconds after it
	// happens, and a record once written is never taken back.
	Settle time.Duration

	vmis     map[string]*VMIState
	byTenant map[string]map[string]*VMIState
}

// NewMeter returns a meter with no VMI, counting from since.
func NewMeter(source string, since time.Time, settle time.Duration) *Meter {
	return &Meter{Source: cmp.Or(source, DefaultSource), Since: since.UTC().Truncate(time.Second), Settle: settle,
		vmis: map[string]*VMIState{}, byTenant: map[string]map[string]*VMIState{}}
}

// Restore puts back the VMIs of a checkpoint.
func (m *Meter) Restore(states []VMIState) {
	for i := range states {
		st := states[i]
		m.put(&st)
	}
}

// States are the VMIs the meter accounts for, by UID: what a checkpoint keeps.
func (m *Meter) States() []VMIState {
	out := make([]VMIState, 0, len(m.vmis))
	for _, st := range m.vmis {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b VMIState) int { return cmp.Compare(a.UID, b.UID) })
	return out
}

// Len is the number of VMIs accounted for.
func (m *Meter) Len() int { return len(m.vmis) }

func (m *Meter) put(st *VMIState) {
	m.vmis[st.UID] = st
	t := m.byTenant[st.Labels.Tenant]
	if t == nil {
		t = map[string]*VMIState{}
		m.byTenant[st.Labels.Tenant] = t
	}
	t[st.UID] = st
}

func (m *Meter) drop(st *VMIState) {
	delete(m.vmis, st.UID)
	if t := m.byTenant[st.Labels.Tenant]; t != nil {
		delete(t, st.UID)
		if len(t) == 0 {
			delete(m.byTenant, st.Labels.Tenant)
		}
	}
}

// Seen records one look at a VMI that is in its cluster now. Its labels and GPUs are taken at
// the first look and kept: a record's labels never change over a VMI's life.
func (m *Meter) Seen(f Fact, now time.Time) {
	now = now.UTC().Truncate(time.Second)
	st := m.vmis[f.UID]
	if st == nil {
		if f.UID == "" || f.Labels.Tenant == "" || f.GPUs <= 0 {
			return
		}
		st = &VMIState{UID: f.UID, Namespace: f.Namespace, Name: f.Name, Labels: f.Labels, GPUs: f.GPUs}
		m.put(st)
	}
	st.LastSeen = maxTime(st.LastSeen, now)
	st.Gone, st.Held = false, f.Held
	if st.Start.IsZero() {
		switch {
		case !f.Start.IsZero():
			st.Start = f.Start
		case f.Holding:
			// Holding without a transition record (an older KubeVirt, a hand-made VMI): from
			// the first time the meter saw it hold.
			st.Start = now
		}
		if !st.Start.IsZero() {
			st.Counted = maxTime(st.Start, m.Since)
		}
	}
	if st.Start.IsZero() || st.EndObserved {
		return
	}
	switch {
	case !f.End.IsZero():
		m.end(st, f.End, true)
	case f.Terminal:
		m.end(st, now, true)
	case f.Released:
		// Deleted, and KubeVirt let it go without writing a terminal phase (it stops the guest
		// on deletion): its GPUs went with the deletion.
		m.end(st, f.Deleted, true)
	case f.Holding:
		st.End = time.Time{} // an estimate of a VMI that came back: it holds them still
	}
}

// ToHold are the VMIs that hold GPUs without the meter's finalizer yet.
func (m *Meter) ToHold() []VMIState {
	return m.pick(func(st *VMIState) bool { return !st.Held && !st.Gone && !st.Start.IsZero() && st.End.IsZero() })
}

// Held are the VMIs that carry the meter's finalizer; ended, those whose end is the VMI's own
// word (once that is in a written checkpoint, the finalizer can go).
func (m *Meter) Held(ended bool) []VMIState {
	return m.pick(func(st *VMIState) bool { return st.Held && !st.Gone && (!ended || st.EndObserved) })
}

func (m *Meter) pick(ok func(*VMIState) bool) []VMIState {
	var out []VMIState
	for _, st := range m.vmis {
		if ok(st) {
			out = append(out, *st)
		}
	}
	return out
}

// end closes a VMI's interval at, never before what is already recorded.
func (m *Meter) end(st *VMIState, at time.Time, observed bool) {
	st.End = maxTime(at.UTC(), st.Start, st.Counted)
	st.EndObserved = observed
}

// Reconcile is one full look at a tenant's cluster: present are all its metered VMIs now.
// Those the meter knows that are not among them have gone; live says the meter watched them
// go (it has been looking all along, so now is when), otherwise (the first look after a
// restart, or after the cluster could not be watched) they went after they were last seen.
func (m *Meter) Reconcile(tenant string, present []Fact, now time.Time, live bool) {
	here := make(map[string]bool, len(present))
	for _, f := range present {
		if f.Labels.Tenant != tenant {
			continue
		}
		here[f.UID] = true
		m.Seen(f, now)
	}
	for uid, st := range m.byTenant[tenant] {
		if !here[uid] && !st.Gone {
			at := st.LastSeen
			if live {
				at = now.UTC().Truncate(time.Second)
			}
			m.vanish(st, at)
		}
	}
}

// Forget is a tenant whose cluster left the registry: its VMIs are gone since last seen.
func (m *Meter) Forget(tenant string) {
	for _, st := range m.byTenant[tenant] {
		if !st.Gone {
			m.vanish(st, st.LastSeen)
		}
	}
}

// JobLabels are the tier and model a job's VMIs carry (the most recently started one's).
func (m *Meter) JobLabels(tenant, job string) (tier, model string, ok bool) {
	var newest *VMIState
	for _, st := range m.byTenant[tenant] {
		if st.Labels.Job == job && (newest == nil || st.Start.After(newest.Start)) {
			newest = st
		}
	}
	if newest == nil {
		return "", "", false
	}
	return newest.Labels.Tier, newest.Labels.Model, true
}

// Tenants are the tenants the meter accounts VMIs for.
func (m *Meter) Tenants() []string {
	out := make([]string, 0, len(m.byTenant))
	for t := range m.byTenant {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func (m *Meter) vanish(st *VMIState, at time.Time) {
	st.Gone = true
	if !st.Start.IsZero() && st.End.IsZero() {
		m.end(st, at, false)
	}
}

// Close returns the records the meter can prove, one per VMI and UTC hour, and forgets the
// VMIs that are gone and fully recorded. A VMI that ended is recorded to its end; one that runs
// is recorded in whole hours, up to when it was last seen less Settle.
func (m *Meter) Close() []Event {
	var out []Event
	for _, st := range m.vmis {
		if st.Start.IsZero() {
			if st.Gone {
				m.drop(st)
			}
			continue
		}
		limit, final := st.End, !st.End.IsZero()
		if !final {
			limit = st.LastSeen.Add(-max(m.Settle, 0))
		}
		for st.Counted.Before(limit) {
			next := st.Counted.Truncate(time.Hour).Add(time.Hour)
			if next.After(limit) {
				if !final {
					break
				}
				next = limit
			}
			out = append(out, GPUEvent(m.Source, st.UID, st.Labels, st.GPUs, st.Counted, next))
			st.Counted = next
		}
		if st.Gone && !st.Counted.Before(st.End) {
			m.drop(st)
		}
	}
	slices.SortFunc(out, func(a, b Event) int { return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID, b.ID)) })
	return out
}

// Open is the GPU time of a tenant's VMIs not recorded yet, up to now: what a usage answer adds
// to the records so that a running job's hours show before they are final.
func (m *Meter) Open(tenant string, now time.Time) []Event {
	now = now.UTC().Truncate(time.Second)
	var out []Event
	for _, st := range m.byTenant[tenant] {
		if st.Start.IsZero() {
			continue
		}
		to := st.End
		if to.IsZero() {
			to = now
		}
		for from := st.Counted; from.Before(to); {
			next := minTime(from.Truncate(time.Hour).Add(time.Hour), to)
			out = append(out, GPUEvent(m.Source, st.UID, st.Labels, st.GPUs, from, next))
			from = next
		}
	}
	return out
}

func maxTime(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
