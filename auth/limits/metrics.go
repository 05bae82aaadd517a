package limits

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the limiter's Prometheus series. Labels are bounded by the number of tenants
// (limited requests carry tenant, scope and limit); a series per key exists only when
// PerKeyMetrics is on, since a gateway can hold 100,000 keys.
type metrics struct {
	limited       *prometheus.CounterVec
	keyLimited    *prometheus.CounterVec
	softOver      *prometheus.CounterVec
	storeClosed   *prometheus.CounterVec
	storeUp       prometheus.Gauge
	storeErrors   prometheus.Counter
	syncCalls     prometheus.Counter
	countedTokens prometheus.Counter
	perKey        bool
}

func newMetrics() *metrics {
	m := &metrics{
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_ratelimit_limited_total",
			Help: "Requests refused (429) by a hard limit, by tenant, whose limit (key or tenant) and which (rpm, tpm, tpd, tpw, tpmo).",
		}, []string{"tenant", "scope", "limit"}),
		keyLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_ratelimit_key_limited_total",
			Help: "Requests refused (429) by a hard limit, per key (only with per-key metrics on).",
		}, []string{"tenant", "key_id", "limit"}),
		softOver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_ratelimit_soft_exceeded_total",
			Help: "Requests let through past a soft limit (with a warning header), by tenant, scope and limit.",
		}, []string{"tenant", "scope", "limit"}),
		storeClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_ratelimit_store_down_refused_total",
			Help: "Requests refused (503) because the limits store was down past the grace and the tenant fails closed.",
		}, []string{"tenant"}),
		storeUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inferplane_ratelimit_store_up",
			Help: "1 while the shared limits store (Redis) answers, 0 while this replica enforces its own counts.",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inferplane_ratelimit_store_errors_total",
			Help: "Failed calls to the limits store.",
		}),
		syncCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inferplane_ratelimit_store_roundtrips_total",
			Help: "Checks that waited for a round trip to the store (a lease ran out, or a first read in a window); the rest were decided from memory.",
		}),
		countedTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inferplane_ratelimit_counted_tokens_total",
			Help: "Tokens counted against limits from access-log entries by this replica.",
		}),
	}
	m.storeUp.Set(1)
	return m
}

// Collectors are the limiter's metrics; perKey adds the per-key series.
func (l *Limiter) Collectors(perKey bool) []prometheus.Collector {
	l.metrics.perKey = perKey
	m := l.metrics
	cs := []prometheus.Collector{m.limited, m.softOver, m.storeClosed, m.storeUp, m.storeErrors, m.syncCalls, m.countedTokens}
	if perKey {
		cs = append(cs, m.keyLimited)
	}
	return cs
}

func (m *metrics) count(tenant, keyID string, res Result) {
	switch {
	case res.StoreClosed:
		m.storeClosed.WithLabelValues(tenant).Inc()
	case !res.Allowed:
		d := res.Denied
		m.limited.WithLabelValues(tenant, d.Scope.String(), d.Kind.Short()).Inc()
		if m.perKey && keyID != "" {
			m.keyLimited.WithLabelValues(tenant, keyID, d.Kind.Short()).Inc()
		}
	}
	for _, h := range res.Over {
		m.softOver.WithLabelValues(tenant, h.Scope.String(), h.Kind.Short()).Inc()
	}
}
