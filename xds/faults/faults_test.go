package faults

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/internal/envoystandin"
	"github.com/inferplane/inferplane/xds/internal/tenanttest"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
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
	acme, globex := tenanttest.New(t, ctx, "acme"), tenanttest.New(t, ctx, "globex")
	hostEnv := env
	host := func() (*rest.Config, error) { return rest.CopyConfig(hostEnv.Config), nil }
	for _, ns := range []string{"argocd", keysNS} {
		require.NoError(t, hostEnv.EnsureNamespace(ctx, ns))
	}

	// The replicas: acme's a0 and a1 serve; a2 runs and answers /health but its VMI is not
	// Ready, so it must never get a request. globex's g0 serves.
	s := &seen{byDouble: map[string]int{}, valid: map[string]string{}}
	node := func(tenant string, replica int, d *replicadouble.Double) vmitest.Node {
		return vmitest.Node{Tenant: tenant, Job: "chat", Runtime: "vllm", Replica: replica, ServingPort: d.Port(), RequireAPIKey: true}
	}
	a0, a1, a2 := startDouble(t, s, "a0", "acme"), startDouble(t, s, "a1", "acme"), startDouble(t, s, "a2", "acme")
	g0 := startDouble(t, s, "g0", "globex")
	tenanttest.StartVMI(t, ctx, acme.Env.Client, node("acme", 0, a0), a0, true)
	tenanttest.StartVMI(t, ctx, acme.Env.Client, node("acme", 1, a1), a1, true)
	tenanttest.StartVMI(t, ctx, acme.Env.Client, node("acme", 2, a2), a2, false)
	tenanttest.StartVMI(t, ctx, globex.Env.Client, node("globex", 0, g0), g0, true)
	for _, tc := range []*tenanttest.Cluster{acme, globex} {
		require.NoError(t, hostEnv.Client.Create(ctx, tc.Secret(t, ctx)))
	}

	// Keys: one per tenant for the load, one revoked, one to revoke after the host's outage.
	dir := t.TempDir()
	secret, err := keys.NewSecret()
	require.NoError(t, err)
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret), 0o600))
	raw, err := keys.LoadSecret(secretFile)
	require.NoError(t, err)
	hasher, err := keys.NewHasher(raw)
	require.NoError(t, err)
	store, err := keys.NewKubeStore(hostEnv.Config, keysNS)
	require.NoError(t, err)
	mustKey := func(tenant string) (string, keys.Record) {
		key, rec, err := newKey(t, ctx, store, hasher, tenant)
		require.NoError(t, err)
		s.allow(rec.ID, tenant)
		return key, rec
	}
	acmeKey, _ := mustKey("acme")
	globexKey, _ := mustKey("globex")
	revokedKey, revoked := mustKey("acme")
	_, err = store.Revoke(ctx, revoked.ID, time.Now())
	require.NoError(t, err)
	s.deny(revoked.ID)
	laterRevoked, laterRec := mustKey("acme")

	// The gateway: two key checks, two xDS servers, and the stand-in for Envoy.
	k0, k1 := newKeyCheck(t, "k0", host, secretFile), newKeyCheck(t, "k1", host, secretFile)
	checks := []string{k0.grpc, k1.grpc}
	x0, x1 := newXDS(t, "x0", host, checks, dir), newXDS(t, "x1", host, checks, dir)
	for _, p := range []*proc{k0, k1, x0, x1} {
		p.start(t)
		t.Cleanup(func() { p.stop(t) })
	}
	for _, p := range []*proc{k0, k1, x0, x1} {
		p.waitReady(t, time.Minute)
	}
	envoy, err := envoystandin.Start(envoystandin.Options{XDS: []string{x0.grpc, x1.grpc}, Delta: true, Logger: logger(t, "envoy")})
	require.NoError(t, err)
	t.Cleanup(envoy.Close)
	serving := func(cluster string, want ...*replicadouble.Double) func(adstest.State) bool {
		var addrs []string
		for _, d := range want {
			addrs = append(addrs, d.Addr())
		}
		slices.Sort(addrs)
		return func(st adstest.State) bool { return slices.Equal(st.Endpoints[cluster], addrs) }
	}
	require.NoError(t, envoy.WaitFor(ctx, serving("acme/chat", a0, a1)), "acme's Ready replicas serve, not a2")
	require.NoError(t, envoy.WaitFor(ctx, serving("globex/chat", g0)))
	require.Eventually(t, func() bool { return len(envoy.HealthyChecks()) == 2 }, time.Minute, 50*time.Millisecond, "both key checks healthy")

	globexHost := "chat.globex." + domain
	l := &load{url: envoy.URL(), every: 50 * time.Millisecond, max: 40000,
		hosts: map[string]string{acmeHost: acmeKey, globexHost: globexKey},
		refused: []struct{ kind, host, key string }{
			{"none", acmeHost, ""}, {"bad", acmeHost, acmeKey[:len(acmeKey)-4] + "AAAA"},
			{"revoked", acmeHost, revokedKey}, {"other-tenant", acmeHost, globexKey},
		}}
	l.start()
	t.Cleanup(l.halt)
	report := func(fault string, from time.Time) {
		t.Helper()
		valid, failed, refused, leaked, first := l.window(from, time.Now())
		t.Logf("FIGURE %s: %d requests with a valid key, %d failed; %d without one, %d let through (load %s)",
			fault, valid, failed, refused, leaked, loadavg())
		assert.Zero(t, failed, "%s: requests with a valid key failed; first: %s", fault, first)
		assert.Zero(t, leaked, "%s: requests without a valid key passed; first: %s", fault, first)
		assert.Positive(t, valid, "%s: the load ran", fault)
	}
	steady := func(d time.Duration) { time.Sleep(d) } // the load runs meanwhile

	t.Run("an xDS server killed", func(t *testing.T) {
		from := time.Now()
		steady(time.Second)
		x0.stop(t)
		require.Eventually(t, func() bool { srv, _ := envoy.Server(); return srv == x1.grpc }, time.Minute, 10*time.Millisecond)
		steady(3 * time.Second)
		x0.start(t)
		x0.waitReady(t, time.Minute)
		report("one of two xDS servers killed and restarted", from)
	})

	t.Run("a key check killed", func(t *testing.T) {
		from := time.Now()
		steady(time.Second)
		k0.stop(t) // drains: fails its health checks, answers meanwhile, then stops
		assert.Equal(t, []string{k1.grpc}, envoy.HealthyChecks())
		steady(3 * time.Second)
		k0.start(t)
		k0.waitReady(t, time.Minute)
		require.Eventually(t, func() bool { return len(envoy.HealthyChecks()) == 2 }, time.Minute, 50*time.Millisecond)
		report("one of two key checks killed and restarted", from)
	})

	// acme's API server goes down; both xDS servers restart one after the other (a rolling
	// update); a third, new one starts with nothing saved.
	x2 := newXDS(t, "x2", host, checks, dir)
	t.Cleanup(func() { x2.stop(t) })
	t.Run("gateway restarted while a tenant's API server is down", func(t *testing.T) {
		from := time.Now()
		require.NoError(t, acme.Env.StopAPIServer())
		for _, p := range []*proc{x0, x1} {
			require.Eventually(t, func() bool {
				st, ok := clusterState(p, "acme")
				return ok && st.State == discovery.StateFailing
			}, time.Minute, 50*time.Millisecond, "%s: acme failing", p.name)
		}
		st, _ := clusterState(x0, "acme")
		t.Logf("acme's API server down, as x0 reports it: %s", st.Error)
		assert.True(t, strings.HasPrefix(st.Error, "connection refused at "+strings.TrimSuffix(acme.Env.Config.Host, "/")) ||
			strings.HasPrefix(st.Error, "no answer"), "the cause first: %s", st.Error)
		for _, p := range []*proc{x1, x0} {
			before, sessions := envoy.Server()
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
				require.Eventually(t, func() bool { _, n := envoy.Server(); return n > sessions }, time.Minute, 10*time.Millisecond)
			}
		}
		x2.start(t)
		x2.waitReady(t, time.Minute)
		st, _ = clusterState(x2, "acme")
		assert.Equal(t, discovery.StateUnreachable, st.State, "a new server with nothing saved cannot serve acme")
		srv, _ := envoy.Server()
		assert.Contains(t, []string{x0.grpc, x1.grpc}, srv)
		require.NoError(t, envoy.WaitFor(ctx, serving("acme/chat", a0, a1)))
		steady(2 * time.Second)
		report("acme's API server down, both xDS servers restarted", from)
	})

	t.Run("the tenant's API server back", func(t *testing.T) {
		from := time.Now()
		agent := &adstest.Agent{NodeID: "x2-watcher", Delta: true}
		conn := dialXDS(t, x2.grpc)
		require.NoError(t, adstest.Start(ctx, conn, agent))
		require.NoError(t, agent.WaitFor(ctx, func(st adstest.State) bool { _, ok := st.Endpoints["globex/chat"]; return ok }))
		// Clocks start before the API server does: when it first answers, when each server
		// reads acme again, when x2's ADS client gets acme's endpoints.
		answered := firstTime(func() bool { return apiAnswers(acme.Env.Config, discovery.CheckPath("acme")) })
		synced := map[string]<-chan time.Time{}
		for _, p := range []*proc{x0, x1, x2} {
			synced[p.name] = firstTime(func() bool { st, ok := clusterState(p, "acme"); return ok && st.State == discovery.StateSynced })
		}
		ads := make(chan time.Time, 1)
		go func() {
			if agent.WaitFor(ctx, serving("acme/chat", a0, a1)) == nil {
				ads <- time.Now()
			}
		}()
		require.NoError(t, acme.Env.StartAPIServer())
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
		x2.stop(t)
		report("acme's API server back", from)
	})

	t.Run("the host API server down for 60 s", func(t *testing.T) {
		from := time.Now()
		require.NoError(t, hostEnv.StopAPIServer())
		down := time.Now()
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, err := newKey(t, cctx, store, hasher, "acme")
		ccancel()
		require.Error(t, err, "no key can be created while the host API server is down: new keys wait")
		t.Logf("creating a key during the outage: %v", err)
		time.Sleep(time.Until(down.Add(60 * time.Second)))
		report("the host API server down for 60 s", from)

		from = time.Now()
		answered := firstTime(func() bool {
			return apiAnswers(hostEnv.Config, "/apis/inferplane.io/v1alpha1/namespaces/"+keysNS+"/apikeys?limit=1")
		})
		resynced := map[string]<-chan time.Time{}
		for _, k := range []*proc{k0, k1} {
			resynced[k.name] = firstTime(func() bool { return resyncs(k) > 0 })
		}
		require.NoError(t, hostEnv.StartAPIServer())
		up := receive(t, answered, "the host API server answers")
		newAcmeKey, newRec, err := newKey(t, ctx, store, hasher, "acme")
		require.NoError(t, err)
		s.allow(newRec.ID, "acme")
		created := time.Now()
		_, err = store.Revoke(ctx, laterRec.ID, time.Now())
		require.NoError(t, err)
		revokedAt := time.Now()
		var accepted, refused time.Duration
		for (accepted == 0 || refused == 0) && time.Since(up) < 2*time.Minute {
			if accepted == 0 && statusThrough(envoy, acmeHost, newAcmeKey) == http.StatusOK {
				accepted = time.Since(created)
			}
			if refused == 0 && statusThrough(envoy, acmeHost, laterRevoked) == http.StatusForbidden {
				refused = time.Since(revokedAt)
				s.deny(laterRec.ID)
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.NotZero(t, accepted, "a key created after the outage is accepted")
		require.NotZero(t, refused, "a key revoked after the outage is refused")
		t.Logf("FIGURE after the host API server answers again: a new key accepted %s after its creation, "+
			"a revocation applied %s after it was written (load %s)", accepted.Round(time.Millisecond), refused.Round(time.Millisecond), loadavg())
		for _, k := range []*proc{k0, k1} {
			t.Logf("FIGURE %s read the keys again %s after the host API server answered (load %s)",
				k.name, receive(t, resynced[k.name], k.name+" reads the keys again").Sub(up).Round(time.Millisecond), loadavg())
		}
		steady(2 * time.Second)
		report("the host API server back", from)
	})

	l.halt()
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Zero(t, s.byDouble["a2"], "no request reached a replica that is not Ready")
	assert.Empty(t, s.bad, "every request that reached a replica carried a valid key's identity, and not the key")
	valid, failed, refused, leaked, _ := l.window(time.Time{}, time.Now())
	t.Logf("FIGURE whole run: %d requests with a valid key, %d failed; %d without one, %d let through; replicas served %v",
		valid, failed, refused, leaked, s.byDouble)
}
