package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/clusters"
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
type Clusters struct {
	Registry ClusterRegistry
	// NewSource builds the source of one tenant cluster; onWatchError is told about its failed
	// lists and watches. Default: Kube on the tenant's namespace.
	NewSource func(c clusters.Cluster, onWatchError func(error)) Source
	// SyncTimeout bounds how long the first update waits for every cluster known at start to
	// be read once (default 10s); clusters that come later add their replicas then.
	SyncTimeout time.Duration
	// CheckInterval is how often each cluster's API server is asked /readyz with the
	// cluster's credentials (default 10s). An informer retries a refused connection without
	// telling anyone, so this is how a cluster that went down (or revoked the credentials) is
	// reported while its last replicas keep serving. Check replaces the /readyz request
	// (tests).
	CheckInterval time.Duration
	Check         func(ctx context.Context, c clusters.Cluster) error
	// Debounce gathers a burst of changes into one update (default 20ms: each cluster's own
	// source already gathers its bursts).
	Debounce   time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer

	mu       sync.Mutex
	watches  map[string]*tenantWatch // by tenant
	registry []warning.Warning
	metric   *prometheus.GaugeVec
}

// tenantWatch is the running source of one tenant cluster. During a credential change the
// new one (prev set) runs beside the old one until it has read the cluster once.
type tenantWatch struct {
	cluster clusters.Cluster
	cancel  context.CancelFunc
	prev    *tenantWatch
	since   time.Time

	// Guarded by Clusters.mu.
	last     *Update // nil until the first update
	watchErr string  // the last failed list or watch, cleared by the next update
	checkErr string  // the last failed /readyz check, cleared by the next good one
	stopErr  string  // why the source could not start
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
}

// Cluster states.
const (
	StateStarting    = "starting"    // not read yet
	StateSynced      = "synced"      // read; its replicas are served
	StateFailing     = "failing"     // read once; its watch fails now (its last replicas stay)
	StateUnreachable = "unreachable" // never read: its list fails
	StateRotating    = "rotating"    // new credentials not read yet; the previous watch serves
)

var clusterStates = []string{StateStarting, StateSynced, StateFailing, StateUnreachable, StateRotating}

// Run implements Source.
func (s *Clusters) Run(ctx context.Context, updates chan<- Update) error {
	log := cmp.Or(s.Logger, slog.Default())
	s.mu.Lock()
	s.watches = map[string]*tenantWatch{}
	if s.metric == nil {
		s.metric = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferplane_xds_tenant_clusters", Help: "Tenant clusters of the registry by state of their watch.",
		}, []string{"state"})
		if s.Registerer != nil {
			s.Registerer.MustRegister(s.metric)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snapshots := make(chan clusters.Snapshot)
	regErr := make(chan error, 1)
	go func() { regErr <- s.Registry.Run(ctx, snapshots) }()
	defer s.stopAll()
	return s.loop(ctx, snapshots, regErr, updates, log)
}

// loop applies registry snapshots and per-cluster changes, and sends merged updates.
func (s *Clusters) loop(ctx context.Context, snapshots <-chan clusters.Snapshot, regErr <-chan error, updates chan<- Update, log *slog.Logger) error {
	poked := make(chan struct{}, 1)
	poke := func() {
		select {
		case poked <- struct{}{}:
		default:
		}
	}
	var prev clusters.Snapshot
	var first, ready bool
	var syncDeadline <-chan time.Time
	debounce := cmp.Or(s.Debounce, 20*time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-regErr:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("cluster registry: %w", err)
			}
			return nil
		case snap := <-snapshots:
			s.apply(ctx, prev, snap, poke, log)
			prev = snap
			if !first {
				first = true
				syncDeadline = time.After(cmp.Or(s.SyncTimeout, 10*time.Second))
			}
		case <-poked:
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
			return nil
		case <-time.After(debounce):
		}
		select {
		case updates <- s.merged():
		case <-ctx.Done():
			return nil
		}
	}
}

// apply starts, restarts and stops the per-cluster sources for a new snapshot.
func (s *Clusters) apply(ctx context.Context, prev, next clusters.Snapshot, poke func(), log *slog.Logger) {
	s.mu.Lock()
	s.registry = next.Problems
	s.mu.Unlock()
	for _, ch := range clusters.Changes(prev, next) {
		c := ch.Cluster
		l := log.With("tenant", c.Tenant, "secret", c.Secret)
		switch ch.Type {
		case clusters.Added:
			l.Info("tenant cluster added: watching its replicas", "server", c.Server)
			s.start(ctx, c, nil, poke, l)
		case clusters.Changed:
			l.Info("tenant cluster changed (credentials, server or Secret): restarting its watch; the current one serves until the new one has read the cluster", "server", c.Server)
			s.mu.Lock()
			old := s.watches[c.Tenant]
			if old != nil && old.prev != nil { // changed again before the last change took
				old.cancel()
				old = old.prev
			}
			s.mu.Unlock()
			s.start(ctx, c, old, poke, l)
		case clusters.Removed:
			l.Info("tenant cluster removed: its replicas are withdrawn")
			s.mu.Lock()
			w := s.watches[c.Tenant]
			delete(s.watches, c.Tenant)
			s.mu.Unlock()
			w.stop()
		}
	}
	poke()
}

// start runs the source of cluster c; prev, when set, serves until it has read the cluster.
func (s *Clusters) start(ctx context.Context, c clusters.Cluster, prev *tenantWatch, poke func(), log *slog.Logger) {
	wctx, cancel := context.WithCancel(ctx)
	w := &tenantWatch{cluster: c, cancel: cancel, prev: prev, since: time.Now()}
	onWatchError := func(err error) {
		s.mu.Lock()
		w.watchErr = err.Error()
		s.mu.Unlock()
		poke()
	}
	newSource := s.NewSource
	if newSource == nil {
		newSource = func(c clusters.Cluster, onWatchError func(error)) Source {
			return &Kube{Config: c.Config, Namespaces: []string{c.Tenant}, Logger: log, OnWatchError: onWatchError}
		}
	}
	src := newSource(c, onWatchError)
	s.mu.Lock()
	s.watches[c.Tenant] = w
	s.mu.Unlock()
	in := make(chan Update)
	go func() {
		for {
			select {
			case <-wctx.Done():
				return
			case u := <-in:
				s.received(w, u)
				poke()
			}
		}
	}()
	go s.check(wctx, w, poke, log)
	go func() {
		if err := src.Run(wctx, in); err != nil && wctx.Err() == nil {
			log.Error("tenant cluster: its watch could not start", "error", err)
			s.mu.Lock()
			w.stopErr = err.Error()
			s.mu.Unlock()
			poke()
		}
	}()
}

// check asks the cluster's API server /readyz every CheckInterval until ctx ends.
func (s *Clusters) check(ctx context.Context, w *tenantWatch, poke func(), log *slog.Logger) {
	check := s.Check
	if check == nil {
		hc, err := rest.HTTPClientFor(w.cluster.Config)
		if err != nil {
			s.setCheckErr(w, fmt.Errorf("client configuration: %w", err), poke)
			return
		}
		defer hc.CloseIdleConnections()
		url := strings.TrimSuffix(w.cluster.Config.Host, "/") + "/readyz"
		check = func(ctx context.Context, _ clusters.Cluster) error { return readyz(ctx, hc, url) }
	}
	t := time.NewTicker(cmp.Or(s.CheckInterval, 10*time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(rctx, w.cluster)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Debug("tenant cluster: API server check failed", "error", err)
		}
		s.setCheckErr(w, err, poke)
	}
}

func readyz(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*neturl.Error](err); ok {
			err = ue.Err // drop the repeated method and URL
		}
		return fmt.Errorf("API server unreachable: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("API server /readyz answers %s", resp.Status)
	}
	return nil
}

// setCheckErr records a check's result, telling the merger when it changes the state.
func (s *Clusters) setCheckErr(w *tenantWatch, err error, poke func()) {
	text := ""
	if err != nil {
		text = err.Error()
	}
	s.mu.Lock()
	changed := w.checkErr != text
	w.checkErr = text
	s.mu.Unlock()
	if changed {
		poke()
	}
}

// received keeps a cluster's latest update; the first one of a new watch retires the one it
// replaces.
func (s *Clusters) received(w *tenantWatch, u Update) {
	s.mu.Lock()
	w.last, w.watchErr = &u, ""
	prev := w.prev
	w.prev = nil
	s.mu.Unlock()
	prev.stop()
}

func (w *tenantWatch) stop() {
	if w == nil {
		return
	}
	w.cancel()
	w.prev.stop()
}

func (s *Clusters) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watches {
		w.stop()
	}
}

// unsynced counts the clusters not read yet (a rotation's previous watch counts as read).
func (s *Clusters) unsynced() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.watches {
		if w.serving() == nil && w.stopErr == "" {
			n++
		}
	}
	return n
}

// serving is the update whose replicas the cluster contributes; mu is held.
func (w *tenantWatch) serving() *Update {
	if w.last == nil && w.prev != nil {
		return w.prev.last
	}
	return w.last
}

// state is the cluster's state and its error, if any; mu is held.
func (w *tenantWatch) state() (string, string) {
	errText := cmp.Or(w.stopErr, w.watchErr, w.checkErr)
	switch {
	case w.last == nil && w.prev != nil:
		return StateRotating, errText
	case w.last == nil && errText != "":
		return StateUnreachable, errText
	case w.last == nil:
		return StateStarting, ""
	case errText != "":
		return StateFailing, errText
	}
	return StateSynced, ""
}

// merged is every cluster's replicas and problems, and the registry's problems.
func (s *Clusters) merged() Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	var u Update
	for _, p := range s.registry {
		u.Problems = append(u.Problems, p)
	}
	counts := map[string]int{}
	for _, tenant := range slices.Sorted(maps.Keys(s.watches)) {
		w := s.watches[tenant]
		state, errText := w.state()
		counts[state]++
		cluster := "tenant cluster " + tenant
		switch state {
		case StateUnreachable, StateRotating, StateFailing:
			u.Problems = append(u.Problems, warning.Warning{Object: cluster, Reason: clusterProblem(state, w.cluster.Secret, errText)})
		}
		cur := w.serving()
		if cur == nil {
			continue
		}
		for _, p := range cur.Problems {
			u.Problems = append(u.Problems, warning.Warning{Object: cluster + ": " + p.Object, Reason: p.Reason})
		}
		for _, r := range cur.Replicas {
			if r.Tenant != tenant {
				// A cluster serves its own tenant only, whatever its VMIs claim.
				u.Problems = append(u.Problems, warning.Warning{Object: cluster + ": VirtualMachineInstance/" + r.Key(),
					Reason: fmt.Sprintf("skipped: labelled tenant %s in the cluster of tenant %s", r.Tenant, tenant)})
				continue
			}
			u.Replicas = append(u.Replicas, r)
		}
	}
	for _, st := range clusterStates {
		s.metric.WithLabelValues(st).Set(float64(counts[st]))
	}
	// Sorted by namespace and name already: tenants in order, each cluster's replicas sorted
	// (Kube's order), all in the tenant's namespace.
	return u
}

func clusterProblem(state, secret, errText string) string {
	switch state {
	case StateUnreachable:
		return fmt.Sprintf("not read yet (Secret %s): %s", secret, errText)
	case StateRotating:
		return fmt.Sprintf("new credentials in Secret %s not working yet, the previous ones still serve: %s", secret, cmp.Or(errText, "waiting for the first read"))
	}
	return fmt.Sprintf("watch failing, its last known replicas stay (Secret %s): %s", secret, errText)
}

// Describe implements Describer: every tenant cluster and the state of its watch.
func (s *Clusters) Describe() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []ClusterStatus{}
	for _, tenant := range slices.Sorted(maps.Keys(s.watches)) {
		w := s.watches[tenant]
		state, errText := w.state()
		st := ClusterStatus{Tenant: tenant, Kind: w.cluster.Kind, Secret: w.cluster.Secret, Server: w.cluster.Server,
			State: state, Since: w.since, Error: errText}
		if cur := w.serving(); cur != nil {
			st.Replicas = len(cur.Replicas)
		}
		out = append(out, st)
	}
	return map[string]any{"tenantClusters": out}
}
