package xds

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/internal/tenanttest"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
)

// startVMI starts a VMI that is Ready.
func startVMI(t *testing.T, ctx context.Context, c client.Client, n vmitest.Node, d *replicadouble.Double) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	return tenanttest.StartVMI(t, ctx, c, n, d, true)
}

// TestTenantClustersEndToEnd runs the gateway's multi-cluster discovery against three real API
// servers: the host cluster, where Argo CD's cluster Secrets are, and two tenant clusters
// whose VMIs it watches with a ServiceAccount token limited to the tenant's namespace.
func TestTenantClustersEndToEnd(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	acme, globex := tenanttest.New(t, ctx, "acme"), tenanttest.New(t, ctx, "globex")
	host := env.Client
	require.NoError(t, env.EnsureNamespace(ctx, "argocd"))

	doubles := startDoubles(t, "127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14", "127.0.0.15")
	node := func(tenant string, replica int, d *replicadouble.Double) vmitest.Node {
		return vmitest.Node{Tenant: tenant, Job: "chat", Runtime: "vllm", Replica: replica, ServingPort: d.Port(), RequireAPIKey: true}
	}
	a0 := startVMI(t, ctx, acme.Env.Client, node("acme", 0, doubles[0]), doubles[0])
	startVMI(t, ctx, acme.Env.Client, node("acme", 1, doubles[1]), doubles[1])
	startVMI(t, ctx, globex.Env.Client, node("globex", 0, doubles[2]), doubles[2])
	// acme's cluster holds a VMI in another namespace claiming globex: never served.
	require.NoError(t, acme.Env.EnsureNamespace(ctx, "globex"))
	startVMI(t, ctx, acme.Env.Client, node("globex", 7, doubles[4]), doubles[4])

	acmeSecret := tenanttest.ArgoSecret("cluster-acme", "acme", acme.Env.Config.Host, tenanttest.TokenConfig(acme.Token(t, ctx), acme.Env.Config.CAData))
	for _, s := range []*corev1.Secret{
		acmeSecret,
		tenanttest.ArgoSecret("cluster-globex", "globex", globex.Env.Config.Host, tenanttest.TokenConfig(globex.Token(t, ctx), globex.Env.Config.CAData)),
		// Bad input: garbage config; a second Secret claiming acme; a tenant with no jobs
		// (its namespace does not even exist in the cluster it names).
		tenanttest.ArgoSecret("cluster-garbage", "hooli", globex.Env.Config.Host, "{not json"),
		tenanttest.ArgoSecret("cluster-acme-again", "acme", globex.Env.Config.Host, tenanttest.TokenConfig("x", globex.Env.Config.CAData)),
		tenanttest.ArgoSecret("cluster-initech", "initech", globex.Env.Config.Host, map[string]any{"tlsClientConfig": map[string]any{
			"caData": globex.Env.Config.CAData, "certData": globex.Env.Config.CertData, "keyData": globex.Env.Config.KeyData}}),
	} {
		// The duplicate claim: cluster-acme is created first, so it is as old as cluster-acme-again
		// or older (creation times have one-second resolution; the name breaks a tie).
		require.NoError(t, host.Create(ctx, s))
	}

	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	src := &discovery.Clusters{Registry: &clusters.Registry{Config: env.Config, Debounce: 10 * time.Millisecond, Logger: log},
		Debounce: 10 * time.Millisecond, SyncTimeout: 20 * time.Second, CheckInterval: 200 * time.Millisecond, Logger: log}
	p := serve(t, Config{Source: src})
	agent := &adstest.Agent{NodeID: "envoy-clusters"}
	require.NoError(t, adstest.Start(ctx, p.conn, agent))
	wait := func(msg, cluster string, want ...*replicadouble.Double) {
		t.Helper()
		require.NoError(t, agent.WaitFor(ctx, endpointsAre(cluster, addrs(want...))), msg)
	}
	wait("acme's replicas from acme's cluster", "acme/chat", doubles[0], doubles[1])
	wait("globex's from globex's, not the VMI in acme's cluster", "globex/chat", doubles[2])

	_, body := get(t, "http://"+p.AdminAddr.String()+"/debug/endpoints")
	for _, want := range []string{
		`Secret/argocd/cluster-garbage: skipped: key config: not Argo CD's cluster config JSON`,
		`Secret/argocd/cluster-acme-again: skipped: tenant acme is already served by Secret argocd/cluster-acme`,
		`"tenant": "initech"`,
	} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, "127.0.0.15", "a VMI outside the tenant's namespace is not even read")

	// The token rotates: the gateway restarts acme's watch with it and keeps serving; a change
	// made afterwards arrives through the new watch.
	require.NoError(t, host.Get(ctx, client.ObjectKeyFromObject(acmeSecret), acmeSecret))
	b, _ := json.Marshal(tenanttest.TokenConfig(acme.Token(t, ctx), acme.Env.Config.CAData))
	acmeSecret.Data["config"] = b
	require.NoError(t, host.Update(ctx, acmeSecret))
	require.Eventually(t, func() bool {
		_, body := get(t, "http://"+p.AdminAddr.String()+"/debug/endpoints")
		return strings.Count(body, `"state": "synced"`) == 3 && !strings.Contains(body, "rotating")
	}, 30*time.Second, 20*time.Millisecond)
	assert.True(t, endpointsAre("acme/chat", addrs(doubles[0], doubles[1]))(agent.Snapshot()), "acme kept serving through the rotation")
	startVMI(t, ctx, acme.Env.Client, node("acme", 2, doubles[3]), doubles[3])
	wait("a change after the rotation arrives", "acme/chat", doubles[0], doubles[1], doubles[3])

	// globex's API server goes down: its endpoints stay as they were, its probes still decide,
	// and acme's changes still arrive.
	if err := globex.Env.Stop(); err != nil {
		// envtest sends SIGTERM, then SIGKILL when the server takes longer than its stop
		// timeout (open watches can hold it): either way it is down now.
		t.Logf("stopping globex's API server: %v", err)
	}
	require.NoError(t, acme.Env.Client.Delete(ctx, a0))
	wait("acme's change arrives while globex's API server is down", "acme/chat", doubles[1], doubles[3])
	assert.True(t, endpointsAre("globex/chat", addrs(doubles[2]))(agent.Snapshot()), "globex keeps its last endpoints")
	doubles[2].SetHealthy(false)
	wait("globex's probes still decide", "globex/chat")
	doubles[2].SetHealthy(true)
	wait("and bring it back", "globex/chat", doubles[2])
	require.Eventually(t, func() bool {
		_, body := get(t, "http://"+p.AdminAddr.String()+"/debug/endpoints")
		return strings.Contains(body, "tenant cluster globex: watch failing, its last known replicas stay")
	}, 60*time.Second, 50*time.Millisecond, "the failing cluster is reported")

	// globex's Secret is deleted: its endpoint is withdrawn.
	require.NoError(t, host.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cluster-globex", Namespace: "argocd"}}))
	require.NoError(t, agent.WaitFor(ctx, func(s adstest.State) bool { _, ok := s.Endpoints["globex/chat"]; return !ok }), "globex withdrawn")
	assert.True(t, endpointsAre("acme/chat", addrs(doubles[1], doubles[3]))(agent.Snapshot()))
}
