// Package xds is inferplane's xDS server process: it joins replica discovery (xds/discovery),
// health probing (xds/health), the pure resource builder (xds/resources) and the ADS server
// (xds/server). The Controller decides which replicas Envoy gets; Serve runs the whole process
// with its gRPC and admin listeners.
package xds

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/internal/warning"
	"github.com/inferplane/inferplane/xds/certs"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/resources"
)

// Publisher is where the Controller sends resources (xds/server.Server).
type Publisher interface {
	SetConfig(ctx context.Context, set *resources.Set) error
	UpdateLoadAssignments(clas ...*endpointv3.ClusterLoadAssignment) error
}

// Prober probes the replicas the Controller names (xds/health.Checker).
type Prober interface {
	SetTargets([]health.Target)
}

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	Resources resources.Config
	// Filters adds the API-key and usage filters to the listener; nil adds none.
	Filters resources.Filters
	// HealthPath is the path probed on each replica (health.Config.Path).
	HealthPath string
	// InitialProbeWait bounds how long the first configuration waits for the first probe of
	// every replica found at start (so a restart does not publish empty endpoints).
	InitialProbeWait time.Duration
	// RetryInterval is how soon a configuration that failed to build is tried again.
	RetryInterval time.Duration
	// TLS says certificates are served (CertificatesChanged feeds them): endpoints no
	// certificate covers are then reported.
	TLS        bool
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Controller turns discovered replicas and their probe results into published resources. A
// replica is served when its VMI is Running with an IP, its Ready condition is true and its
// probes say it is up. Health changes republish only the affected job's endpoints; changes to
// the set of jobs (or their runtime or key requirement) republish the configuration.
type Controller struct {
	cfg     ControllerConfig
	pub     Publisher
	prober  Prober
	log     *slog.Logger
	metrics *controllerMetrics

	events chan health.Event
	certs  chan certs.Update // the latest certificates, not yet taken by Run

	mu          sync.Mutex
	initialized bool
	replicas    map[string]discovery.Replica   // by replica key
	byJob       map[string][]discovery.Replica // by job key, lowest replica first
	publishedOK bool                           // a configuration has been published
	probes      map[string]probeState          // by replica key
	problems    map[string]map[string]bool     // by origin (problemsSource, ...), then text
	tls         tlsState
	published   map[string]publishedJob // by job key
	lastErr     error                   // why the last configuration failed to build or publish; nil once one succeeds
	pending     map[string]bool         // replicas whose first probe the first publish waits for
	sourceSeen  bool                    // the source's first update arrived
}

type probeState struct {
	url     string
	healthy bool
	reason  string
}

type publishedJob struct {
	info     resources.EndpointInfo
	replicas []resources.Replica
}

// NewController returns a Controller; Run drives it.
func NewController(cfg ControllerConfig, pub Publisher, prober Prober) (*Controller, error) {
	if err := cfg.Resources.Validate(); err != nil {
		return nil, err
	}
	cfg.HealthPath = cmp.Or(cfg.HealthPath, "/health")
	cfg.InitialProbeWait = cmp.Or(cfg.InitialProbeWait, 3*time.Second)
	cfg.RetryInterval = cmp.Or(cfg.RetryInterval, 5*time.Second)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Controller{
		cfg:       cfg,
		pub:       pub,
		prober:    prober,
		log:       log,
		metrics:   newControllerMetrics(cfg.Registerer),
		events:    make(chan health.Event, 1024),
		certs:     make(chan certs.Update, 1),
		replicas:  map[string]discovery.Replica{},
		probes:    map[string]probeState{},
		problems:  map[string]map[string]bool{},
		published: map[string]publishedJob{},
	}, nil
}

// HealthChanged takes a probe decision (health.Checker's OnChange).
func (c *Controller) HealthChanged(ev health.Event) { c.events <- ev }

// Run processes source updates and health events until ctx ends. It is the only writer of the
// controller's state: each step decides under the mutex what to publish, and publishes after
// releasing it, so readers (the admin page, every metrics scrape) never wait for an encoding.
func (c *Controller) Run(ctx context.Context, updates <-chan discovery.Update) {
	var initialWait <-chan time.Time
	retry := time.NewTicker(c.cfg.RetryInterval)
	defer retry.Stop()
	for {
		var p publication
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			var wait bool
			p, wait = c.applyUpdate(u)
			if wait && initialWait == nil {
				initialWait = time.After(c.cfg.InitialProbeWait)
			}
		case ev := <-c.events:
			p = c.applyHealth(ev)
		case u := <-c.certs:
			p = c.applyCertificates(u)
		case <-initialWait:
			p = c.whenInitialWaitEnds()
		case <-retry.C:
			p = c.retry()
		}
		c.publish(ctx, p)
	}
}

// publication is what one step of Run decided to publish: the whole configuration (full), or
// the changed load assignments of some jobs, or nothing.
type publication struct {
	full bool
	// jobs are every job's endpoint (full), or those of the jobs whose replicas changed.
	jobs map[string]*resources.Endpoint
	// certs are the certificates to serve (full).
	certs []resources.Certificate
	// healthAt is when the health event that caused it arrived (zero for other causes).
	healthAt time.Time
}

// applyUpdate takes a source's full state. wait says the first publish now waits for first
// probes.
func (c *Controller) applyUpdate(u discovery.Update) (p publication, wait bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setProblems(problemsSource, u.Problems)
	targets := c.setReplicas(u.Replicas)
	c.prober.SetTargets(targets)

	if !c.initialized {
		c.sourceSeen = true
		c.pending = map[string]bool{}
		for _, t := range targets {
			if _, ok := c.probes[t.Key]; !ok {
				c.pending[t.Key] = true
			}
		}
		if c.readyToStart() {
			return c.fullPublication(), false
		}
		c.log.Info("waiting for the first probe of every replica (and the certificates, with TLS) before the first publish",
			"replicas", len(c.pending), "atMost", c.cfg.InitialProbeWait)
		return publication{}, true
	}
	return c.reconcile(), false
}

// Origins of problems.
const (
	problemsSource = "discovery"
	problemsCerts  = "certificates"
	problemsTLS    = "tls"
)

// setProblems replaces the problems of one origin, logging each new one once; mu is held.
func (c *Controller) setProblems(origin string, list []warning.Warning) {
	problems := make(map[string]bool, len(list))
	for _, p := range list {
		problems[p.String()] = true
		if !c.problems[origin][p.String()] {
			c.log.Warn(origin+" problem", "object", p.Object, "reason", p.Reason)
		}
	}
	c.problems[origin] = problems
	n := 0
	for _, ps := range c.problems {
		n += len(ps)
	}
	c.metrics.problems.Set(float64(n))
}

// setReplicas replaces the known replicas and returns the ones to probe; probe results of
// replicas that left or moved to another address are forgotten. mu is held.
func (c *Controller) setReplicas(list []discovery.Replica) []health.Target {
	c.replicas = make(map[string]discovery.Replica, len(list))
	c.byJob = map[string][]discovery.Replica{}
	var targets []health.Target
	want := map[string]string{}
	for _, r := range list {
		c.replicas[r.Key()] = r
		c.byJob[r.JobKey()] = append(c.byJob[r.JobKey()], r)
		if r.Candidate() {
			t := health.Target{Key: r.Key(), URL: r.HealthURL(c.cfg.HealthPath)}
			targets = append(targets, t)
			want[t.Key] = t.URL
		}
	}
	for _, reps := range c.byJob {
		// The job's settings come from its lowest-numbered replica: the generator gives every
		// replica the same, and during a change the first replica is the reference.
		slices.SortFunc(reps, func(a, b discovery.Replica) int {
			ai, _ := strconv.Atoi(a.Index)
			bi, _ := strconv.Atoi(b.Index)
			return cmp.Or(cmp.Compare(ai, bi), cmp.Compare(a.Name, b.Name))
		})
	}
	for key, p := range c.probes {
		if want[key] != p.url {
			delete(c.probes, key)
		}
	}
	return targets
}

func (c *Controller) applyHealth(ev health.Event) publication {
	start := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replicas[ev.Key]
	if !ok || !r.Candidate() || r.HealthURL(c.cfg.HealthPath) != ev.URL {
		return publication{} // a result for a replica that has since left or moved
	}
	c.probes[ev.Key] = probeState{url: ev.URL, healthy: ev.Healthy, reason: ev.Reason}
	if !c.initialized {
		delete(c.pending, ev.Key)
		if c.readyToStart() {
			return c.fullPublication()
		}
		return publication{}
	}
	p := c.reconcileJobs(r.JobKey())
	p.healthAt = start
	return p
}

// readyToStart says the first publish has all it waits for: the source's first update, the
// first probe of every replica it named and, with TLS, the certificates. mu is held.
func (c *Controller) readyToStart() bool {
	return c.sourceSeen && len(c.pending) == 0 && (!c.cfg.TLS || c.tls.received)
}

// whenInitialWaitEnds publishes what is known when some replicas never answered their first
// probe in time.
func (c *Controller) whenInitialWaitEnds() publication {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initialized {
		return publication{}
	}
	c.log.Warn("publishing before every replica answered its first probe", "waitingFor", len(c.pending))
	return c.fullPublication()
}

// retry publishes the whole configuration again after a failure.
func (c *Controller) retry() publication {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.initialized || c.lastErr == nil {
		return publication{}
	}
	return c.fullPublication()
}

// serving says whether a replica takes traffic now.
func (c *Controller) serving(r discovery.Replica) bool {
	if !r.Candidate() || !r.Ready {
		return false
	}
	p, ok := c.probes[r.Key()]
	return ok && p.healthy && p.url == r.HealthURL(c.cfg.HealthPath)
}

// endpoint is a job's endpoint with its serving replicas; mu is held.
func (c *Controller) endpoint(jobKey string) (*resources.Endpoint, bool) {
	reps := c.byJob[jobKey]
	if len(reps) == 0 {
		return nil, false
	}
	ref := reps[0]
	ep := &resources.Endpoint{EndpointInfo: resources.EndpointInfo{
		Tenant: ref.Tenant, Job: ref.Job, Runtime: ref.Runtime, RequireAPIKey: ref.RequireAPIKey,
	}}
	seen := map[string]bool{}
	for _, r := range reps {
		if !c.serving(r) || seen[r.HostPort()] {
			continue
		}
		seen[r.HostPort()] = true
		ep.Replicas = append(ep.Replicas, resources.Replica{Name: r.Name, Address: r.Address, Port: r.Port})
	}
	return ep, true
}

// jobs is every job's endpoint; mu is held.
func (c *Controller) jobs() map[string]*resources.Endpoint {
	out := make(map[string]*resources.Endpoint, len(c.byJob))
	for key := range c.byJob {
		out[key], _ = c.endpoint(key)
	}
	return out
}

// fullPublication is the whole configuration as it stands; mu is held.
func (c *Controller) fullPublication() publication {
	c.initialized = true
	c.pending = nil
	return publication{full: true, jobs: c.jobs(), certs: c.tls.certs}
}

// reconcile publishes whatever differs from what was published; mu is held.
func (c *Controller) reconcile() publication {
	jobs := c.jobs()
	if len(jobs) != len(c.published) {
		return publication{full: true, jobs: jobs, certs: c.tls.certs}
	}
	for key, ep := range jobs {
		if p, ok := c.published[key]; !ok || p.info != ep.EndpointInfo {
			return publication{full: true, jobs: jobs, certs: c.tls.certs}
		}
	}
	return c.changedEndpoints(jobs)
}

// reconcileJobs republishes the endpoints of the given jobs if they changed; mu is held.
func (c *Controller) reconcileJobs(keys ...string) publication {
	jobs := make(map[string]*resources.Endpoint, len(keys))
	for _, k := range keys {
		ep, ok := c.endpoint(k)
		if p, pub := c.published[k]; !ok || !pub || p.info != ep.EndpointInfo {
			return c.reconcile() // the configuration itself must change
		}
		jobs[k] = ep
	}
	return c.changedEndpoints(jobs)
}

// changedEndpoints keeps the jobs whose serving replicas differ from what was published and
// notes them as published (a failed publish is retried in full); mu is held.
func (c *Controller) changedEndpoints(jobs map[string]*resources.Endpoint) publication {
	changed := map[string]*resources.Endpoint{}
	for k, ep := range jobs {
		p := c.published[k]
		replicas := sortedReplicas(ep.Replicas)
		if slices.Equal(p.replicas, replicas) {
			continue
		}
		p.replicas = replicas
		c.published[k] = p
		changed[k] = ep
		c.log.Info("endpoints changed", "endpoint", k, "serving", len(ep.Replicas))
	}
	return publication{jobs: changed}
}

// publish hands p to the publisher, without the mutex: building and encoding a configuration
// of thousands of jobs takes milliseconds that readers need not wait for.
func (c *Controller) publish(ctx context.Context, p publication) {
	switch {
	case p.full:
		c.publishAll(ctx, p.jobs, p.certs)
	case len(p.jobs) > 0:
		clas := make([]*endpointv3.ClusterLoadAssignment, 0, len(p.jobs))
		for _, k := range slices.Sorted(maps.Keys(p.jobs)) {
			clas = append(clas, resources.LoadAssignment(*p.jobs[k]))
		}
		if err := c.pub.UpdateLoadAssignments(clas...); err != nil {
			c.fail(fmt.Errorf("publish endpoints: %w", err))
			return
		}
		c.mu.Lock()
		c.updateGauges()
		c.mu.Unlock()
		if !p.healthAt.IsZero() {
			c.metrics.healthToPublish.Observe(time.Since(p.healthAt).Seconds())
		}
	}
}

// publishAll builds and publishes the whole configuration. On error the last good
// configuration stays in force and the Run loop retries.
func (c *Controller) publishAll(ctx context.Context, jobs map[string]*resources.Endpoint, certs []resources.Certificate) {
	eps := make([]resources.Endpoint, 0, len(jobs))
	for _, ep := range jobs {
		eps = append(eps, *ep)
	}
	set, report, err := resources.BuildTLS(c.cfg.Resources, eps, certs, c.cfg.Filters)
	if err != nil {
		c.fail(fmt.Errorf("build configuration: %w", err))
		return
	}
	if err := c.pub.SetConfig(ctx, set); err != nil {
		c.fail(fmt.Errorf("publish configuration: %w", err))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.published = make(map[string]publishedJob, len(jobs))
	for k, ep := range jobs {
		c.published[k] = publishedJob{info: ep.EndpointInfo, replicas: sortedReplicas(ep.Replicas)}
	}
	c.lastErr, c.publishedOK = nil, true
	c.setTLSReport(report)
	c.updateGauges()
}

func (c *Controller) fail(err error) {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
	c.metrics.publishErrors.Inc()
	c.log.Error("keeping the last published configuration", "error", err)
}

// updateGauges sets the gauges from what was published; mu is held.
func (c *Controller) updateGauges() {
	serving := 0
	for _, p := range c.published {
		serving += len(p.replicas)
	}
	c.metrics.jobs.Set(float64(len(c.published)))
	c.metrics.replicas.WithLabelValues("serving").Set(float64(serving))
	c.metrics.replicas.WithLabelValues("known").Set(float64(len(c.replicas)))
}

func sortedReplicas(in []resources.Replica) []resources.Replica {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b resources.Replica) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	return out
}

// Ready says whether the first configuration has been published.
func (c *Controller) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.publishedOK
}

// Problems lists what the source skipped or read with a default, and the last error of
// building or publishing a configuration (empty once a later one succeeded).
func (c *Controller) Problems() (problems []string, lastErr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	problems = []string{}
	for _, ps := range c.problems {
		problems = append(problems, slices.Collect(maps.Keys(ps))...)
	}
	slices.Sort(problems)
	if c.lastErr != nil {
		lastErr = c.lastErr.Error()
	}
	return problems, lastErr
}

// Status lists every endpoint and replica, sorted, for the admin page and for other parts
// of the process (the endpoint health view).
func (c *Controller) Status() []gatewayv1.EndpointStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	byJob := map[string]*gatewayv1.EndpointStatus{}
	for _, r := range c.replicas {
		es := byJob[r.JobKey()]
		if es == nil {
			es = &gatewayv1.EndpointStatus{Endpoint: r.JobKey(), Host: c.cfg.Resources.Host(r.Tenant, r.Job)}
			byJob[r.JobKey()] = es
		}
		rs := gatewayv1.ReplicaStatus{Name: r.Key(), Running: r.Running, Ready: r.Ready, Probe: "unknown", Serving: c.serving(r)}
		rs.Address = r.HostPort()
		if p, ok := c.probes[r.Key()]; ok {
			rs.Probe = map[bool]string{true: "up", false: "down"}[p.healthy]
			rs.Result = p.reason
		}
		if rs.Serving {
			es.Serving++
		}
		es.Replicas = append(es.Replicas, rs)
	}
	out := make([]gatewayv1.EndpointStatus, 0, len(byJob))
	for k, es := range byJob {
		if p, ok := c.published[k]; ok {
			es.Runtime, es.RequireAPIKey = p.info.Runtime, p.info.RequireAPIKey
		}
		if ch, ok := c.tls.report[k]; ok && c.cfg.TLS {
			es.TLS = &ch
		}
		slices.SortFunc(es.Replicas, func(a, b gatewayv1.ReplicaStatus) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, *es)
	}
	slices.SortFunc(out, func(a, b gatewayv1.EndpointStatus) int { return cmp.Compare(a.Endpoint, b.Endpoint) })
	return out
}

// EachReplicaCount calls f once per job endpoint with how many of its replicas serve and how
// many are known (usage.ReplicaSource): Status reduced to counts, for callers that ask often
// (each metrics scrape and health request of the usage view). f runs under the controller's
// mutex: it must not call back into the controller.
func (c *Controller) EachReplicaCount(f func(tenant, job string, serving, total int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, reps := range c.byJob {
		serving := 0
		for _, r := range reps {
			if c.serving(r) {
				serving++
			}
		}
		f(reps[0].Tenant, reps[0].Job, serving, len(reps))
	}
}

type controllerMetrics struct {
	jobs            prometheus.Gauge
	replicas        *prometheus.GaugeVec
	problems        prometheus.Gauge
	tlsEndpoints    *prometheus.GaugeVec
	publishErrors   prometheus.Counter
	healthToPublish prometheus.Histogram
}

func newControllerMetrics(reg prometheus.Registerer) *controllerMetrics {
	m := &controllerMetrics{
		jobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inferplane_xds_endpoints", Help: "Job endpoints in the published configuration.",
		}),
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferplane_xds_replicas", Help: "Replicas discovered (known) and taking traffic (serving).",
		}, []string{"state"}),
		problems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inferplane_xds_discovery_problems", Help: "Problems of replica discovery, certificates and TLS: objects skipped or read with a default, endpoints off TLS (see /debug/endpoints).",
		}),
		tlsEndpoints: newTLSEndpointsGauge(),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inferplane_xds_publish_errors_total", Help: "Configurations that could not be built or published (the last good one stays).",
		}),
		healthToPublish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "inferplane_xds_health_publish_seconds",
			Help:    "Time from a replica's health change to its endpoints being handed to the ADS server.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.jobs, m.replicas, m.problems, m.tlsEndpoints, m.publishErrors, m.healthToPublish)
	}
	return m
}
