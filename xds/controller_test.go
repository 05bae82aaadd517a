package xds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/internal/warning"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/resources"
)

// recorder is a Publisher and a Prober that remembers what it was given.
type recorder struct {
	mu       sync.Mutex
	configs  []*resources.Set
	updates  [][]string // cluster names per UpdateLoadAssignments call
	cla      map[string][]string
	targets  []health.Target
	failSets int
}

func newRecorder() *recorder { return &recorder{cla: map[string][]string{}} }

func (r *recorder) SetConfig(_ context.Context, set *resources.Set) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failSets > 0 {
		r.failSets--
		return errors.New("test: publish failed")
	}
	r.configs = append(r.configs, set)
	for _, c := range set.LoadAssignments {
		r.cla[c.ClusterName] = adstest.Addresses(c)
	}
	return nil
}

func (r *recorder) UpdateLoadAssignments(clas ...*endpointv3.ClusterLoadAssignment) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, c := range clas {
		names = append(names, c.ClusterName)
		r.cla[c.ClusterName] = adstest.Addresses(c)
	}
	r.updates = append(r.updates, names)
	return nil
}

func (r *recorder) SetTargets(t []health.Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets = t
}

func (r *recorder) state() (configs int, updates [][]string, cla map[string][]string, targets []health.Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := map[string][]string{}
	for k, v := range r.cla {
		c[k] = slices.Clone(v)
	}
	return len(r.configs), slices.Clone(r.updates), c, slices.Clone(r.targets)
}

func replica(job, name, ip string, ready bool) discovery.Replica {
	return discovery.Replica{Tenant: "acme", Job: job, Runtime: "vllm", RequireAPIKey: true, Index: name[len(name)-1:],
		Namespace: "acme", Name: name, Running: ip != "", Address: ip, Port: 8000, Ready: ready}
}

func up(r discovery.Replica, ok bool) health.Event {
	return health.Event{Target: health.Target{Key: r.Key(), URL: r.HealthURL("/health")}, Healthy: ok, Reason: "test"}
}

type harness struct {
	t       *testing.T
	c       *Controller
	rec     *recorder
	updates chan discovery.Update
}

func newHarness(t *testing.T, filters resources.Filters) *harness {
	rec := newRecorder()
	c, err := NewController(ControllerConfig{
		Resources: resources.DefaultConfig("example.com"), Filters: filters,
		InitialProbeWait: 10 * time.Second, RetryInterval: 20 * time.Millisecond,
	}, rec, rec)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan discovery.Update)
	done := make(chan struct{})
	go func() { c.Run(ctx, updates); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &harness{t: t, c: c, rec: rec, updates: updates}
}

func (h *harness) eventually(cond func(configs int, updates [][]string, cla map[string][]string) bool, msg string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		c, u, cla, _ := h.rec.state()
		return cond(c, u, cla)
	}, 5*time.Second, time.Millisecond, msg)
}

func TestControllerDecidesWhoServes(t *testing.T) {
	h := newHarness(t, nil)
	r0 := replica("chat", "chat-r0-n0", "10.0.0.1", true)
	r1 := replica("chat", "chat-r1-n0", "10.0.0.2", true)
	loading := replica("chat", "chat-r2-n0", "10.0.0.3", false) // Running, not Ready
	pending := replica("chat", "chat-r3-n0", "", false)         // scheduled, no IP
	emb := replica("embed", "embed-r0-n0", "10.0.1.1", true)

	h.updates <- discovery.Update{Replicas: []discovery.Replica{r0, r1, loading, pending, emb}}
	// Nothing is published until every candidate answered its first probe.
	require.Eventually(t, func() bool { _, _, _, targets := h.rec.state(); return len(targets) == 4 }, 5*time.Second, time.Millisecond,
		"every Running replica with an IP is probed, Ready or not")
	configs, _, _, _ := h.rec.state()
	assert.Zero(t, configs)
	assert.False(t, h.c.Ready())

	for _, ev := range []health.Event{up(r0, true), up(r1, true), up(loading, true)} {
		h.c.HealthChanged(ev)
	}
	time.Sleep(50 * time.Millisecond)
	configs, _, _, _ = h.rec.state()
	assert.Zero(t, configs, "embed-r0 has not answered yet")
	h.c.HealthChanged(up(emb, false))
	h.eventually(func(c int, _ [][]string, cla map[string][]string) bool {
		return c == 1 && slices.Equal(cla["acme/chat"], []string{"10.0.0.1:8000", "10.0.0.2:8000"}) &&
			len(cla["acme/embed"]) == 0
	}, "first configuration: r0 and r1 serve; the unready and the failing replica do not")
	assert.True(t, h.c.Ready())

	// Health changes republish only the job concerned.
	h.c.HealthChanged(up(r1, false))
	h.eventually(func(c int, u [][]string, cla map[string][]string) bool {
		return c == 1 && len(u) == 1 && slices.Equal(u[0], []string{"acme/chat"}) &&
			slices.Equal(cla["acme/chat"], []string{"10.0.0.1:8000"})
	}, "r1 leaves, alone")
	h.c.HealthChanged(up(emb, true))
	h.eventually(func(c int, u [][]string, cla map[string][]string) bool {
		return len(u) == 2 && slices.Equal(u[1], []string{"acme/embed"}) && len(cla["acme/embed"]) == 1
	}, "embed-r0 joins")

	// The VMI becomes Ready: the replica already passed its probes, so it serves at once.
	loading.Ready = true
	h.updates <- discovery.Update{Replicas: []discovery.Replica{r0, r1, loading, pending, emb}}
	h.eventually(func(c int, _ [][]string, cla map[string][]string) bool {
		return c == 1 && slices.Equal(cla["acme/chat"], []string{"10.0.0.1:8000", "10.0.0.3:8000"})
	}, "Ready r2 joins without a new configuration")

	// A stale result for an address the replica no longer has is ignored.
	moved := r0
	moved.Address = "10.0.0.9"
	h.updates <- discovery.Update{Replicas: []discovery.Replica{moved, r1, loading, pending, emb}}
	h.eventually(func(c int, _ [][]string, cla map[string][]string) bool {
		return slices.Equal(cla["acme/chat"], []string{"10.0.0.3:8000"})
	}, "a moved replica waits for a probe of its new address")
	h.c.HealthChanged(up(r0, true)) // the old address
	time.Sleep(30 * time.Millisecond)
	_, _, cla, _ := h.rec.state()
	assert.Equal(t, []string{"10.0.0.3:8000"}, cla["acme/chat"])
	h.c.HealthChanged(up(moved, true))
	h.eventually(func(c int, _ [][]string, cla map[string][]string) bool {
		return slices.Equal(cla["acme/chat"], []string{"10.0.0.3:8000", "10.0.0.9:8000"})
	}, "the moved replica serves from its new address")

	// A job-level change (the key requirement) is a new configuration.
	var withoutKey []discovery.Replica
	for _, r := range []discovery.Replica{moved, r1, loading, pending, emb} {
		if r.Job == "embed" {
			r.RequireAPIKey = false
		}
		withoutKey = append(withoutKey, r)
	}
	h.updates <- discovery.Update{Replicas: withoutKey}
	h.eventually(func(c int, _ [][]string, _ map[string][]string) bool { return c == 2 }, "new configuration")

	// A job whose replicas all vanish leaves the configuration.
	h.updates <- discovery.Update{Replicas: withoutKey[:4]}
	h.eventually(func(c int, _ [][]string, _ map[string][]string) bool { return c == 3 }, "embed removed")
	st := h.c.Status()
	require.Len(t, st, 1)
	assert.Equal(t, "chat.acme.example.com", st[0].Host)
	assert.Equal(t, 2, st[0].Serving)
	require.Len(t, st[0].Replicas, 4)
	assert.Equal(t, gatewayv1.ReplicaStatus{Name: "acme/chat-r1-n0", Address: "10.0.0.2:8000", Running: true, Ready: true,
		Probe: "down", Result: "test"}, st[0].Replicas[1])
	assert.Equal(t, "unknown", st[0].Replicas[3].Probe)
	var counts []string
	h.c.EachReplicaCount(func(tenant, job string, serving, total int) {
		counts = append(counts, fmt.Sprintf("%s/%s %d/%d", tenant, job, serving, total))
	})
	assert.Equal(t, []string{"acme/chat 2/4"}, counts, "the counts agree with the status")
}

func TestControllerPublishesWithoutReplicas(t *testing.T) {
	h := newHarness(t, nil)
	h.updates <- discovery.Update{Problems: []warning.Warning{{Object: "VirtualMachineInstance/acme/x", Reason: "skipped: test"}}}
	h.eventually(func(c int, _ [][]string, _ map[string][]string) bool { return c == 1 }, "an empty configuration is published at once")
	assert.True(t, h.c.Ready())
	problems, lastErr := h.c.Problems()
	assert.Equal(t, []string{"VirtualMachineInstance/acme/x: skipped: test"}, problems)
	assert.Empty(t, lastErr)
}

// brokenFilters fails, like an API-key filter whose settings cannot be read.
type brokenFilters struct{ fail *atomic.Bool }

func (b brokenFilters) HTTPFilters() ([]*hcmv3.HttpFilter, error) {
	if b.fail.Load() {
		return nil, errors.New("test: no signing secret")
	}
	return nil, nil
}
func (brokenFilters) VirtualHostFilterConfig(resources.EndpointInfo) (map[string]*anypb.Any, error) {
	return nil, nil
}
func (brokenFilters) AccessLogs() ([]*accesslogv3.AccessLog, error) { return nil, nil }
func (brokenFilters) Clusters() ([]*clusterv3.Cluster, error)       { return nil, nil }

func TestControllerKeepsLastGoodConfiguration(t *testing.T) {
	var fail atomic.Bool
	h := newHarness(t, brokenFilters{&fail})
	r0 := replica("chat", "chat-r0-n0", "10.0.0.1", true)
	h.updates <- discovery.Update{Replicas: []discovery.Replica{r0}}
	h.c.HealthChanged(up(r0, true))
	h.eventually(func(c int, _ [][]string, _ map[string][]string) bool { return c == 1 }, "first configuration")

	// Building fails: nothing is published, and the controller retries until it works.
	fail.Store(true)
	r1 := replica("embed", "embed-r0-n0", "10.0.1.1", true)
	h.updates <- discovery.Update{Replicas: []discovery.Replica{r0, r1}}
	require.Eventually(t, func() bool {
		_, lastErr := h.c.Problems()
		return strings.Contains(lastErr, "build configuration: filter chain: test: no signing secret")
	}, 5*time.Second, time.Millisecond, "the controller tried to build the configuration and says why it failed")
	configs, _, _, _ := h.rec.state()
	assert.Equal(t, 1, configs, "a configuration that cannot be built is not published")
	assert.True(t, h.c.Ready(), "the last good configuration still serves")
	fail.Store(false)
	h.eventually(func(c int, _ [][]string, _ map[string][]string) bool { return c == 2 }, "retried")
	require.Eventually(t, func() bool { _, e := h.c.Problems(); return e == "" }, 5*time.Second, time.Millisecond)

	// Publishing fails once: retried too.
	h.rec.mu.Lock()
	h.rec.failSets = 1
	h.rec.mu.Unlock()
	h.updates <- discovery.Update{Replicas: []discovery.Replica{r0}}
	h.eventually(func(c int, _ [][]string, _ map[string][]string) bool { return c == 3 }, "retried after a failed publish")
}
