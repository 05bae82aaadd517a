package discovery

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/warning"
)

// chanRegistry is a registry whose snapshots the test sends.
type chanRegistry chan clusters.Snapshot

func (r chanRegistry) Run(ctx context.Context, out chan<- clusters.Snapshot) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-r:
			select {
			case out <- s:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// scriptedSource is one tenant cluster's source, driven by the test (this unit test has no
// API server; xds/clusters_test.go runs the same source against three real ones).
type scriptedSource struct {
	cluster  clusters.Cluster
	onErr    func(error)
	updates  chan Update
	startErr error
	stopped  chan struct{}
}

func (s *scriptedSource) Run(ctx context.Context, out chan<- Update) error {
	defer close(s.stopped)
	if s.startErr != nil {
		return s.startErr
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-s.updates:
			out <- u
		}
	}
}

type sources struct {
	mu   sync.Mutex
	all  map[string]*scriptedSource // by fingerprint
	fail map[string]error
	down map[string]bool // tenants whose API server check fails
}

func (ss *sources) check(_ context.Context, c clusters.Cluster) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.down[c.Tenant] {
		return errors.New("API server unreachable: test: connection refused")
	}
	return nil
}

func (ss *sources) setDown(tenant string, down bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.down == nil {
		ss.down = map[string]bool{}
	}
	ss.down[tenant] = down
}

func (ss *sources) new(c clusters.Cluster, onErr func(error)) Source {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := &scriptedSource{cluster: c, onErr: onErr, updates: make(chan Update, 4), stopped: make(chan struct{}), startErr: ss.fail[c.Fingerprint]}
	ss.all[c.Fingerprint] = s
	return s
}

func (ss *sources) get(t *testing.T, fp string) *scriptedSource {
	t.Helper()
	var s *scriptedSource
	require.Eventually(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		s = ss.all[fp]
		return s != nil
	}, 5*time.Second, time.Millisecond, "no source for %s", fp)
	return s
}

func cluster(tenant, fp string) clusters.Cluster {
	return clusters.Cluster{Tenant: tenant, Kind: clusters.KindArgoCD, Secret: "argocd/cluster-" + tenant,
		Server: "https://127.0.0.1:1", Config: &rest.Config{Host: "https://127.0.0.1:1"}, Fingerprint: fp}
}

func rep(tenant, name string) Replica {
	return Replica{Tenant: tenant, Job: "chat", Runtime: "vllm", Namespace: tenant, Name: name, Running: true, Address: "127.0.0.1", Port: 8000, Ready: true}
}

func names(u Update) []string {
	var out []string
	for _, r := range u.Replicas {
		out = append(out, r.Key())
	}
	return out
}

func TestClustersSource(t *testing.T) {
	reg := make(chanRegistry)
	ss := &sources{all: map[string]*scriptedSource{}, fail: map[string]error{"bad": errors.New("test: cannot start")}}
	src := &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: time.Hour,
		CheckInterval: time.Millisecond, Check: ss.check}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := make(chan Update)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, updates) }()
	recv := func(what string, cond func(Update) bool) Update {
		t.Helper()
		deadline := time.After(5 * time.Second)
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

	// Two clusters; the first update waits until both have been read once.
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1"), cluster("globex", "g1")},
		Problems: []warning.Warning{{Object: "Secret/argocd/garbage", Reason: "skipped: test"}}}
	ss.get(t, "a1").updates <- Update{Replicas: []Replica{rep("acme", "a-0")}}
	select {
	case u := <-updates:
		t.Fatalf("published before globex was read: %v", names(u))
	case <-time.After(50 * time.Millisecond):
	}
	ss.get(t, "g1").updates <- Update{Replicas: []Replica{rep("globex", "g-0"), rep("acme", "claims-acme")}}
	u := recv("both clusters", func(u Update) bool { return len(u.Replicas) == 2 })
	assert.Equal(t, []string{"acme/a-0", "globex/g-0"}, names(u))
	assert.Contains(t, problemText(u), "Secret/argocd/garbage: skipped: test")
	assert.Contains(t, problemText(u), "tenant cluster globex: VirtualMachineInstance/acme/claims-acme: skipped: labelled tenant acme in the cluster of tenant globex",
		"a cluster cannot serve another tenant")

	// globex's API server goes away: its replicas stay, reported; acme's change still arrives.
	ss.setDown("globex", true)
	ss.get(t, "a1").updates <- Update{Replicas: []Replica{rep("acme", "a-0"), rep("acme", "a-1")}}
	u = recv("acme's change while globex fails", func(u Update) bool {
		// "globex: watch failing", not just "globex": the update of acme's change may come
		// before the check finds globex down, and it names globex already (claims-acme).
		return len(u.Replicas) == 3 && strings.Contains(problemText(u), "globex: watch failing")
	})
	assert.Contains(t, problemText(u), "tenant cluster globex: watch failing, its last known replicas stay (Secret argocd/cluster-globex): API server unreachable: test: connection refused")
	ss.setDown("globex", false)
	recv("globex back", func(u Update) bool { return !strings.Contains(problemText(u), "globex: watch failing") })
	// A failed list or watch the informer reports is reported too, until the next update.
	ss.get(t, "g1").onErr(errors.New("test: forbidden"))
	recv("watch error", func(u Update) bool { return strings.Contains(problemText(u), "globex: watch failing") })
	ss.get(t, "g1").updates <- Update{Replicas: []Replica{rep("globex", "g-0")}}
	recv("watch error cleared", func(u Update) bool { return !strings.Contains(problemText(u), "globex: watch failing") })

	// acme's credentials rotate: the old watch serves until the new one has read the cluster.
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a2"), cluster("globex", "g1")}}
	u = recv("rotation reported", func(u Update) bool { return strings.Contains(problemText(u), "tenant cluster acme: new credentials") })
	assert.Equal(t, []string{"acme/a-0", "acme/a-1", "globex/g-0"}, names(u), "the previous watch still serves")
	ss.get(t, "a2").updates <- Update{Replicas: []Replica{rep("acme", "a-0")}}
	u = recv("the new watch serves", func(u Update) bool { return len(u.Replicas) == 2 })
	assert.NotContains(t, problemText(u), "tenant cluster acme")
	select {
	case <-ss.get(t, "a1").stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the previous watch was not stopped")
	}

	// A new cluster whose source cannot start is reported; globex leaves the registry.
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a2"), cluster("initech", "bad")}}
	u = recv("globex withdrawn", func(u Update) bool { return len(u.Replicas) == 1 && strings.Contains(problemText(u), "initech") })
	assert.Equal(t, []string{"acme/a-0"}, names(u))
	assert.Contains(t, problemText(u), "tenant cluster initech: not read yet (Secret argocd/cluster-initech): test: cannot start")

	st := src.Describe().(map[string]any)["tenantClusters"].([]ClusterStatus)
	require.Len(t, st, 2)
	assert.Equal(t, StateSynced, st[0].State)
	assert.Equal(t, 1, st[0].Replicas)
	assert.Equal(t, StateUnreachable, st[1].State)

	cancel()
	require.NoError(t, <-done)
}

// The first update does not wait forever for a cluster that never answers.
func TestClustersSourceSyncTimeout(t *testing.T) {
	reg := make(chanRegistry, 1)
	ss := &sources{all: map[string]*scriptedSource{}}
	src := &Clusters{Registry: reg, NewSource: ss.new, Debounce: time.Millisecond, SyncTimeout: 100 * time.Millisecond, Check: ss.check}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := make(chan Update, 1)
	go func() { _ = src.Run(ctx, updates) }()
	reg <- clusters.Snapshot{Clusters: []clusters.Cluster{cluster("acme", "a1"), cluster("globex", "g1")}}
	ss.get(t, "a1").updates <- Update{Replicas: []Replica{rep("acme", "a-0")}}
	select {
	case u := <-updates:
		assert.Equal(t, []string{"acme/a-0"}, names(u))
	case <-time.After(5 * time.Second):
		t.Fatal("no update after the sync timeout")
	}
}

func problemText(u Update) string {
	var b strings.Builder
	for _, p := range u.Problems {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}
