package discovery

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/inferplane/inferplane/clusters"
)

// fastBackoff keeps the retry tests short; the schedule itself is kubewatch's.
func fastBackoff() wait.Backoff {
	return wait.Backoff{Duration: 5 * time.Millisecond, Factor: 2, Cap: 20 * time.Millisecond, Steps: 1 << 30}
}

// runClusters runs src until the test ends and returns its updates.
func runClusters(t *testing.T, src *Clusters) (updates chan Update, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	updates = make(chan Update)
	done := make(chan struct{})
	var runErr error
	go func() { runErr = src.Run(ctx, updates); close(done) }()
	wait := func() bool {
		cancel()
		select {
		case <-done:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	stop = func() {
		if !wait() {
			t.Fatal("the source did not stop")
		}
		require.NoError(t, runErr)
	}
	t.Cleanup(func() { wait() })
	return updates, stop
}

func recvUpdate(t *testing.T, updates <-chan Update, what string, cond func(Update) bool) Update {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case u := <-updates:
			if cond(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("no update: %s", what)
		}
	}
}

func (ss *sources) setFail(fp string, err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.fail[fp] = err
}

func statusOf(t *testing.T, src *Clusters, tenant string) ClusterStatus {
	t.Helper()
	for _, st := range src.Describe().(map[string]any)["tenantClusters"].([]ClusterStatus) {
		if st.Tenant == tenant {
			return st
		}
	}
	t.Fatalf("no status of %s", tenant)
	return ClusterStatus{}
}

// A cluster whose watch cannot start is retried on the backoff for as long as it fails,
// showing the latest attempt's error, and joins as soon as its API server answers.
func TestClustersRetryUntilTheClusterAnswers(t *testing.T) {
	reg := make(chanRegistry, 1)
	ss := &sources{all: map[string]*scriptedSource{}, fail: map[string]error{"a1": errors.New("connection refused at https://127.0.0.1:1")}}
	ss.setDown("acme", true)
	src := &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: time.Hour, CheckInterval: time.Hour,
		Check: ss.check, Backoff: fastBackoff, Registerer: prometheus.NewRegistry()}
	updates, stop := runClusters(t, src)
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1"), cluster("globex", "g1")}}
	ss.get(t, "g1").updates <- Update{Replicas: []Replica{rep("globex", "g-0")}}

	// The first update waits for acme, which fails at once, up to the sync timeout: here an
	// hour, so none comes while acme is down.
	select {
	case u := <-updates:
		t.Fatalf("published before acme was read: %v", names(u))
	case <-time.After(200 * time.Millisecond):
	}
	st := statusOf(t, src, "acme")
	assert.Equal(t, StateUnreachable, st.State)
	assert.Equal(t, "API server unreachable: test: connection refused", st.Error, "the latest attempt's error: the check's")

	// Its API server answers; its watch starts on the next retry and its replicas join.
	ss.setFail("a1", nil)
	ss.setDown("acme", false)
	require.Eventually(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		s := ss.all["a1"]
		return s != nil && s.startErr == nil
	}, 5*time.Second, time.Millisecond, "a new attempt starts once the check passes")
	ss.get(t, "a1").updates <- Update{Replicas: []Replica{rep("acme", "a-0")}}
	u := recvUpdate(t, updates, "acme joins", func(u Update) bool { return len(u.Replicas) == 2 })
	assert.Equal(t, []string{"acme/a-0", "globex/g-0"}, names(u))
	st = statusOf(t, src, "acme")
	assert.Equal(t, StateSynced, st.State)
	assert.Empty(t, st.Error)
	assert.Positive(t, st.Retries)
	stop()
}

// /readyz waits for a cluster that fails at once (refused, 401) up to the sync timeout, then
// the others are published.
func TestClustersReadinessWaitsForAFailingCluster(t *testing.T) {
	reg := make(chanRegistry, 1)
	ss := &sources{all: map[string]*scriptedSource{}, fail: map[string]error{"a1": errors.New("401 Unauthorized at https://127.0.0.1:1")}}
	src := &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: 400 * time.Millisecond,
		CheckInterval: time.Hour, Check: func(context.Context, clusters.Cluster) error {
			return errors.New("401 Unauthorized at https://127.0.0.1:1")
		},
		Backoff: fastBackoff}
	updates, _ := runClusters(t, src)
	start := time.Now()
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1"), cluster("globex", "g1")}}
	ss.get(t, "g1").updates <- Update{Replicas: []Replica{rep("globex", "g-0")}}
	u := recvUpdate(t, updates, "after the sync timeout", func(Update) bool { return true })
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "the first update waited for acme up to the sync timeout")
	assert.Equal(t, []string{"globex/g-0"}, names(u))
	assert.Contains(t, problemText(u), "tenant cluster acme: not read yet (Secret argocd/cluster-acme): 401 Unauthorized at https://127.0.0.1:1")
}

// The last replicas read from each cluster outlive a restart: a cluster that cannot be read
// after it serves them, stale and reported, until it answers again.
func TestClustersLastKnownGoodAcrossRestarts(t *testing.T) {
	store := KnownGoodFile{Path: filepath.Join(t.TempDir(), "known-good.json")}
	ss := &sources{all: map[string]*scriptedSource{}, fail: map[string]error{}}

	// First run: both clusters read; their sets are saved.
	reg := make(chanRegistry, 1)
	src := &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: time.Hour, CheckInterval: time.Hour,
		Check: ss.check, Backoff: fastBackoff, KnownGood: store}
	updates, stop := runClusters(t, src)
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1"), cluster("globex", "g1")}}
	ss.get(t, "a1").updates <- Update{Replicas: []Replica{rep("acme", "a-0"), rep("acme", "a-1")}}
	ss.get(t, "g1").updates <- Update{Replicas: []Replica{rep("globex", "g-0")}}
	recvUpdate(t, updates, "both read", func(u Update) bool { return len(u.Replicas) == 3 })
	stop()
	saved, err := store.Load()
	require.NoError(t, err)
	require.Len(t, saved, 2)
	assert.Equal(t, "acme", saved[0].Tenant)
	assert.Len(t, saved[0].Replicas, 2)

	// Second run: acme's API server is down. After the sync timeout its saved set is served.
	ss.mu.Lock()
	ss.all = map[string]*scriptedSource{} // the first run's sources are gone
	ss.mu.Unlock()
	ss.setFail("a1", errors.New("connection refused at https://127.0.0.1:1"))
	ss.setDown("acme", true)
	reg = make(chanRegistry, 1)
	metrics := prometheus.NewRegistry()
	src = &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: 300 * time.Millisecond, CheckInterval: time.Hour,
		Check: ss.check, Backoff: fastBackoff, KnownGood: store, Registerer: metrics}
	updates, stop = runClusters(t, src)
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1"), cluster("globex", "g1")}}
	ss.get(t, "g1").updates <- Update{Replicas: []Replica{rep("globex", "g-0")}}
	u := recvUpdate(t, updates, "acme's saved set", func(u Update) bool { return len(u.Replicas) == 3 })
	assert.Equal(t, []string{"acme/a-0", "acme/a-1", "globex/g-0"}, names(u))
	assert.Contains(t, problemText(u), "tenant cluster acme: not read yet (Secret argocd/cluster-acme); serving its last known good replicas, confirmed ")
	st := statusOf(t, src, "acme")
	assert.Equal(t, StateStale, st.State)
	assert.True(t, st.Stale)
	assert.Contains(t, src.ReadyNote(), "acme (stale, confirmed ")
	assert.Equal(t, 0.0, gaugeOf(t, metrics, "inferplane_xds_tenant_cluster_up", "acme"))
	assert.Equal(t, 1.0, gaugeOf(t, metrics, "inferplane_xds_tenant_cluster_up", "globex"))

	// acme answers again: its current replicas replace the saved ones.
	ss.setFail("a1", nil)
	ss.setDown("acme", false)
	require.Eventually(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.all["a1"].startErr == nil
	}, 5*time.Second, time.Millisecond)
	ss.get(t, "a1").updates <- Update{Replicas: []Replica{rep("acme", "a-1")}}
	u = recvUpdate(t, updates, "acme current", func(u Update) bool { return len(u.Replicas) == 2 })
	assert.Equal(t, []string{"acme/a-1", "globex/g-0"}, names(u))
	assert.NotContains(t, problemText(u), "tenant cluster acme")
	assert.Empty(t, src.ReadyNote())
	stop()
}

// gaugeOf is the value of one series of a gathered metric, by its tenant label.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name, tenant string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == tenant {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{tenant=%q}", name, tenant)
	return 0
}

// A stale set is never trusted past the maximum age: its replicas stay known (the endpoint
// answers 503, not 404) but none is ready; so is a failing cluster's.
func TestClustersStaleSetExpires(t *testing.T) {
	store := KnownGoodFile{Path: filepath.Join(t.TempDir(), "known-good.json")}
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, store.Save([]KnownSet{{Tenant: "acme", Server: "https://127.0.0.1:1", ConfirmedAt: old,
		Replicas: []Replica{rep("acme", "a-0")}}}))
	ss := &sources{all: map[string]*scriptedSource{}, fail: map[string]error{"a1": errors.New("connection refused at https://127.0.0.1:1")}}
	ss.setDown("acme", true)
	reg := make(chanRegistry, 1)
	src := &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: 100 * time.Millisecond, CheckInterval: time.Hour,
		Check: ss.check, Backoff: fastBackoff, KnownGood: store, MaxStaleAge: time.Hour}
	updates, _ := runClusters(t, src)
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1")}}
	u := recvUpdate(t, updates, "acme's expired set", func(u Update) bool { return len(u.Replicas) == 1 })
	assert.False(t, u.Replicas[0].Ready, "an expired set is not served")
	assert.Contains(t, problemText(u), "tenant cluster acme: its last known replicas were confirmed 2h0m0s ago, more than the maximum age 1h0m0s: not served until the cluster answers")
	assert.True(t, statusOf(t, src, "acme").Withheld)
}

// A registry that cannot be read is retried, not fatal; meanwhile every cluster's last known
// set is served once the sync timeout has passed.
func TestClustersRegistryDownAtStart(t *testing.T) {
	store := KnownGoodFile{Path: filepath.Join(t.TempDir(), "known-good.json")}
	require.NoError(t, store.Save([]KnownSet{{Tenant: "acme", Server: "https://127.0.0.1:1", ConfirmedAt: time.Now(),
		Replicas: []Replica{rep("acme", "a-0")}}}))
	reg := &flakyRegistry{fails: 3, snapshots: make(chanRegistry, 1)}
	ss := &sources{all: map[string]*scriptedSource{}, fail: map[string]error{}}
	src := &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: 100 * time.Millisecond, CheckInterval: time.Hour,
		Check: ss.check, Backoff: fastBackoff, KnownGood: store}
	updates, _ := runClusters(t, src)
	u := recvUpdate(t, updates, "the known set without a registry", func(u Update) bool { return len(u.Replicas) == 1 })
	assert.Contains(t, problemText(u), "tenant clusters: cluster registry: connection refused at https://127.0.0.1:2")
	assert.Contains(t, problemText(u), "tenant cluster acme: not read yet")
	reg.snapshots <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1")}}
	ss.get(t, "a1").updates <- Update{Replicas: []Replica{rep("acme", "a-0"), rep("acme", "a-1")}}
	u = recvUpdate(t, updates, "the registry read", func(u Update) bool { return len(u.Replicas) == 2 })
	assert.False(t, strings.Contains(problemText(u), "tenant clusters:"), problemText(u))
}

// flakyRegistry fails its first runs, then sends what the test sends.
type flakyRegistry struct {
	fails     int
	snapshots chanRegistry
}

func (r *flakyRegistry) Run(ctx context.Context, out chan<- clusters.Snapshot) error {
	if r.fails > 0 {
		r.fails--
		return errors.New("connection refused at https://127.0.0.1:2")
	}
	return r.snapshots.Run(ctx, out)
}
