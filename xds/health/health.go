// Package health probes each replica's model server (GET /health) and decides, with
// thresholds, whether it is up: a replica loading its model or failing leaves Envoy's
// endpoints, a flapping one does not churn them.
//
// The rules follow Envoy's own active health checking: a new target is decided by its first
// probe (one success is enough to start serving, so a restart of the xDS server does not empty
// every endpoint), a target that is up goes down after UnhealthyThreshold consecutive
// failures, and a target that is down comes back after HealthyThreshold consecutive successes.
package health

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config are the probe settings.
type Config struct {
	// Path is the model server's health path (vLLM and the Parakeet server: /health).
	Path string
	// Interval between the starts of two probes of one target.
	Interval time.Duration
	// Timeout of one probe (connect, request and response headers).
	Timeout time.Duration
	// UnhealthyThreshold consecutive failures take an up target down.
	UnhealthyThreshold int
	// HealthyThreshold consecutive successes bring a down target back.
	HealthyThreshold int
}

// DefaultConfig probes every 2 s with a 1 s timeout; 3 failures in a row take a replica out,
// 2 successes bring it back (docs/xds.md, Health, says how long each takes).
func DefaultConfig() Config {
	return Config{Path: "/health", Interval: 2 * time.Second, Timeout: time.Second, UnhealthyThreshold: 3, HealthyThreshold: 2}
}

// Validate checks the settings.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("probe interval %s: must be positive", c.Interval)
	case c.Timeout <= 0:
		return fmt.Errorf("probe timeout %s: must be positive", c.Timeout)
	case c.Timeout > c.Interval:
		return fmt.Errorf("probe timeout %s: must not exceed the interval %s", c.Timeout, c.Interval)
	case c.UnhealthyThreshold < 1:
		return fmt.Errorf("unhealthy threshold %d: must be at least 1", c.UnhealthyThreshold)
	case c.HealthyThreshold < 1:
		return fmt.Errorf("healthy threshold %d: must be at least 1", c.HealthyThreshold)
	case c.Path == "" || c.Path[0] != '/':
		return fmt.Errorf("probe path %q: must start with /", c.Path)
	}
	return nil
}

// Target is one replica to probe.
type Target struct {
	// Key identifies the replica (namespace/name).
	Key string
	// URL is the full health URL; a target whose URL changes starts over as a new target.
	URL string
}

// Event is a change of a target's state, including its first decision.
type Event struct {
	Target
	Healthy bool
	// Reason is the last probe's result, e.g. "status 503" or the connection error.
	Reason string
}

// Status is a target's state, for status pages.
type Status struct {
	Target
	// Known is false until the first probe has answered.
	Known                bool      `json:"known"`
	Healthy              bool      `json:"healthy"`
	ConsecutiveSuccesses int       `json:"consecutiveSuccesses"`
	ConsecutiveFailures  int       `json:"consecutiveFailures"`
	LastProbe            time.Time `json:"lastProbe"`
	LastChange           time.Time `json:"lastChange"`
	LastResult           string    `json:"lastResult"`
}

// Checker probes a changing set of targets and reports state changes to OnChange.
type Checker struct {
	cfg      Config
	onChange func(Event)
	client   *http.Client
	log      *slog.Logger
	metrics  *metrics

	mu      sync.Mutex
	ctx     context.Context
	targets map[string]*prober
	wg      sync.WaitGroup
}

type prober struct {
	Status
	cancel context.CancelFunc
}

// New returns a Checker. onChange is called from the probing goroutines, one call at a time
// per target; it should not block for long. reg may be nil.
func New(cfg Config, onChange func(Event), log *slog.Logger, reg prometheus.Registerer) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout}).DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     3 * cfg.Interval,
		DisableCompression:  true,
	}
	return &Checker{
		cfg:      cfg,
		onChange: onChange,
		client: &http.Client{
			Transport: transport,
			Timeout:   cfg.Timeout,
			// A redirect is an answer: the server is up (Kubernetes probes count 3xx as success).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log:     log,
		metrics: newMetrics(reg),
		targets: map[string]*prober{},
	}, nil
}

// Run starts probing and blocks until ctx ends; it then stops every prober.
func (c *Checker) Run(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	for _, p := range c.targets {
		c.start(p)
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.wg.Wait()
	c.client.CloseIdleConnections()
}

// SetTargets replaces the probed set. Targets with an unchanged key and URL keep their state;
// new ones start unknown; removed ones stop (without an event).
func (c *Checker) SetTargets(targets []Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make(map[string]Target, len(targets))
	for _, t := range targets {
		want[t.Key] = t
	}
	for key, p := range c.targets {
		if t, ok := want[key]; !ok || t.URL != p.URL {
			if p.cancel != nil {
				p.cancel()
			}
			delete(c.targets, key)
		}
	}
	for key, t := range want {
		if _, ok := c.targets[key]; ok {
			continue
		}
		p := &prober{Status: Status{Target: t}}
		c.targets[key] = p
		if c.ctx != nil {
			c.start(p)
		}
	}
	c.metrics.targets.Set(float64(len(c.targets)))
}

// Statuses returns every target's state, sorted by key.
func (c *Checker) Statuses() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, 0, len(c.targets))
	for _, p := range c.targets {
		out = append(out, p.Status)
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// start runs a target's probe loop; c.mu is held.
func (c *Checker) start(p *prober) {
	ctx, cancel := context.WithCancel(c.ctx)
	p.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		// Spread the first probes of many targets over up to a second, so a restart with
		// thousands of replicas does not open thousands of connections at once.
		first := time.Duration(rand.Int64N(int64(min(c.cfg.Interval, time.Second))))
		timer := time.NewTimer(first)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			started := time.Now()
			ok, result := c.probe(ctx, p.URL)
			if ctx.Err() != nil {
				return
			}
			c.record(p, ok, result)
			timer.Reset(untilNext(c.cfg.Interval, time.Since(started)))
		}
	}()
}

// untilNext is the wait before a target's next probe: probes start every interval, however
// long each took (the timeout is at most the interval), so a hung replica is found after
// UnhealthyThreshold-1 intervals and one timeout, not after UnhealthyThreshold x (interval +
// timeout).
func untilNext(interval, took time.Duration) time.Duration {
	return max(interval-took, 0)
}

func (c *Checker) probe(ctx context.Context, target string) (bool, string) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "inferplane-xds-health")
	resp, err := c.client.Do(req)
	c.metrics.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // drop net/http's repetition of method and URL
		}
		return false, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return true, fmt.Sprintf("status %d", resp.StatusCode)
	}
	return false, fmt.Sprintf("status %d", resp.StatusCode)
}

// record applies one probe result and reports a change outside the lock.
func (c *Checker) record(p *prober, ok bool, result string) {
	c.mu.Lock()
	if c.targets[p.Key] != p { // replaced or removed while probing
		c.mu.Unlock()
		return
	}
	now := time.Now()
	s := &p.Status
	s.LastProbe, s.LastResult = now, result
	if ok {
		s.ConsecutiveSuccesses++
		s.ConsecutiveFailures = 0
	} else {
		s.ConsecutiveFailures++
		s.ConsecutiveSuccesses = 0
	}
	changed := false
	switch {
	case !s.Known:
		s.Known, s.Healthy, changed = true, ok, true
	case s.Healthy && s.ConsecutiveFailures >= c.cfg.UnhealthyThreshold:
		s.Healthy, changed = false, true
	case !s.Healthy && s.ConsecutiveSuccesses >= c.cfg.HealthyThreshold:
		s.Healthy, changed = true, true
	}
	ev := Event{Target: p.Target, Healthy: s.Healthy, Reason: result}
	if changed {
		s.LastChange = now
	}
	c.mu.Unlock()

	c.metrics.probes.WithLabelValues(map[bool]string{true: "success", false: "failure"}[ok]).Inc()
	if !changed {
		return
	}
	c.metrics.transitions.WithLabelValues(map[bool]string{true: "up", false: "down"}[ev.Healthy]).Inc()
	if ev.Healthy {
		c.log.Info("replica up", "replica", ev.Key, "url", ev.URL, "probe", ev.Reason)
	} else {
		c.log.Warn("replica down", "replica", ev.Key, "url", ev.URL, "probe", ev.Reason)
	}
	if c.onChange != nil {
		c.onChange(ev)
	}
}

type metrics struct {
	probes      *prometheus.CounterVec
	transitions *prometheus.CounterVec
	duration    prometheus.Histogram
	targets     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_xds_health_probes_total", Help: "Replica health probes by result.",
		}, []string{"result"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_xds_health_transitions_total", Help: "Replica state changes decided by the probes (first decisions included).",
		}, []string{"to"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "inferplane_xds_health_probe_duration_seconds", Help: "Duration of replica health probes.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inferplane_xds_health_targets", Help: "Replicas being probed.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.probes, m.transitions, m.duration, m.targets)
	}
	return m
}
