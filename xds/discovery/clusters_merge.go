package discovery

import (
	"cmp"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferplane/inferplane/internal/warning"
)

// view is what one tenant cluster contributes at a moment: its state, the replicas it
// serves and why.
type view struct {
	state     string
	err       string
	replicas  []Replica
	problems  []warning.Warning // its source's own problems
	confirmed time.Time
	stale     bool // the replicas are not current: a failing watch, or an earlier run's set
	withheld  bool // and older than the maximum age: not served
	fromFile  bool // an earlier run's set
}

// view of tenant at now; mu is held.
func (s *Clusters) view(tenant string, now time.Time) view {
	t := s.tenants[tenant]
	if t == nil { // the registry is not read: an earlier run's set, if any
		k, ok := s.known[tenant]
		if !ok {
			return view{state: StateUnreachable, err: cmp.Or(s.registryErr, "the cluster registry is not read yet")}
		}
		return s.expire(view{state: StateStale, err: cmp.Or(s.registryErr, "the cluster registry is not read yet"),
			replicas: k.Replicas, confirmed: k.ConfirmedAt, stale: true, fromFile: true}, now)
	}
	errText := cmp.Or(t.checkErr, t.cur.err())
	if t.serving == nil {
		k, ok := s.known[tenant]
		switch {
		case ok && k.Server == t.cluster.Server:
			return s.expire(view{state: StateStale, err: errText, replicas: k.Replicas, confirmed: k.ConfirmedAt, stale: true, fromFile: true}, now)
		case errText != "":
			return view{state: StateUnreachable, err: errText}
		}
		return view{state: StateStarting}
	}
	v := view{replicas: t.serving.last.Replicas, problems: t.serving.last.Problems, confirmed: t.confirmed}
	switch {
	case t.serving != t.cur && t.serving.cluster.Fingerprint != t.cur.cluster.Fingerprint:
		v.state, v.err = StateRotating, errText
	case errText != "" || t.serving.watchErr != "":
		v.state, v.err, v.stale = StateFailing, cmp.Or(errText, t.serving.watchErr), true
	case t.serving != t.cur:
		v.state, v.err, v.stale = StateFailing, "its watch restarted: reading the cluster again", true
	default:
		v.state = StateSynced
	}
	return s.expire(v, now)
}

// expire withholds a stale view's replicas once they are older than the maximum age.
func (s *Clusters) expire(v view, now time.Time) view {
	if v.stale && now.Sub(v.confirmed) > s.maxAge() {
		v.withheld = true
	}
	return v
}

// problem says what is wrong with a cluster whose view is not synced ("" when nothing is).
func (s *Clusters) problem(v view, secret string, now time.Time) string {
	var text string
	switch v.state {
	case StateSynced, StateStarting:
		return ""
	case StateUnreachable:
		text = fmt.Sprintf("not read yet (Secret %s): %s", secret, v.err)
	case StateRotating:
		return fmt.Sprintf("new credentials in Secret %s not working yet, the previous ones still serve: %s", secret, cmp.Or(v.err, "waiting for the first read"))
	case StateStale:
		text = fmt.Sprintf("not read yet (Secret %s); serving its last known good replicas, confirmed %s ago: %s", secret,
			age(v.confirmed, now), cmp.Or(v.err, "waiting for the first read"))
	default:
		text = fmt.Sprintf("watch failing, its last known replicas stay (Secret %s): %s", secret, v.err)
	}
	if v.withheld {
		text = fmt.Sprintf("its last known replicas were confirmed %s ago, more than the maximum age %s: not served until the cluster answers (Secret %s): %s",
			age(v.confirmed, now), s.maxAge(), secret, cmp.Or(v.err, "not read"))
	}
	return text
}

// merged is every cluster's replicas and problems, the registry's problems, and the sets to
// keep as last known good.
func (s *Clusters) merged() (Update, []KnownSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var u Update
	u.Problems = append(u.Problems, s.registry...)
	if s.registryErr != "" {
		u.Problems = append(u.Problems, warning.Warning{Object: "tenant clusters", Reason: s.registryErr + " (its last clusters stay)"})
	}
	if s.knownErr != "" {
		u.Problems = append(u.Problems, warning.Warning{Object: "tenant clusters", Reason: s.knownErr})
	}
	withheld := map[string]bool{}
	var known []KnownSet
	for _, tenant := range s.tenantNames() {
		v := s.view(tenant, now)
		cluster := "tenant cluster " + tenant
		secret := "(none: the registry is not read)"
		if t := s.tenants[tenant]; t != nil {
			secret = t.cluster.Secret
			if t.serving != nil {
				known = append(known, KnownSet{Tenant: tenant, Server: t.serving.cluster.Server, ConfirmedAt: t.confirmed,
					Replicas: ownReplicas(tenant, t.serving.last.Replicas)})
			} else if k, ok := s.known[tenant]; ok {
				known = append(known, k) // not read in this run: keep the earlier run's set
			}
		} else if k, ok := s.known[tenant]; ok {
			known = append(known, k)
		}
		if text := s.problem(v, secret, now); text != "" {
			u.Problems = append(u.Problems, warning.Warning{Object: cluster, Reason: text})
		}
		withheld[tenant] = v.withheld
		for _, p := range v.problems {
			u.Problems = append(u.Problems, warning.Warning{Object: cluster + ": " + p.Object, Reason: p.Reason})
		}
		for _, r := range v.replicas {
			if r.Tenant != tenant {
				// A cluster serves its own tenant only, whatever its VMIs claim.
				u.Problems = append(u.Problems, warning.Warning{Object: cluster + ": VirtualMachineInstance/" + r.Key(),
					Reason: fmt.Sprintf("skipped: labelled tenant %s in the cluster of tenant %s", r.Tenant, tenant)})
				continue
			}
			if v.withheld {
				// Kept, not ready: the endpoint stays and answers 503 rather than 404.
				r.Ready = false
			}
			u.Replicas = append(u.Replicas, r)
		}
	}
	s.withheld = withheld
	// Sorted by namespace and name already: tenants in order, each cluster's replicas sorted
	// (Kube's order), all in the tenant's namespace.
	return u, known
}

func ownReplicas(tenant string, all []Replica) []Replica {
	out := make([]Replica, 0, len(all))
	for _, r := range all {
		if r.Tenant == tenant {
			out = append(out, r)
		}
	}
	return out
}

// expiryChanged says whether a cluster's replicas have become too old (or young again)
// since the last merge.
func (s *Clusters) expiryChanged() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, tenant := range s.tenantNames() {
		if s.view(tenant, now).withheld != s.withheld[tenant] {
			return true
		}
	}
	return false
}

// status is one cluster as /debug/endpoints shows it; mu is held.
func (s *Clusters) status(tenant string, now time.Time) ClusterStatus {
	v := s.view(tenant, now)
	st := ClusterStatus{Tenant: tenant, State: v.state, Error: v.err, Replicas: len(v.replicas), ConfirmedAt: v.confirmed,
		Stale: v.stale, Withheld: v.withheld}
	if t := s.tenants[tenant]; t != nil {
		st.Kind, st.Secret, st.Server, st.Since, st.Retries = t.cluster.Kind, t.cluster.Secret, t.cluster.Server, t.since, t.retries
	} else if k, ok := s.known[tenant]; ok {
		st.Server = k.Server
	}
	return st
}

// clusterCollector reports each tenant cluster's health at scrape time.
type clusterCollector struct{ s *Clusters }

var (
	descClusters = prometheus.NewDesc("inferplane_xds_tenant_clusters",
		"Tenant clusters of the registry by state of their watch.", []string{"state"}, nil)
	descClusterUp = prometheus.NewDesc("inferplane_xds_tenant_cluster_up",
		"1 when the tenant's cluster answers and its replicas are current (state synced), else 0.", []string{"tenant"}, nil)
	descClusterState = prometheus.NewDesc("inferplane_xds_tenant_cluster_state",
		"1 for the current state of the tenant's cluster (starting, synced, failing, unreachable, stale, rotating).", []string{"tenant", "state"}, nil)
	descClusterStale = prometheus.NewDesc("inferplane_xds_tenant_cluster_stale_seconds",
		"How long the replicas served for the tenant have gone unconfirmed by its cluster (0 when current).", []string{"tenant"}, nil)
	descClusterWithheld = prometheus.NewDesc("inferplane_xds_tenant_cluster_withheld",
		"1 when the tenant's last known replicas are older than the maximum age and not served.", []string{"tenant"}, nil)
	descClusterRetries = prometheus.NewDesc("inferplane_xds_tenant_cluster_retries_total",
		"Restarts of the tenant cluster's watch after it failed.", []string{"tenant"}, nil)
)

func (c clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClusters, descClusterUp, descClusterState, descClusterStale, descClusterWithheld, descClusterRetries} {
		ch <- d
	}
}

func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	counts := map[string]int{}
	for _, tenant := range s.tenantNames() {
		st := s.status(tenant, now)
		counts[st.State]++
		up, stale, withheld := 0.0, 0.0, 0.0
		if st.State == StateSynced {
			up = 1
		}
		if st.Stale && !st.ConfirmedAt.IsZero() {
			stale = now.Sub(st.ConfirmedAt).Seconds()
		}
		if st.Withheld {
			withheld = 1
		}
		ch <- prometheus.MustNewConstMetric(descClusterUp, prometheus.GaugeValue, up, tenant)
		ch <- prometheus.MustNewConstMetric(descClusterState, prometheus.GaugeValue, 1, tenant, st.State)
		ch <- prometheus.MustNewConstMetric(descClusterStale, prometheus.GaugeValue, stale, tenant)
		ch <- prometheus.MustNewConstMetric(descClusterWithheld, prometheus.GaugeValue, withheld, tenant)
		ch <- prometheus.MustNewConstMetric(descClusterRetries, prometheus.CounterValue, float64(st.Retries), tenant)
	}
	for _, state := range clusterStates {
		ch <- prometheus.MustNewConstMetric(descClusters, prometheus.GaugeValue, float64(counts[state]), state)
	}
}
