package webhook

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the webhook's own Prometheus series (controller-runtime adds its HTTP-level
// controller_runtime_webhook_* series beside them).
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	refusals  *prometheus.CounterVec
}

// NewMetrics registers the series with reg. Registering twice (two servers in one process, as
// in tests) reuses the series already there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inferplane_webhook_decisions_total",
		Help: "Admission decisions by kind and result (allowed, denied, ignored: not inferplane's, error).",
	}, []string{"kind", "result"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "inferplane_webhook_decision_duration_seconds",
		Help: "Time to decide one admission request (decode, policy, without HTTP), by kind.",
		// 25us to about 0.4s (docs/webhook.md has the measured decision times).
		Buckets: prometheus.ExponentialBuckets(0.000025, 2, 15),
	}, []string{"kind"})
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inferplane_webhook_refused_total",
		Help: "Requests refused before any decision, by reason (too_large, busy, envelope, body).",
	}, []string{"reason"})
	var err error
	if decisions, err = register(reg, decisions); err != nil {
		return nil, err
	}
	if latency, err = register(reg, latency); err != nil {
		return nil, err
	}
	if refusals, err = register(reg, refusals); err != nil {
		return nil, err
	}
	return &Metrics{decisions: decisions, latency: latency, refusals: refusals}, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *Metrics) observe(kind, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(kind, result).Inc()
	m.latency.WithLabelValues(kind).Observe(d.Seconds())
}

func (m *Metrics) refused(reason string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(reason).Inc()
}
