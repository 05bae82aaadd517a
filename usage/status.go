package usage

import (
	"fmt"
	"time"
)

// Status is an endpoint's health.
type Status string

const (
	StatusHealthy     Status = "healthy"
	StatusDegraded    Status = "degraded"
	StatusUnavailable Status = "unavailable"
)

// Thresholds turn figures into a status.
type Thresholds struct {
	// MinRequests in the window before the success rate counts (default 20), so that one
	// failed request on a quiet endpoint does not flip it.
	MinRequests uint64
	// DegradedBelow and UnavailableBelow are success rates (defaults 0.95 and 0.5).
	DegradedBelow, UnavailableBelow float64
	// SlowP99 marks an endpoint degraded when its p99 latency is above it; 0 turns it off
	// (the default: a long generation is slow by nature).
	SlowP99 time.Duration
}

func (t Thresholds) withDefaults() Thresholds {
	if t.MinRequests == 0 {
		t.MinRequests = 20
	}
	if t.DegradedBelow == 0 {
		t.DegradedBelow = 0.95
	}
	if t.UnavailableBelow == 0 {
		t.UnavailableBelow = 0.5
	}
	return t
}

// ReplicaCount is what the xDS server knows of one endpoint's replicas: how many take traffic
// (Ready: running, Ready and passing their probes) out of how many exist.
type ReplicaCount struct {
	Tenant string `json:"-"`
	Job    string `json:"-"`
	Ready  int    `json:"ready"`
	Total  int    `json:"total"`
}

// ReplicaSource reports every endpoint the xDS server knows with its replica counts
// (*xds.Controller is one). It is asked on every health request and metrics scrape, so it
// reports by callback rather than build a list. Nil means traffic alone decides.
type ReplicaSource interface {
	EachReplicaCount(f func(tenant, job string, ready, total int))
}

// ReplicaFunc adapts a function that lists counts to ReplicaSource.
type ReplicaFunc func() []ReplicaCount

// EachReplicaCount implements ReplicaSource.
func (f ReplicaFunc) EachReplicaCount(each func(tenant, job string, ready, total int)) {
	for _, r := range f() {
		each(r.Tenant, r.Job, r.Ready, r.Total)
	}
}

// Classify rates one endpoint from its window figures and replica counts. The worst finding
// wins; reasons list every finding, for people.
func Classify(h *EndpointHealth, th Thresholds) (Status, []string) {
	th = th.withDefaults()
	st := StatusHealthy
	var reasons []string
	worse := func(s Status, why string) {
		reasons = append(reasons, why)
		if s == StatusUnavailable || st == StatusHealthy {
			st = s
		}
	}
	if r := h.Replicas; r != nil {
		switch {
		case r.Total == 0:
			worse(StatusUnavailable, "no replicas")
		case r.Ready == 0:
			worse(StatusUnavailable, fmt.Sprintf("no ready replica (0 of %d)", r.Total))
		case r.Ready < r.Total:
			worse(StatusDegraded, fmt.Sprintf("%d of %d replicas ready", r.Ready, r.Total))
		}
	}
	if h.Requests >= th.MinRequests && h.SuccessRate != nil {
		sr := *h.SuccessRate
		switch {
		case sr < th.UnavailableBelow:
			worse(StatusUnavailable, fmt.Sprintf("success rate %.1f%% below %.0f%%", 100*sr, 100*th.UnavailableBelow))
		case sr < th.DegradedBelow:
			worse(StatusDegraded, fmt.Sprintf("success rate %.1f%% below %.0f%%", 100*sr, 100*th.DegradedBelow))
		}
	}
	if th.SlowP99 > 0 && h.LatencyP99Ms != nil && time.Duration(*h.LatencyP99Ms*float64(time.Millisecond)) > th.SlowP99 {
		worse(StatusDegraded, fmt.Sprintf("p99 latency %.0f ms above %s", *h.LatencyP99Ms, th.SlowP99))
	}
	return st, reasons
}
