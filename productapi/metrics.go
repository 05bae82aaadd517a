package productapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	gatherer      prometheus.Gatherer
	requests      *prometheus.HistogramVec
	refusals      *prometheus.CounterVec
	writes        *prometheus.CounterVec
	writeAttempts prometheus.Histogram
	writeBatch    prometheus.Histogram
	handedOver    prometheus.Counter
	writeSeconds  prometheus.Histogram
	pushSeconds   prometheus.Histogram
	reconciles    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "inferplane_api_request_duration_seconds",
			Help: "Product API requests by method, route pattern and status code.", Buckets: prometheus.DefBuckets},
			[]string{"method", "route", "code"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inferplane_api_refusals_total",
			Help: "Requests refused at sign-in (401, by reason) or by the roles (403, by action)."}, []string{"code", "reason"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inferplane_api_writes_total",
			Help: "Writes of the inputs by result (committed, replayed, conflict, refused, busy, error)."}, []string{"result"}),
		writeAttempts: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inferplane_api_write_attempts",
			Help: "Attempts per write (more than 1: another replica pushed first).", Buckets: []float64{1, 2, 3, 4, 6, 8}}),
		writeBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inferplane_api_write_batch",
			Help: "How many writes the inputs push that carried a write held (group commit).", Buckets: []float64{1, 2, 4, 8, 16, 32, 64}}),
		handedOver: prometheus.NewCounter(prometheus.CounterOpts{Name: "inferplane_api_writes_taken_total",
			Help: "Writes other replicas prepared and this replica's writer pushed."}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inferplane_api_write_seconds",
			Help: "A write from its start until the tenant's repository is pushed.", Buckets: prometheus.DefBuckets}),
		pushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inferplane_api_tenant_push_seconds",
			Help: "Publishing one tenant's repository.", Buckets: prometheus.DefBuckets}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inferplane_api_reconciles_total",
			Help: "Reconcile runs by result."}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.refusals, m.writes, m.writeAttempts, m.writeBatch, m.handedOver, m.writeSeconds, m.pushSeconds, m.reconciles} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.gatherer = g
	} else {
		m.gatherer = prometheus.DefaultGatherer
	}
	return m, nil
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// wrap times every request by its route pattern (never the raw path: tenant and job names
// would make a series each).
func (m *metrics) wrap(next *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		_, pattern := next.Handler(r)
		next.ServeHTTP(rec, r)
		m.requests.WithLabelValues(r.Method, pattern, strconv.Itoa(rec.code)).Observe(time.Since(start).Seconds())
	})
}
