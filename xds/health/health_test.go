package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// events collects what a Checker reports.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) add(ev Event) { e.mu.Lock(); e.all = append(e.all, ev); e.mu.Unlock() }

func (e *events) list() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.all...)
}

// TestThresholds drives the state machine with a scripted sequence of probe results.
func TestThresholds(t *testing.T) {
	cases := []struct {
		name    string
		results string // s = success, f = failure
		want    string // the reported states in order: u = up, d = down
	}{
		{"first success serves at once", "s", "u"},
		{"first failure keeps it out", "f", "d"},
		{"loading then ready needs the healthy threshold", "fffs" + "s", "du"},
		{"two failures are not enough", "sffsffs", "u"},
		{"three failures take it down", "sfff", "ud"},
		{"flapping after going down does not come back", "sfff" + "sfsfsf", "ud"},
		{"recovery", "sfff" + "ss", "udu"},
		{"repeated outages", "sfffss" + "fffss", "ududu"},
	}
	cfg := DefaultConfig() // unhealthy 3, healthy 2
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got events
			c, err := New(cfg, got.add, nil, nil)
			require.NoError(t, err)
			c.SetTargets([]Target{{Key: "acme/chat-r0-n0", URL: "http://10.0.0.1:8000/health"}})
			p := c.targets["acme/chat-r0-n0"]
			for _, r := range tc.results {
				c.record(p, r == 's', "scripted")
			}
			var states []byte
			for _, ev := range got.list() {
				assert.Equal(t, "acme/chat-r0-n0", ev.Key)
				states = append(states, map[bool]byte{true: 'u', false: 'd'}[ev.Healthy])
			}
			assert.Equal(t, tc.want, string(states))
		})
	}
}

// flipServer is a /health that answers 200 or 503 on demand.
func flipServer(t *testing.T) (*httptest.Server, *atomic.Bool) {
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &healthy
}

func TestProbesOverHTTP(t *testing.T) {
	srv, healthy := flipServer(t)
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "http://" + l.Addr().String() + "/health"
	l.Close()

	var got events
	reg := prometheus.NewRegistry()
	cfg := Config{Path: "/health", Interval: 40 * time.Millisecond, Timeout: 40 * time.Millisecond, UnhealthyThreshold: 3, HealthyThreshold: 2}
	c, err := New(cfg, got.add, nil, reg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	c.SetTargets([]Target{{Key: "a", URL: srv.URL + "/health"}, {Key: "dead", URL: deadURL}})

	waitFor := func(key string, healthy bool, n int) Event {
		t.Helper()
		var last Event
		require.Eventually(t, func() bool {
			count := 0
			for _, ev := range got.list() {
				if ev.Key == key && ev.Healthy == healthy {
					count++
					last = ev
				}
			}
			return count >= n
		}, 10*time.Second, 5*time.Millisecond, "%s never became healthy=%v", key, healthy)
		return last
	}
	waitFor("a", true, 1)
	dead := waitFor("dead", false, 1)
	assert.Contains(t, dead.Reason, "connection refused")

	healthy.Store(false)
	down := waitFor("a", false, 1)
	assert.Equal(t, "status 503", down.Reason)
	healthy.Store(true)
	waitFor("a", true, 2)

	st := c.Statuses()
	require.Len(t, st, 2)
	assert.Equal(t, "a", st[0].Key)
	assert.True(t, st[0].Known && st[0].Healthy)
	assert.False(t, st[1].Healthy)

	// Removing a target stops it without an event; a changed URL starts over.
	before := len(got.list())
	c.SetTargets([]Target{{Key: "a", URL: deadURL}})
	waitFor("a", false, 2)
	for _, ev := range got.list()[before:] {
		assert.NotEqual(t, "dead", ev.Key, "a removed target must not report")
	}
	require.Len(t, c.Statuses(), 1)

	cancel()
	<-done

	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	assert.True(t, names["inferplane_xds_health_probes_total"])
	assert.True(t, names["inferplane_xds_health_transitions_total"])
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	require.NoError(t, ok.Validate())
	cases := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Interval = 0 }, "probe interval 0s: must be positive"},
		{func(c *Config) { c.Timeout = 0 }, "probe timeout 0s: must be positive"},
		{func(c *Config) { c.Timeout = 5 * time.Second }, "probe timeout 5s: must not exceed the interval 2s"},
		{func(c *Config) { c.UnhealthyThreshold = 0 }, "unhealthy threshold 0"},
		{func(c *Config) { c.HealthyThreshold = -1 }, "healthy threshold -1"},
		{func(c *Config) { c.Path = "health" }, `probe path "health": must start with /`},
	}
	for _, tc := range cases {
		c := ok
		tc.mod(&c)
		_, err := New(c, nil, nil, nil)
		assert.ErrorContains(t, err, tc.want)
	}
}

// Probes start every interval whatever each took, so a replica whose /health hangs until the
// timeout is out after (threshold-1) x interval + timeout from its first failed probe: 5 s with
// the defaults, as docs/xds.md says, not 3 x (interval + timeout) = 9 s.
func TestProbeSchedule(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct{ took, want time.Duration }{
		{0, 2 * time.Second},
		{10 * time.Millisecond, 1990 * time.Millisecond},
		{cfg.Timeout, time.Second},
		{3 * time.Second, 0}, // a probe that overran (a slow record) starts the next at once
	} {
		assert.Equal(t, tc.want, untilNext(cfg.Interval, tc.took), "took %s", tc.took)
	}
	// The first failed probe starts at 0; its successors at each interval; the last one ends
	// at its timeout.
	out := time.Duration(cfg.UnhealthyThreshold-1)*cfg.Interval + cfg.Timeout
	assert.Equal(t, 5*time.Second, out)
}
