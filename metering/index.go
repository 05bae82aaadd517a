package metering

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Index sums the records per tenant, series (the billing labels a query groups by) and UTC
// hour, so that a usage query reads a few thousand sums rather than a month of records. It is
// rebuilt from the store at start (Store.Replay) and fed every record written after.
type Index struct {
	mu      sync.RWMutex
	tenants map[string]*tenantIndex
	records uint64
}

// SeriesKey is what a query can group by: the labels of a record but its VM, replica and
// period. Key is empty for GPU records.
type SeriesKey struct {
	Tier, Job, Model, NodeType, Key string
}

type tenantIndex struct {
	gpu    map[SeriesKey]*gpuSeries
	tokens map[SeriesKey]*tokenSeries
}

// A series keeps one slot per hour, sorted by hour; records arrive nearly in order, so a new
// hour is almost always appended. The slots are small on purpose: a month of a large fleet is
// millions of them.
type gpuSeries struct {
	slots []gpuSlot
	total uint64
}

type gpuSlot struct {
	hour       int32 // hours since the Unix epoch
	gpuSeconds uint32
}

type tokenSeries struct {
	slots []tokenSlot
	total Usage
}

type tokenSlot struct {
	hour      int32
	requests  uint32
	tokensIn  uint64
	tokensOut uint64
}

// NewIndex returns an empty index.
func NewIndex() *Index { return &Index{tenants: map[string]*tenantIndex{}} }

// Records counts the records added.
func (x *Index) Records() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.records
}

// Add sums records in.
func (x *Index) Add(events ...Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range events {
		x.addLocked(&events[i])
	}
}

func keyOf(d *Data) SeriesKey {
	return SeriesKey{Tier: d.Tier, Job: d.Job, Model: d.Model, NodeType: d.NodeType, Key: d.Key}
}

func (x *Index) addLocked(e *Event) {
	x.records++
	t := x.tenants[e.Data.Tenant]
	if t == nil {
		t = &tenantIndex{gpu: map[SeriesKey]*gpuSeries{}, tokens: map[SeriesKey]*tokenSeries{}}
		x.tenants[e.Data.Tenant] = t
	}
	hour := int32(e.Time.Unix() / 3600)
	k := keyOf(&e.Data)
	switch e.Type {
	case TypeGPU:
		s := t.gpu[k]
		if s == nil {
			s = &gpuSeries{}
			t.gpu[k] = s
		}
		i := slotAt(s.slots, hour, func(sl gpuSlot) int32 { return sl.hour })
		if i == len(s.slots) || s.slots[i].hour != hour {
			s.slots = slices.Insert(s.slots, i, gpuSlot{hour: hour})
		}
		s.slots[i].gpuSeconds += uint32(e.Data.GPUSeconds)
		s.total += uint64(e.Data.GPUSeconds)
	case TypeTokens:
		s := t.tokens[k]
		if s == nil {
			s = &tokenSeries{}
			t.tokens[k] = s
		}
		i := slotAt(s.slots, hour, func(sl tokenSlot) int32 { return sl.hour })
		if i == len(s.slots) || s.slots[i].hour != hour {
			s.slots = slices.Insert(s.slots, i, tokenSlot{hour: hour})
		}
		sl := &s.slots[i]
		sl.requests += uint32(e.Data.Requests)
		sl.tokensIn += e.Data.TokensIn
		sl.tokensOut += e.Data.TokensOut
		s.total.add(Usage{Requests: e.Data.Requests, TokensIn: e.Data.TokensIn, TokensOut: e.Data.TokensOut})
	}
}

// slotAt is where hour is or goes in slots (sorted by hour); the last slot is tried first.
func slotAt[S any](slots []S, hour int32, h func(S) int32) int {
	if n := len(slots); n == 0 || h(slots[n-1]) < hour {
		return n
	} else if h(slots[n-1]) == hour {
		return n - 1
	}
	i, _ := slices.BinarySearchFunc(slots, hour, func(s S, hr int32) int { return cmp.Compare(h(s), hr) })
	return i
}

// Usage is what a group of records sums to.
type Usage struct {
	GPUSeconds uint64 `json:"gpuSeconds"`
	Requests   uint64 `json:"requests"`
	TokensIn   uint64 `json:"tokensIn"`
	TokensOut  uint64 `json:"tokensOut"`
}

func (u *Usage) add(o Usage) {
	u.GPUSeconds += o.GPUSeconds
	u.Requests += o.Requests
	u.TokensIn += o.TokensIn
	u.TokensOut += o.TokensOut
}

// Group is one row of a usage answer.
type Group struct {
	// Key is the value grouped by (a job, a model, a key id, a day as 2006-01-02, a node type,
	// a tier); empty for the one row of a query grouped by nothing, and for GPU time under
	// groupBy=key (GPUs are not held by keys).
	Key string `json:"key"`
	Usage
}

// GroupBy values.
const (
	ByNone     = ""
	ByJob      = "job"
	ByModel    = "model"
	ByKey      = "key"
	ByDay      = "day"
	ByNodeType = "nodeType"
	ByTier     = "tier"
)

// GroupBys are the values a query may group by.
var GroupBys = []string{ByJob, ByModel, ByKey, ByDay, ByNodeType, ByTier}

func groupKey(by string, k SeriesKey, hour int32) string {
	switch by {
	case ByJob:
		return k.Job
	case ByModel:
		return k.Model
	case ByKey:
		return k.Key
	case ByDay:
		return time.Unix(int64(hour)*3600, 0).UTC().Format(time.DateOnly)
	case ByNodeType:
		return k.NodeType
	case ByTier:
		return k.Tier
	}
	return ""
}

// Query sums a tenant's records of the hours in [from, to) (from rounded down, to up, to the
// hour), grouped by by, plus extra (the meter's open time, not recorded yet); the groups sorted
// by key.
func (x *Index) Query(tenant string, from, to time.Time, by string, extra []Event) []Group {
	lo, hi := int32(from.Unix()/3600), int32((to.Unix()+3599)/3600)
	sums := map[string]*Usage{}
	at := func(key string) *Usage {
		u := sums[key]
		if u == nil {
			u = &Usage{}
			sums[key] = u
		}
		return u
	}
	x.mu.RLock()
	if t := x.tenants[tenant]; t != nil {
		for k, s := range t.gpu {
			for _, sl := range inRange(s.slots, lo, hi, func(sl gpuSlot) int32 { return sl.hour }) {
				at(groupKey(by, k, sl.hour)).GPUSeconds += uint64(sl.gpuSeconds)
			}
		}
		for k, s := range t.tokens {
			for _, sl := range inRange(s.slots, lo, hi, func(sl tokenSlot) int32 { return sl.hour }) {
				at(groupKey(by, k, sl.hour)).add(Usage{Requests: uint64(sl.requests), TokensIn: sl.tokensIn, TokensOut: sl.tokensOut})
			}
		}
	}
	x.mu.RUnlock()
	for i := range extra {
		e := &extra[i]
		hour := int32(e.Time.Unix() / 3600)
		if e.Data.Tenant != tenant || hour < lo || hour >= hi {
			continue
		}
		at(groupKey(by, keyOf(&e.Data), hour)).add(Usage{GPUSeconds: uint64(e.Data.GPUSeconds),
			Requests: e.Data.Requests, TokensIn: e.Data.TokensIn, TokensOut: e.Data.TokensOut})
	}
	out := make([]Group, 0, len(sums))
	for k, u := range sums {
		out = append(out, Group{Key: k, Usage: *u})
	}
	slices.SortFunc(out, func(a, b Group) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// inRange is the slots of hours in [lo, hi).
func inRange[S any](slots []S, lo, hi int32, h func(S) int32) []S {
	cmpHour := func(s S, hr int32) int { return cmp.Compare(h(s), hr) }
	i, _ := slices.BinarySearchFunc(slots, lo, cmpHour)
	j, _ := slices.BinarySearchFunc(slots, hi, cmpHour)
	return slots[i:j]
}

// JobLabels are the tier and model of a job's GPU records (any of them: a job's labels do not
// change over its records).
func (x *Index) JobLabels(tenant, job string) (tier, model string, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if t := x.tenants[tenant]; t != nil {
		for k := range t.gpu {
			if k.Job == job {
				return k.Tier, k.Model, true
			}
		}
	}
	return "", "", false
}

// Total is one series' sum over every record the index holds (the Prometheus counters).
type Total struct {
	Tenant string
	SeriesKey
	Usage
}

// Totals are every series' sums.
func (x *Index) Totals() []Total {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []Total
	for tenant, t := range x.tenants {
		for k, s := range t.gpu {
			out = append(out, Total{Tenant: tenant, SeriesKey: k, Usage: Usage{GPUSeconds: s.total}})
		}
		for k, s := range t.tokens {
			out = append(out, Total{Tenant: tenant, SeriesKey: k, Usage: s.total})
		}
	}
	return out
}
