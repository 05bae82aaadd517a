package usage

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Options configure an Aggregator.
type Options struct {
	// Window is the span of the health figures, in whole minutes (default 5m).
	Window time.Duration
	// KeyRetention is how long hourly key usage is kept in memory (default 31 days).
	KeyRetention time.Duration
	Thresholds   Thresholds
	// Replicas feeds the replica probes into the status; nil: traffic alone decides.
	Replicas ReplicaSource
	// PerKeyMetrics adds per-key series to the Prometheus metrics (one set per key that
	// served traffic: off by default to bound cardinality; the JSON has them always).
	PerKeyMetrics bool
	Now           func() time.Time
}

// EndpointKey names an endpoint.
type EndpointKey struct{ Tenant, Job string }

// Aggregator folds entries into per-endpoint windows and per-key hours. It is safe for
// concurrent use; one lock, held for a few hundred nanoseconds per entry.
type Aggregator struct {
	opt     Options
	minutes int

	mu           sync.Mutex
	endpoints    map[EndpointKey]*endpointStats
	keys         map[string]*keyStats
	recorded     uint64
	unattributed uint64
	prunedHour   int64
}

type minuteBucket struct {
	minute                   int64
	requests, errors, denied uint64
	lat, ttfb                hist
}

// promBuckets are the upper bounds (seconds) of the lifetime latency histogram.
var promBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

type endpointStats struct {
	ring []minuteBucket
	// lifetime counters, for Prometheus
	byClass             [6]uint64 // 0: no response, 1..5: 1xx..5xx
	denied              uint64
	latCounts           []uint64 // per promBuckets (not cumulative) plus +Inf
	latSum              float64
	tokensIn, tokensOut uint64
}

type keyStats struct {
	tenant string
	jobs   map[string]struct{}
	hours  map[int64]*Hour
	total  Hour
}

// Hour is one key's usage in one hour.
type Hour struct {
	Requests  uint64 `json:"requests"`
	TokensIn  uint64 `json:"tokensIn"`
	TokensOut uint64 `json:"tokensOut"`
}

func (h *Hour) add(o Hour) {
	h.Requests += o.Requests
	h.TokensIn += o.TokensIn
	h.TokensOut += o.TokensOut
}

// slot is h as the HourSlot of hour hr (hours since the epoch).
func (h Hour) slot(hr int64) HourSlot {
	return HourSlot{Hour: time.Unix(hr*3600, 0).UTC(), Requests: h.Requests, TokensIn: h.TokensIn, TokensOut: h.TokensOut}
}

// counts is the slot's figures without its hour.
func (s HourSlot) counts() Hour {
	return Hour{Requests: s.Requests, TokensIn: s.TokensIn, TokensOut: s.TokensOut}
}

// NewAggregator returns an empty aggregator.
func NewAggregator(opt Options) *Aggregator {
	if opt.Window < time.Minute {
		opt.Window = 5 * time.Minute
	}
	if opt.KeyRetention <= 0 {
		opt.KeyRetention = 31 * 24 * time.Hour
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Aggregator{
		opt:       opt,
		minutes:   int(opt.Window / time.Minute),
		endpoints: map[EndpointKey]*endpointStats{},
		keys:      map[string]*keyStats{},
	}
}

// Unattributed counts log entries that could not be tied to an endpoint.
func (a *Aggregator) Unattributed(n int) {
	a.mu.Lock()
	a.unattributed += uint64(n)
	a.mu.Unlock()
}

// Add folds in entries.
func (a *Aggregator) Add(entries ...Entry) {
	now := a.opt.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := now.Unix() / 3600; h != a.prunedHour {
		a.pruneLocked(now)
		a.prunedHour = h
	}
	for i := range entries {
		a.addLocked(&entries[i], now)
	}
}

func (a *Aggregator) addLocked(e *Entry, now time.Time) {
	a.recorded++
	t := e.Done
	if t.IsZero() || t.After(now) {
		t = now
	}
	k := EndpointKey{e.Tenant, e.Job}
	es := a.endpoints[k]
	if es == nil {
		es = &endpointStats{ring: make([]minuteBucket, a.minutes), latCounts: make([]uint64, len(promBuckets)+1)}
		a.endpoints[k] = es
	}
	if e.Denied {
		es.denied++
	} else {
		class := 0
		if e.Code >= 100 && e.Code < 600 {
			class = e.Code / 100
		}
		es.byClass[class]++
		secs := e.Latency.Seconds()
		b, _ := slices.BinarySearch(promBuckets, secs)
		es.latCounts[b]++
		es.latSum += secs
		es.tokensIn += uint64(e.TokensIn)
		es.tokensOut += uint64(e.TokensOut)
	}
	if mb := es.bucket(t.Unix()/60, now.Unix()/60, a.minutes); mb != nil {
		if e.Denied {
			mb.denied++
		} else {
			mb.requests++
			if e.Failed() {
				mb.errors++
			}
			if mb.lat == nil {
				mb.lat, mb.ttfb = hist{}, hist{}
			}
			mb.lat.add(e.Latency)
			if e.TTFB > 0 {
				mb.ttfb.add(e.TTFB)
			}
		}
	}
	if e.KeyID == "" || e.Denied {
		return
	}
	ks := a.keys[e.KeyID]
	if ks == nil {
		ks = &keyStats{tenant: e.Payer(), jobs: map[string]struct{}{}, hours: map[int64]*Hour{}}
		a.keys[e.KeyID] = ks
	}
	if e.Caller != "" {
		ks.jobs[e.Job+"."+e.Tenant] = struct{}{} // a provider's: its host's name, <job>.<provider>
	} else {
		ks.jobs[e.Job] = struct{}{}
	}
	hr := t.Unix() / 3600
	h := ks.hours[hr]
	if h == nil {
		h = &Hour{}
		ks.hours[hr] = h
	}
	one := Hour{Requests: 1, TokensIn: uint64(e.TokensIn), TokensOut: uint64(e.TokensOut)}
	h.add(one)
	ks.total.add(one)
}

// bucket is the window's bucket for minute m (now is the current minute), or nil when m is
// outside the window or a newer minute already holds its slot (an Add with a later clock got
// in first).
func (es *endpointStats) bucket(m, now int64, minutes int) *minuteBucket {
	if m <= now-int64(minutes) {
		return nil
	}
	mb := &es.ring[int(m%int64(minutes))]
	if mb.minute < m {
		*mb = minuteBucket{minute: m}
	}
	if mb.minute != m {
		return nil
	}
	return mb
}

// pruneLocked drops hours older than the retention (the key totals stay).
func (a *Aggregator) pruneLocked(now time.Time) {
	oldest := now.Add(-a.opt.KeyRetention).Unix() / 3600
	for _, ks := range a.keys {
		for h := range ks.hours {
			if h < oldest {
				delete(ks.hours, h)
			}
		}
	}
}

// EndpointHealth is one endpoint's health over the window.
type EndpointHealth struct {
	Tenant   string        `json:"tenant"`
	Job      string        `json:"job"`
	Status   Status        `json:"status"`
	Reasons  []string      `json:"reasons,omitempty"`
	Replicas *ReplicaCount `json:"replicas,omitempty"`
	// Requests that reached the endpoint (refused key checks are counted in Denied).
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	Denied   uint64 `json:"denied"`
	// SuccessRate is 1 - errors/requests; absent without requests.
	SuccessRate  *float64 `json:"successRate,omitempty"`
	LatencyP50Ms *float64 `json:"latencyP50Ms,omitempty"`
	LatencyP99Ms *float64 `json:"latencyP99Ms,omitempty"`
	TTFBP50Ms    *float64 `json:"ttfbP50Ms,omitempty"`
	TTFBP99Ms    *float64 `json:"ttfbP99Ms,omitempty"`
}

// HealthReport is every endpoint's health.
type HealthReport struct {
	GeneratedAt time.Time        `json:"generatedAt"`
	Window      string           `json:"window"`
	Endpoints   []EndpointHealth `json:"endpoints"`
}

func ms(d time.Duration) *float64 {
	v := float64(d) / float64(time.Millisecond)
	return &v
}

// Health reports the endpoints of tenant (all when empty): those the replica source knows
// and those that served traffic, sorted by tenant and job.
func (a *Aggregator) Health(tenant string) HealthReport {
	now := a.opt.Now()
	// The replica source is called without our lock: it has locks of its own.
	replicas := map[EndpointKey]*ReplicaCount{}
	if rs := a.opt.Replicas; rs != nil {
		rs.EachReplicaCount(func(tenant, job string, ready, total int) {
			replicas[EndpointKey{tenant, job}] = &ReplicaCount{Tenant: tenant, Job: job, Ready: ready, Total: total}
		})
	}
	a.mu.Lock()
	keys := make(map[EndpointKey]struct{}, len(a.endpoints)+len(replicas))
	for k := range a.endpoints {
		keys[k] = struct{}{}
	}
	for k := range replicas {
		keys[k] = struct{}{}
	}
	out := HealthReport{GeneratedAt: now.UTC(), Window: a.opt.Window.String(), Endpoints: []EndpointHealth{}}
	oldest := now.Unix()/60 - int64(a.minutes)
	for k := range keys {
		if tenant != "" && k.Tenant != tenant {
			continue
		}
		h := EndpointHealth{Tenant: k.Tenant, Job: k.Job, Replicas: replicas[k]}
		if es := a.endpoints[k]; es != nil {
			var lat, ttfb []hist
			for i := range es.ring {
				mb := &es.ring[i]
				if mb.minute <= oldest {
					continue
				}
				h.Requests += mb.requests
				h.Errors += mb.errors
				h.Denied += mb.denied
				lat, ttfb = append(lat, mb.lat), append(ttfb, mb.ttfb)
			}
			if h.Requests > 0 {
				sr := 1 - float64(h.Errors)/float64(h.Requests)
				h.SuccessRate = &sr
			}
			if q := quantiles(lat, 0.5, 0.99); q != nil {
				h.LatencyP50Ms, h.LatencyP99Ms = ms(q[0]), ms(q[1])
			}
			if q := quantiles(ttfb, 0.5, 0.99); q != nil {
				h.TTFBP50Ms, h.TTFBP99Ms = ms(q[0]), ms(q[1])
			}
		}
		h.Status, h.Reasons = Classify(&h, a.opt.Thresholds)
		if h.Requests == 0 {
			h.Reasons = append(h.Reasons, "no requests in the last "+a.opt.Window.String())
		}
		out.Endpoints = append(out.Endpoints, h)
	}
	a.mu.Unlock()
	slices.SortFunc(out.Endpoints, func(x, y EndpointHealth) int {
		return cmp.Or(cmp.Compare(x.Tenant, y.Tenant), cmp.Compare(x.Job, y.Job))
	})
	return out
}

// KeyUsage is one key's usage.
type KeyUsage struct {
	KeyID  string `json:"keyId"`
	Tenant string `json:"tenant"`
	// Endpoints are the jobs the key called; a provider's shared endpoint as <job>.<provider>.
	Endpoints []string `json:"endpoints"`
	// Total covers the period asked for.
	Total Hour       `json:"total"`
	Hours []HourSlot `json:"hours"`
}

// HourSlot is one hour of a key's usage.
type HourSlot struct {
	Hour      time.Time `json:"hour"`
	Requests  uint64    `json:"requests"`
	TokensIn  uint64    `json:"tokensIn"`
	TokensOut uint64    `json:"tokensOut"`
}

// UsageQuery selects usage.
type UsageQuery struct {
	Tenant, KeyID string
	// From and To bound the hours (From inclusive, rounded down to the hour; To exclusive).
	// Zero From: the whole retention; zero To: now.
	From, To time.Time
}

// Usage reports hourly usage per key, sorted by tenant and key id. Revoked keys keep theirs.
func (a *Aggregator) Usage(q UsageQuery) []KeyUsage {
	from, to := int64(0), int64(1<<62)
	if !q.From.IsZero() {
		from = q.From.Unix() / 3600
	}
	if !q.To.IsZero() {
		to = (q.To.Unix() + 3599) / 3600
	}
	a.mu.Lock()
	out := []KeyUsage{}
	for id, ks := range a.keys {
		if (q.KeyID != "" && id != q.KeyID) || (q.Tenant != "" && ks.tenant != q.Tenant) {
			continue
		}
		u := KeyUsage{KeyID: id, Tenant: ks.tenant, Hours: []HourSlot{}}
		for j := range ks.jobs {
			u.Endpoints = append(u.Endpoints, j)
		}
		slices.Sort(u.Endpoints)
		for h, v := range ks.hours {
			if h < from || h >= to {
				continue
			}
			u.Hours = append(u.Hours, v.slot(h))
			u.Total.add(*v)
		}
		slices.SortFunc(u.Hours, func(x, y HourSlot) int { return x.Hour.Compare(y.Hour) })
		out = append(out, u)
	}
	a.mu.Unlock()
	sortUsage(out)
	return out
}

func sortUsage(out []KeyUsage) {
	slices.SortFunc(out, func(x, y KeyUsage) int {
		return cmp.Or(cmp.Compare(x.Tenant, y.Tenant), cmp.Compare(x.KeyID, y.KeyID))
	})
}
