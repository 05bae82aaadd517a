package discovery

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/kubewatch"
	"github.com/inferplane/inferplane/internal/warning"
)

// ClusterRegistry reports the tenant clusters, in full, every time they change
// (clusters.Registry).
type ClusterRegistry interface {
	Run(ctx context.Context, out chan<- clusters.Snapshot) error
}

// Clusters discovers replicas in every tenant cluster of a registry: one source per cluster
// (by default a Kube source of the tenant's own namespace in it), started when the cluster
// appears, restarted when its credentials change and stopped, its replicas withdrawn, when it
// leaves the registry. Each cluster runs on its own: one that is down, slow or answers garbage
// keeps its last replicas and holds up no other.
//
// A cluster that fails (its watch cannot start, or fails later) is retried for as long as it
// is in the registry: its API server is checked on a capped, jittered backoff and its watch
// restarted as soon as the check passes, so its replicas join within seconds of the server
// answering. With KnownGood, the last replica set read from each cluster outlives a restart
// of the gateway, and a cluster that cannot be read at start serves that set, still probed and
// reported stale, for at most MaxStaleAge.
type Clusters struct {
	Registry ClusterRegistry
	// NewSource builds the source of one tenant cluster; onWatchError is told about its failed
	// lists and watches. Default: Kube on the tenant's namespace.
	NewSource func(c clusters.Cluster, onWatchError func(error)) Source
	// SyncTimeout bounds how long the first update waits for the registry and for every
	// cluster it lists to be read once (default 10s); clusters that come later add their
	// replicas then.
	SyncTimeout time.Duration
	// CheckInterval is how often each cluster's API server is checked with the cluster's
	// credentials while all is well (default 5s); CheckTimeout bounds one check (default 2s).
	// An informer retries a refused connection without telling anyone, so the check is how a
	// cluster that went down (or revoked the credentials) is noticed, within CheckInterval +
	// CheckTimeout. Check replaces the default check, a list of at most one serving VMI in the
	// tenant's namespace (tests).
	CheckInterval time.Duration
	CheckTimeout  time.Duration
	Check         func(ctx context.Context, c clusters.Cluster) error
	// Backoff is the schedule of checks and restarts of a failing cluster (default
	// kubewatch.Backoff: 0.5 s doubling to 4 s, jittered).
	Backoff func() wait.Backoff
	// KnownGood keeps each cluster's last replica set across restarts (nil: none is kept).
	KnownGood KnownGoodStore
	// MaxStaleAge is how long a cluster's last replicas are served after it last answered
	// (default 6h): past it they are withheld (the endpoint answers 503) until it answers.
	MaxStaleAge time.Duration
	// Debounce gathers a burst of changes into one update (default 20ms: each cluster's own
	// source already gathers its bursts).
	Debounce   time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer

	mu           sync.Mutex
	tenants      map[string]*tenantState // by tenant
	registry     []warning.Warning
	registryErr  string              // the registry's latest failure, "" once it runs
	registryRead bool                // a snapshot arrived
	noRegistry   bool                // none arrived by the sync timeout: every known set is served
	known        map[string]KnownSet // loaded at start, by tenant
	knownErr     string              // loading or saving the known sets failed
	withheld     map[string]bool     // tenants whose replicas the last merge withheld (too old)
}

// ClusterStatus is one tenant cluster as /debug/endpoints shows it.
type ClusterStatus struct {
	Tenant   string    `json:"tenant"`
	Kind     string    `json:"kind"`
	Secret   string    `json:"secret"`
	Server   string    `json:"server"`
	State    string    `json:"state"`
	Replicas int       `json:"replicas"`
	Since    time.Time `json:"since"`
	Error    string    `json:"error,omitempty"`
	// ConfirmedAt is the last moment the cluster answered with the replicas it serves (zero:
	// never); Stale says they are not current (its watch fails, or they come from the last
	// known good set of an earlier run); Withheld, that they are older than the maximum age
	// and not served.
	ConfirmedAt time.Time `json:"confirmedAt,omitzero"`
	Stale       bool      `json:"stale,omitempty"`
	Withheld    bool      `json:"withheld,omitempty"`
	// Retries counts the restarts of its watch after failures.
	Retries int `json:"retries,omitempty"`
}

// Cluster states.
const (
	StateStarting    = "starting"    // not read yet, nothing failed yet
	StateSynced      = "synced"      // read; its replicas are served
	StateFailing     = "failing"     // read once; its check or watch fails now (its last replicas stay)
	StateUnreachable = "unreachable" // never read in this run, no known set: nothing served
	StateStale       = "stale"       // never read in this run: the last known good set of an earlier run is served
	StateRotating    = "rotating"    // new credentials not read yet; the previous watch serves
)

var clusterStates = []string{StateStarting, StateSynced, StateFailing, StateUnreachable, StateStale, StateRotating}

// Defaults.
const (
	DefaultSyncTimeout   = 10 * time.Second
	DefaultCheckInterval = 5 * time.Second
	DefaultCheckTimeout  = 2 * time.Second
	DefaultMaxStaleAge   = 6 * time.Hour
	// knownRefresh is how far a set's confirmation may move on before the file is rewritten.
	knownRefresh = time.Minute
)

// Run implements Source. It returns only when ctx ends: a registry that cannot be read is
// retried like a cluster, and reported.
func (s *Clusters) Run(ctx context.Context, updates chan<- Update) error {
	log := cmp.Or(s.Logger, slog.Default())
	s.mu.Lock()
	s.tenants, s.withheld = map[string]*tenantState{}, map[string]bool{}
	s.mu.Unlock()
	if s.Registerer != nil {
		if err := s.Registerer.Register(clusterCollector{s}); err != nil {
			return fmt.Errorf("tenant cluster metrics: %w", err)
		}
	}
	var saver *knownSaver
	if s.KnownGood != nil {
		s.loadKnown(log)
		saver = newKnownSaver(s.KnownGood, knownRefresh, func(err error) { s.setKnownErr(err, log) })
		done, saved := make(chan struct{}), make(chan struct{})
		go func() { saver.run(done); close(saved) }()
		defer func() { close(done); <-saved }()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snapshots := make(chan clusters.Snapshot)
	go s.runRegistry(ctx, snapshots, log)
	defer s.stopAll()
	s.loop(ctx, snapshots, updates, saver, log)
	return nil
}

func (s *Clusters) loadKnown(log *slog.Logger) {
	sets, err := s.KnownGood.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known = map[string]KnownSet{}
	if err != nil {
		s.knownErr = "last known good replicas not loaded (starting without them): " + err.Error()
		log.Error("tenant clusters: last known good replicas not loaded; starting without them", "store", s.KnownGood.String(), "error", err)
		return
	}
	for _, k := range sets {
		s.known[k.Tenant] = k
	}
	log.Info("tenant clusters: last known good replicas loaded", "store", s.KnownGood.String(), "clusters", len(sets))
}

func (s *Clusters) setKnownErr(err error, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text := ""
	if err != nil {
		text = err.Error()
		if text != s.knownErr {
			log.Error("tenant clusters: last known good replicas", "error", err)
		}
	}
	s.knownErr = text
}

// runRegistry runs the registry until ctx ends, restarting it on the backoff when it fails.
func (s *Clusters) runRegistry(ctx context.Context, out chan<- clusters.Snapshot, log *slog.Logger) {
	b := s.backoff()
	for {
		err := s.Registry.Run(ctx, out)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("stopped")
		}
		s.mu.Lock()
		s.registryErr = "cluster registry: " + err.Error()
		s.mu.Unlock()
		wait := b.Step()
		log.Error("cluster registry failed; retrying (its last clusters stay)", "error", err, "retryIn", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// loop applies registry snapshots and per-cluster changes, and sends merged updates.
func (s *Clusters) loop(ctx context.Context, snapshots <-chan clusters.Snapshot, updates chan<- Update, saver *knownSaver, log *slog.Logger) {
	poked := make(chan struct{}, 1)
	poke := func() {
		select {
		case poked <- struct{}{}:
		default:
		}
	}
	var prev clusters.Snapshot
	var first, ready bool
	timeout := cmp.Or(s.SyncTimeout, DefaultSyncTimeout)
	registryDeadline := time.After(timeout)
	var syncDeadline <-chan time.Time
	expiry := time.NewTicker(min(cmp.Or(s.MaxStaleAge, DefaultMaxStaleAge)/10, time.Minute))
	defer expiry.Stop()
	debounce := cmp.Or(s.Debounce, 20*time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return
		case snap := <-snapshots:
			s.apply(ctx, prev, snap, poke, log)
			prev = snap
			if !first {
				first = true
				syncDeadline = time.After(timeout)
			}
		case <-poked:
		case <-expiry.C:
			if !s.expiryChanged() {
				continue
			}
		case <-registryDeadline:
			if first {
				continue
			}
			log.Warn("tenant clusters: the registry was not read in time: serving the last known good replicas of every cluster", "timeout", timeout)
			s.mu.Lock()
			s.noRegistry = true
			s.mu.Unlock()
			first, ready = true, true
		case <-syncDeadline:
			if !ready {
				log.Warn("tenant clusters: publishing before every cluster was read", "notRead", s.unsynced())
			}
			ready = true
		}
		if !first || !(ready || s.unsynced() == 0) {
			continue
		}
		ready = true
		select { // let a burst of changes settle into one update
		case <-ctx.Done():
			return
		case <-time.After(debounce):
		}
		u, known := s.merged()
		if saver != nil {
			saver.offer(known)
		}
		select {
		case updates <- u:
		case <-ctx.Done():
			return
		}
	}
}

// apply starts, restarts and stops the per-cluster sources for a new snapshot.
func (s *Clusters) apply(ctx context.Context, prev, next clusters.Snapshot, poke func(), log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registry, s.registryErr, s.registryRead, s.noRegistry = next.Problems, "", true, false
	for _, ch := range clusters.Changes(prev, next) {
		c := ch.Cluster
		l := log.With("tenant", c.Tenant, "secret", c.Secret)
		switch ch.Type {
		case clusters.Added:
			l.Info("tenant cluster added: watching its replicas", "server", c.Server)
			t := &tenantState{cluster: c, since: time.Now(), wake: make(chan struct{}, 1)}
			t.ctx, t.cancel = context.WithCancel(ctx)
			s.tenants[c.Tenant] = t
			s.startAttempt(t, poke, l)
			go s.supervise(t, poke, l)
		case clusters.Changed:
			l.Info("tenant cluster changed (credentials, server or Secret): restarting its watch; the current one serves until the new one has read the cluster", "server", c.Server)
			t := s.tenants[c.Tenant]
			t.cluster, t.since = c, time.Now()
			s.startAttempt(t, poke, l)
		case clusters.Removed:
			l.Info("tenant cluster removed: its replicas are withdrawn")
			s.tenants[c.Tenant].cancel()
			delete(s.tenants, c.Tenant)
		}
	}
	poke()
}

func (s *Clusters) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tenants {
		t.cancel()
	}
}

// unsynced counts the clusters not read in this run (a rotation's previous watch counts as
// read; a last known good set does not).
func (s *Clusters) unsynced() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tenants {
		if t.serving == nil {
			n++
		}
	}
	return n
}

func (s *Clusters) backoff() wait.Backoff {
	if s.Backoff != nil {
		return s.Backoff()
	}
	return kubewatch.Backoff()
}

func (s *Clusters) maxAge() time.Duration { return cmp.Or(s.MaxStaleAge, DefaultMaxStaleAge) }

// Describe implements Describer: every tenant cluster and the state of its watch.
func (s *Clusters) Describe() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := []ClusterStatus{}
	for _, tenant := range s.tenantNames() {
		out = append(out, s.status(tenant, now))
	}
	d := map[string]any{"tenantClusters": out, "maxStaleAge": s.maxAge().String()}
	if s.registryErr != "" {
		d["registryError"] = s.registryErr
	}
	if s.knownErr != "" {
		d["knownGoodError"] = s.knownErr
	}
	return d
}

// ReadyNote implements ReadyNoter: the clusters whose replicas are served stale.
func (s *Clusters) ReadyNote() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var stale []string
	for _, tenant := range s.tenantNames() {
		if st := s.status(tenant, now); st.Stale && !st.Withheld {
			stale = append(stale, fmt.Sprintf("%s (%s, confirmed %s ago)", tenant, st.State, age(st.ConfirmedAt, now)))
		}
	}
	if len(stale) == 0 {
		return ""
	}
	return fmt.Sprintf("serving the last known replicas of tenant clusters that do not answer: %v", stale)
}

// tenantNames are the tenants to report, sorted: the registry's, or without one the known
// sets served instead; mu is held.
func (s *Clusters) tenantNames() []string {
	if s.noRegistry {
		return slices.Sorted(maps.Keys(s.known))
	}
	return slices.Sorted(maps.Keys(s.tenants))
}
