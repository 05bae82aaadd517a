package faults

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/internal/adstest"
)

var env *kubeenv.Env // the host cluster

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

// TestGatewayThroughControlPlaneFaults runs the whole gateway against three real API servers
// (the host cluster with the cluster registry and the APIKey objects, and the tenant clusters
// of acme and globex), two xDS servers and two key checks, with replica doubles behind the
// stand-in for Envoy, under steady load; it kills, stops and restarts every part of the
// control plane in turn and checks that no request with a valid key to a healthy replica
// fails, that no request reaches a replica that is not Ready and that none passes without a
// valid key. It prints what it measures (run it with -v).
func TestGatewayThroughControlPlaneFaults(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	w := newWorld(t, ctx, env)
	t.Run("an xDS server killed", w.killXDS)
	t.Run("a key check killed", w.killKeyCheck)
	t.Run("the xDS server Envoy follows crashed", w.crashXDS)
	t.Run("a key check crashed", w.crashKeyCheck)
	t.Run("gateway restarted while a tenant's API server is down", w.restartWhileTenantDown)
	t.Run("the tenant's API server back", w.tenantBack)
	t.Run("the host API server down for 60 s", w.hostDown)
	w.load.halt()
	w.seen.mu.Lock()
	defer w.seen.mu.Unlock()
	assert.Zero(t, w.seen.byDouble["a2"], "no request reached a replica that is not Ready")
	assert.Empty(t, w.seen.bad, "every request that reached a replica carried a valid key's identity, and not the key")
	c := w.load.window(time.Time{}, time.Now())
	t.Logf("FIGURE whole run: %d requests with a valid key, %d failed; %d without one, %d let through, %d refused by a failed check; replicas served %v",
		c.valid, c.failed, c.refused, c.leaked, c.failedClosed, w.seen.byDouble)
}

// report checks a fault's window of the load and prints it.
func (w *world) report(t *testing.T, fault string, from time.Time) {
	t.Helper()
	c := w.load.window(from, time.Now())
	t.Logf("FIGURE %s: %d requests with a valid key, %d failed; %d without one, %d let through, %d refused by a failed check (load %s)",
		fault, c.valid, c.failed, c.refused, c.leaked, c.failedClosed, loadavg())
	assert.Zero(t, c.failed, "%s: requests with a valid key failed; first: %s", fault, c.firstFailure)
	assert.Zero(t, c.leaked, "%s: requests without a valid key passed; first: %s", fault, c.firstFailure)
	assert.Zero(t, c.failedClosed, "%s: checks failed (their requests were refused, closed); first: %s", fault, c.firstFailure)
	assert.Positive(t, c.valid, "%s: the load ran", fault)
}

// steady lets the load run.
func steady(d time.Duration) { time.Sleep(d) }

func serving(cluster string, want ...*replicadouble.Double) func(adstest.State) bool {
	var addrs []string
	for _, d := range want {
		addrs = append(addrs, d.Addr())
	}
	slices.Sort(addrs)
	return func(st adstest.State) bool { return slices.Equal(st.Endpoints[cluster], addrs) }
}

func (w *world) killXDS(t *testing.T) {
	from := time.Now()
	steady(time.Second)
	w.x0.stop(t)
	require.Eventually(t, func() bool { srv, _ := w.envoy.Server(); return srv == w.x1.grpc }, time.Minute, 10*time.Millisecond)
	steady(3 * time.Second)
	w.x0.start(t)
	w.x0.waitReady(t, time.Minute)
	w.report(t, "one of two xDS servers killed and restarted", from)
}

func (w *world) killKeyCheck(t *testing.T) {
	from := time.Now()
	steady(time.Second)
	w.k0.stop(t) // drains: fails its health checks, answers meanwhile, then stops
	assert.Equal(t, []string{w.k1.grpc}, w.envoy.HealthyChecks())
	steady(3 * time.Second)
	w.k0.start(t)
	w.k0.waitReady(t, time.Minute)
	require.Eventually(t, func() bool { return len(w.envoy.HealthyChecks()) == 2 }, time.Minute, 50*time.Millisecond)
	w.report(t, "one of two key checks killed and restarted", from)
}

// crashXDS makes the xDS server of the stand-in's ADS session look crashed (its connections
// reset, its port refusing; no graceful stop) and back 3 s later.
func (w *world) crashXDS(t *testing.T) {
	from := time.Now()
	steady(time.Second)
	srv, _ := w.envoy.Server()
	crashed, other := w.x0, w.x1
	if srv == w.x1.grpc {
		crashed, other = w.x1, w.x0
	}
	crashed.cutter.cut()
	require.Eventually(t, func() bool { srv, _ := w.envoy.Server(); return srv == other.grpc }, time.Minute, 10*time.Millisecond)
	steady(3 * time.Second)
	crashed.cutter.restore(t)
	steady(2 * time.Second)
	w.report(t, "the xDS server Envoy follows crashed and back", from)
}

// crashKeyCheck makes a key check look crashed: the checks in flight on its connections are
// reset and new ones refused, with no drain, until its health checks take it out.
func (w *world) crashKeyCheck(t *testing.T) {
	from := time.Now()
	steady(time.Second)
	w.k0.cutter.cut()
	require.Eventually(t, func() bool {
		h := w.envoy.HealthyChecks()
		return len(h) == 1 && h[0] == w.k1.grpc
	}, time.Minute, 10*time.Millisecond)
	steady(3 * time.Second)
	w.k0.cutter.restore(t)
	require.Eventually(t, func() bool { return len(w.envoy.HealthyChecks()) == 2 }, time.Minute, 50*time.Millisecond)
	w.report(t, "one of two key checks crashed and back", from)
}

// restartWhileTenantDown kills acme's API server, restarts both xDS servers one after the
// other (a rolling update) and starts a third, new one with nothing saved.
func (w *world) restartWhileTenantDown(t *testing.T) {
	from := time.Now()
	require.NoError(t, w.acme.Env.StopAPIServer())
	for _, p := range []*proc{w.x0, w.x1} {
		require.Eventually(t, func() bool {
			st, ok := clusterState(p, "acme")
			return ok && st.State == discovery.StateFailing
		}, time.Minute, 50*time.Millisecond, "%s: acme failing", p.name)
	}
	st, _ := clusterState(w.x0, "acme")
	t.Logf("acme's API server down, as x0 reports it: %s", st.Error)
	assert.True(t, strings.HasPrefix(st.Error, "connection refused at "+strings.TrimSuffix(w.acme.Env.Config.Host, "/")) ||
		strings.HasPrefix(st.Error, "no answer"), "the cause first: %s", st.Error)
	for _, p := range []*proc{w.x1, w.x0} {
		before, sessions := w.envoy.Server()
		p.stop(t)
		p.start(t)
		body := p.waitReady(t, time.Minute)
		assert.Contains(t, body, "acme (stale", "%s: /readyz says acme is served stale", p.name)
		st, _ := clusterState(p, "acme")
		assert.Equal(t, discovery.StateStale, st.State, p.name)
		assert.Equal(t, 3, st.Replicas, "%s: acme's last known replicas, a2 included (not Ready)", p.name)
		_, metrics := httpGet("http://" + p.admin + "/metrics")
		assert.Contains(t, metrics, `inferplane_xds_tenant_cluster_up{tenant="acme"} 0`)
		assert.Contains(t, metrics, `inferplane_xds_tenant_cluster_state{state="stale",tenant="acme"} 1`)
		if before == p.grpc {
			require.Eventually(t, func() bool { _, n := w.envoy.Server(); return n > sessions }, time.Minute, 10*time.Millisecond)
		}
	}
	w.x2.start(t)
	w.x2.waitReady(t, time.Minute)
	st, _ = clusterState(w.x2, "acme")
	assert.Equal(t, discovery.StateUnreachable, st.State, "a new server with nothing saved cannot serve acme")
	srv, _ := w.envoy.Server()
	assert.Contains(t, []string{w.x0.grpc, w.x1.grpc}, srv)
	require.NoError(t, w.envoy.WaitFor(w.ctx, serving("acme/chat", w.a0, w.a1)))
	steady(2 * time.Second)
	w.report(t, "acme's API server down, both xDS servers restarted", from)
}

// tenantBack starts acme's API server again and measures how soon every xDS server reads
// it: the clocks start before the API server does (when it first answers, when each server
// reads acme again, when x2's ADS client gets acme's endpoints).
func (w *world) tenantBack(t *testing.T) {
	from := time.Now()
	agent := &adstest.Agent{NodeID: "x2-watcher", Delta: true}
	require.NoError(t, adstest.Start(w.ctx, dialXDS(t, w.x2.grpc), agent))
	require.NoError(t, agent.WaitFor(w.ctx, func(st adstest.State) bool { _, ok := st.Endpoints["globex/chat"]; return ok }))
	answered := firstTime(func() bool { return apiAnswers(w.acme.Env.Config, discovery.CheckPath("acme")) })
	synced := map[string]<-chan time.Time{}
	for _, p := range []*proc{w.x0, w.x1, w.x2} {
		synced[p.name] = firstTime(func() bool { st, ok := clusterState(p, "acme"); return ok && st.State == discovery.StateSynced })
	}
	ads := make(chan time.Time, 1)
	go func() {
		if agent.WaitFor(w.ctx, serving("acme/chat", w.a0, w.a1)) == nil {
			ads <- time.Now()
		}
	}()
	require.NoError(t, w.acme.Env.StartAPIServer())
	up := receive(t, answered, "acme's API server answers")
	rejoin := map[string]time.Duration{}
	for name, ch := range synced {
		rejoin[name] = receive(t, ch, name+" reads acme again").Sub(up)
	}
	joined := receive(t, ads, "x2 (nothing saved) now serves acme").Sub(up)
	t.Logf("FIGURE rejoin after acme's API server answers again: x0 (stale) %s, x1 (stale) %s, x2 (unreachable at its start) %s, "+
		"x2's ADS client has acme's endpoints after %s (load %s)",
		rejoin["x0"].Round(time.Millisecond), rejoin["x1"].Round(time.Millisecond), rejoin["x2"].Round(time.Millisecond),
		joined.Round(time.Millisecond), loadavg())
	w.x2.stop(t)
	w.report(t, "acme's API server back", from)
}

// hostDown kills the host API server for 60 s: the load goes on, no key can be created; once
// it answers again, a new key is accepted and a revocation applies.
func (w *world) hostDown(t *testing.T) {
	from := time.Now()
	require.NoError(t, w.host.StopAPIServer())
	down := time.Now()
	cctx, ccancel := context.WithTimeout(w.ctx, 10*time.Second)
	_, _, err := newKey(t, cctx, w.store, w.hasher, "acme")
	ccancel()
	require.Error(t, err, "no key can be created while the host API server is down: new keys wait")
	t.Logf("creating a key during the outage: %v", err)
	time.Sleep(time.Until(down.Add(60 * time.Second)))
	w.report(t, "the host API server down for 60 s", from)

	from = time.Now()
	answered := firstTime(func() bool {
		return apiAnswers(w.host.Config, "/apis/inferplane.io/v1alpha1/namespaces/"+keysNS+"/apikeys?limit=1")
	})
	resynced := map[string]<-chan time.Time{}
	for _, k := range []*proc{w.k0, w.k1} {
		resynced[k.name] = firstTime(func() bool { return resyncs(k) > 0 })
	}
	require.NoError(t, w.host.StartAPIServer())
	up := receive(t, answered, "the host API server answers")
	accepted, refused := w.keysAfterOutage(t, up)
	t.Logf("FIGURE after the host API server answers again: a new key accepted %s after its creation, "+
		"a revocation applied %s after it was written (load %s)", accepted.Round(time.Millisecond), refused.Round(time.Millisecond), loadavg())
	for _, k := range []*proc{w.k0, w.k1} {
		t.Logf("FIGURE %s read the keys again %s after the host API server answered (load %s)",
			k.name, receive(t, resynced[k.name], k.name+" reads the keys again").Sub(up).Round(time.Millisecond), loadavg())
	}
	steady(2 * time.Second)
	w.report(t, "the host API server back", from)
}

// keysAfterOutage creates a key and revokes another as soon as the host answers, and says
// how long each took to apply through the stand-in for Envoy.
func (w *world) keysAfterOutage(t *testing.T, up time.Time) (accepted, refused time.Duration) {
	newAcmeKey, newRec, err := newKey(t, w.ctx, w.store, w.hasher, "acme")
	require.NoError(t, err)
	w.seen.allow(newRec.ID, "acme")
	created := time.Now()
	_, err = w.store.Revoke(w.ctx, w.laterRec.ID, time.Now())
	require.NoError(t, err)
	revokedAt := time.Now()
	for (accepted == 0 || refused == 0) && time.Since(up) < 2*time.Minute {
		if accepted == 0 && statusThrough(w.envoy, acmeHost, newAcmeKey) == http.StatusOK {
			accepted = time.Since(created)
		}
		if refused == 0 && statusThrough(w.envoy, acmeHost, w.laterRevoked) == http.StatusForbidden {
			refused = time.Since(revokedAt)
			w.seen.deny(w.laterRec.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotZero(t, accepted, "a key created after the outage is accepted")
	require.NotZero(t, refused, "a key revoked after the outage is refused")
	return accepted, refused
}
