package metering

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The counters are the records' sums, read from the index when scraped: they count every
// record the store holds, so a restart of the meter does not reset them (a scrape after the
// retention removed old records sees them fall, which Prometheus takes as a reset). Keys are
// not a label: a tenant's keys are many, its jobs few.
var (
	descGPU = prometheus.NewDesc("inferplane_meter_gpu_seconds_total",
		"GPU-seconds recorded: GPUs held by a tenant's VMs times the seconds they held them.",
		[]string{"tenant", "tier", "job", "model", "node_type"}, nil)
	descRequests = prometheus.NewDesc("inferplane_meter_requests_total",
		"Requests recorded from the gateways' counts (keyed requests only).",
		[]string{"tenant", "tier", "job", "model"}, nil)
	descTokens = prometheus.NewDesc("inferplane_meter_tokens_total",
		"Tokens recorded from the gateways' counts, by direction (in: prompt, out: completion).",
		[]string{"tenant", "tier", "job", "model", "direction"}, nil)
	descVMIs = prometheus.NewDesc("inferplane_meter_vmis",
		"VMIs the meter accounts for, by whether they hold their GPUs now.",
		[]string{"state"}, nil)
	descRecords = prometheus.NewDesc("inferplane_meter_records",
		"Records the index holds (read from the store at start, and written since).", nil, nil)
	descSaved = prometheus.NewDesc("inferplane_meter_checkpoint_timestamp_seconds",
		"When the records and the checkpoint were last written (Unix seconds); 0: not yet in this run.", nil, nil)
	descReady = prometheus.NewDesc("inferplane_meter_ready",
		"1 once every tenant cluster in the registry has been looked at.", nil, nil)
)

type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGPU, descRequests, descTokens, descVMIs, descRecords, descSaved, descReady} {
		ch <- d
	}
	c.s.flushErrors.Describe(ch)
	c.s.written.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	type job struct{ tenant, tier, job, model, nodeType string }
	gpu, tok := map[job]uint64{}, map[job]Usage{}
	for _, t := range c.s.index.Totals() {
		if t.GPUSeconds > 0 {
			gpu[job{t.Tenant, t.Tier, t.Job, t.Model, t.NodeType}] += t.GPUSeconds
		}
		if t.Key != "" {
			u := tok[job{t.Tenant, t.Tier, t.Job, t.Model, ""}]
			u.add(t.Usage)
			tok[job{t.Tenant, t.Tier, t.Job, t.Model, ""}] = u
		}
	}
	for j, v := range gpu {
		ch <- prometheus.MustNewConstMetric(descGPU, prometheus.CounterValue, float64(v), j.tenant, j.tier, j.job, j.model, j.nodeType)
	}
	for j, u := range tok {
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(u.Requests), j.tenant, j.tier, j.job, j.model)
		ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(u.TokensIn), j.tenant, j.tier, j.job, j.model, "in")
		ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(u.TokensOut), j.tenant, j.tier, j.job, j.model, "out")
	}
	holding, idle := 0, 0
	for _, st := range c.s.States() {
		if !st.Start.IsZero() && st.End.IsZero() {
			holding++
		} else {
			idle++
		}
	}
	ch <- prometheus.MustNewConstMetric(descVMIs, prometheus.GaugeValue, float64(holding), "holding")
	ch <- prometheus.MustNewConstMetric(descVMIs, prometheus.GaugeValue, float64(idle), "idle")
	ch <- prometheus.MustNewConstMetric(descRecords, prometheus.GaugeValue, float64(c.s.index.Records()))
	ch <- prometheus.MustNewConstMetric(descSaved, prometheus.GaugeValue, float64(c.s.lastSaved.Load()))
	ready := 0.0
	if c.s.Ready() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	c.s.flushErrors.Collect(ch)
	c.s.written.Collect(ch)
}
