package usage

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes the aggregator as Prometheus metrics, computed at scrape time so that
// ingesting a log entry never touches a metric vector.
func (a *Aggregator) Collector() prometheus.Collector { return collector{a} }

type collector struct{ a *Aggregator }

var (
	epLabels       = []string{"tenant", "job"}
	descRequests   = prometheus.NewDesc("inferplane_endpoint_requests_total", "Requests that reached an endpoint, by status class (0xx: no response).", append(epLabels, "code_class"), nil)
	descDenied     = prometheus.NewDesc("inferplane_endpoint_denied_total", "Requests the API key check refused.", epLabels, nil)
	descDuration   = prometheus.NewDesc("inferplane_endpoint_request_duration_seconds", "Request duration, first byte received to last byte sent.", epLabels, nil)
	descTokens     = prometheus.NewDesc("inferplane_endpoint_tokens_total", "Tokens in (prompt) and out (completion) from the responses' usage.", append(epLabels, "direction"), nil)
	descStatus     = prometheus.NewDesc("inferplane_endpoint_status", "1 for the endpoint's current status (healthy, degraded, unavailable), 0 for the others.", append(epLabels, "status"), nil)
	descSuccess    = prometheus.NewDesc("inferplane_endpoint_success_ratio", "Success rate over the health window (absent without requests).", epLabels, nil)
	descWindowLat  = prometheus.NewDesc("inferplane_endpoint_window_latency_seconds", "Latency quantiles over the health window.", append(epLabels, "quantile"), nil)
	descReplicas   = prometheus.NewDesc("inferplane_endpoint_replicas", "Replicas of the endpoint by readiness, from the replica probes.", append(epLabels, "state"), nil)
	descKeyReqs    = prometheus.NewDesc("inferplane_key_requests_total", "Requests per API key.", []string{"tenant", "key_id"}, nil)
	descKeyTokens  = prometheus.NewDesc("inferplane_key_tokens_total", "Tokens per API key.", []string{"tenant", "key_id", "direction"}, nil)
	descLogEntries = prometheus.NewDesc("inferplane_usage_log_entries_total", "Access log entries received, by result.", []string{"result"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descDenied, descDuration, descTokens, descStatus,
		descSuccess, descWindowLat, descReplicas, descKeyReqs, descKeyTokens, descLogEntries} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	// Window figures and statuses, computed as the JSON is.
	for _, h := range a.Health("").Endpoints {
		for _, s := range []Status{StatusHealthy, StatusDegraded, StatusUnavailable} {
			v := 0.0
			if h.Status == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descStatus, prometheus.GaugeValue, v, h.Tenant, h.Job, string(s))
		}
		if h.SuccessRate != nil {
			ch <- prometheus.MustNewConstMetric(descSuccess, prometheus.GaugeValue, *h.SuccessRate, h.Tenant, h.Job)
		}
		if h.LatencyP50Ms != nil {
			ch <- prometheus.MustNewConstMetric(descWindowLat, prometheus.GaugeValue, *h.LatencyP50Ms/1000, h.Tenant, h.Job, "0.5")
			ch <- prometheus.MustNewConstMetric(descWindowLat, prometheus.GaugeValue, *h.LatencyP99Ms/1000, h.Tenant, h.Job, "0.99")
		}
		if r := h.Replicas; r != nil {
			ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(r.Ready), h.Tenant, h.Job, "ready")
			ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(r.Total-r.Ready), h.Tenant, h.Job, "not_ready")
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, es := range a.endpoints {
		for class, n := range es.byClass {
			if n > 0 {
				ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(n), k.Tenant, k.Job, strconv.Itoa(class)+"xx")
			}
		}
		ch <- prometheus.MustNewConstMetric(descDenied, prometheus.CounterValue, float64(es.denied), k.Tenant, k.Job)
		buckets := make(map[float64]uint64, len(promBuckets))
		var cum uint64
		for i, ub := range promBuckets {
			cum += es.latCounts[i]
			buckets[ub] = cum
		}
		cum += es.latCounts[len(promBuckets)]
		ch <- prometheus.MustNewConstHistogram(descDuration, cum, es.latSum, buckets, k.Tenant, k.Job)
		ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(es.tokensIn), k.Tenant, k.Job, "in")
		ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(es.tokensOut), k.Tenant, k.Job, "out")
	}
	if a.opt.PerKeyMetrics {
		for id, ks := range a.keys {
			ch <- prometheus.MustNewConstMetric(descKeyReqs, prometheus.CounterValue, float64(ks.total.Requests), ks.tenant, id)
			ch <- prometheus.MustNewConstMetric(descKeyTokens, prometheus.CounterValue, float64(ks.total.TokensIn), ks.tenant, id, "in")
			ch <- prometheus.MustNewConstMetric(descKeyTokens, prometheus.CounterValue, float64(ks.total.TokensOut), ks.tenant, id, "out")
		}
	}
	ch <- prometheus.MustNewConstMetric(descLogEntries, prometheus.CounterValue, float64(a.recorded), "recorded")
	ch <- prometheus.MustNewConstMetric(descLogEntries, prometheus.CounterValue, float64(a.unattributed), "unattributed")
}
