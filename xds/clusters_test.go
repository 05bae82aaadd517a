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
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
)

// tenantCluster prepares a tenant cluster as an operator does for the gateway: the tenant's
// namespace, a ServiceAccount that may only read VMIs and Services there, and tokens for it.
type tenantCluster struct {
	tenant string
	env    *kubeenv.Env
	cs     *kubernetes.Clientset
}

func newTenantCluster(t *testing.T, ctx context.Context, tenant string) *tenantCluster {
	t.Helper()
	e := kubeenv.Another(t)
	require.NoError(t, e.EnsureNamespace(ctx, tenant))
	c := e.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "inferplane-gateway", Namespace: tenant}}
	require.NoError(t, c.Create(ctx, sa))
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "inferplane-gateway", Namespace: tenant}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
	}}
	require.NoError(t, c.Create(ctx, role))
	require.NoError(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "inferplane-gateway", Namespace: tenant},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: tenant}}}))
	cs, err := kubernetes.NewForConfig(e.Config)
	require.NoError(t, err)
	return &tenantCluster{tenant: tenant, env: e, cs: cs}
}

// token is a new token of the gateway's ServiceAccount (TokenRequest, as a rotation makes one).
func (tc *tenantCluster) token(t *testing.T, ctx context.Context) string {
	t.Helper()
	tr, err := tc.cs.CoreV1().ServiceAccounts(tc.tenant).CreateToken(ctx, "inferplane-gateway",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// argoSecret is the Argo CD cluster Secret of a tenant cluster (its declarative format).
func argoSecret(name, tenant, server string, config any) *corev1.Secret {
	b, _ := json.Marshal(config)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd", Labels: map[string]string{clusters.ArgoCDSecretTypeKey: clusters.ArgoCDSecretTypeValue}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"name": []byte(tenant), "server": []byte(server), "config": b},
	}
}

func tokenConfig(token string, ca []byte) map[string]any {
	return map[string]any{"bearerToken": token, "tlsClientConfig": map[string]any{"insecure": false, "caData": ca}}
}

func startVMI(t *testing.T, ctx context.Context, c client.Client, n vmitest.Node, d *replicadouble.Double) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	vmi := vmitest.VMI(n)
	require.NoError(t, c.Create(ctx, vmi))
	require.NoError(t, vmitest.SetStatus(ctx, c, vmi, kubevirtv1.Running, d.Host(), true))
	return vmi
}

// TestTenantClustersEndToEnd runs the gateway's multi-cluster discovery against three real API
// servers: the host cluster, where Argo CD's cluster Secrets are, and two tenant clusters
// whose VMIs it watches with a ServiceAccount token limited to the tenant's namespace.
func TestTenantClustersEndToEnd(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	acme, globex := newTenantCluster(t, ctx, "acme"), newTenantCluster(t, ctx, "globex")
	host := env.Client
	require.NoError(t, env.EnsureNamespace(ctx, "argocd"))

	doubles := startDoubles(t, "127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14", "127.0.0.15")
	node := func(tenant string, replica int, d *replicadouble.Double) vmitest.Node {
		return vmitest.Node{Tenant: tenant, Job: "chat", Runtime: "vllm", Replica: replica, ServingPort: d.Port(), RequireAPIKey: true}
	}
	a0 := startVMI(t, ctx, acme.env.Client, node("acme", 0, doubles[0]), doubles[0])
	startVMI(t, ctx, acme.env.Client, node("acme", 1, doubles[1]), doubles[1])
	startVMI(t, ctx, globex.env.Client, node("globex", 0, doubles[2]), doubles[2])
	// acme's cluster holds a VMI in another namespace claiming globex: never served.
	require.NoError(t, acme.env.EnsureNamespace(ctx, "globex"))
	startVMI(t, ctx, acme.env.Client, node("globex", 7, doubles[4]), doubles[4])

	acmeSecret := argoSecret("cluster-acme", "acme", acme.env.Config.Host, tokenConfig(acme.token(t, ctx), acme.env.Config.CAData))
	for _, s := range []*corev1.Secret{
		acmeSecret,
		argoSecret("cluster-globex", "globex", globex.env.Config.Host, tokenConfig(globex.token(t, ctx), globex.env.Config.CAData)),
		// Bad input: garbage config; a second Secret claiming acme; a tenant with no jobs
		// (its namespace does not even exist in the cluster it names).
		argoSecret("cluster-garbage", "hooli", globex.env.Config.Host, "{not json"),
		argoSecret("cluster-acme-again", "acme", globex.env.Config.Host, tokenConfig("x", globex.env.Config.CAData)),
		argoSecret("cluster-initech", "initech", globex.env.Config.Host, map[string]any{"tlsClientConfig": map[string]any{
			"caData": globex.env.Config.CAData, "certData": globex.env.Config.CertData, "keyData": globex.env.Config.KeyData}}),
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
	b, _ := json.Marshal(tokenConfig(acme.token(t, ctx), acme.env.Config.CAData))
	acmeSecret.Data["config"] = b
	require.NoError(t, host.Update(ctx, acmeSecret))
	require.Eventually(t, func() bool {
		_, body := get(t, "http://"+p.AdminAddr.String()+"/debug/endpoints")
		return strings.Count(body, `"state": "synced"`) == 3 && !strings.Contains(body, "rotating")
	}, 30*time.Second, 20*time.Millisecond)
	assert.True(t, endpointsAre("acme/chat", addrs(doubles[0], doubles[1]))(agent.Snapshot()), "acme kept serving through the rotation")
	startVMI(t, ctx, acme.env.Client, node("acme", 2, doubles[3]), doubles[3])
	wait("a change after the rotation arrives", "acme/chat", doubles[0], doubles[1], doubles[3])

	// globex's API server goes down: its endpoints stay as they were, its probes still decide,
	// and acme's changes still arrive.
	if err := globex.env.Stop(); err != nil {
		// envtest sends SIGTERM, then SIGKILL when the server takes longer than its stop
		// timeout (open watches can hold it): either way it is down now.
		t.Logf("stopping globex's API server: %v", err)
	}
	require.NoError(t, acme.env.Client.Delete(ctx, a0))
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
