// Package tenanttest prepares tenant clusters for the gateway's tests against real API
// servers, as an operator does: the tenant's namespace, a ServiceAccount that may only read
// VMIs and Services there, tokens for it, and the Argo CD cluster Secret that points the
// gateway at the cluster.
package tenanttest

import (
	"context"
	"encoding/json"
	"testing"

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
	"github.com/inferplane/inferplane/xds/internal/vmitest"
)

// Cluster is a tenant cluster: its own API server (stopped when the test ends).
type Cluster struct {
	Tenant string
	Env    *kubeenv.Env
	cs     *kubernetes.Clientset
}

// New starts a tenant cluster and prepares it for the gateway.
func New(t *testing.T, ctx context.Context, tenant string) *Cluster {
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
	return &Cluster{Tenant: tenant, Env: e, cs: cs}
}

// Token is a new token of the gateway's ServiceAccount (TokenRequest, as a rotation makes one).
func (tc *Cluster) Token(t *testing.T, ctx context.Context) string {
	t.Helper()
	tr, err := tc.cs.CoreV1().ServiceAccounts(tc.Tenant).CreateToken(ctx, "inferplane-gateway",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// Secret is the Argo CD cluster Secret of the cluster, with a new token.
func (tc *Cluster) Secret(t *testing.T, ctx context.Context) *corev1.Secret {
	return ArgoSecret("cluster-"+tc.Tenant, tc.Tenant, tc.Env.Config.Host, TokenConfig(tc.Token(t, ctx), tc.Env.Config.CAData))
}

// ArgoSecret is the Argo CD cluster Secret of a tenant cluster (its declarative format).
func ArgoSecret(name, tenant, server string, config any) *corev1.Secret {
	b, _ := json.Marshal(config)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd", Labels: map[string]string{clusters.ArgoCDSecretTypeKey: clusters.ArgoCDSecretTypeValue}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"name": []byte(tenant), "server": []byte(server), "config": b},
	}
}

// TokenConfig is Argo CD's cluster config with a bearer token and the server's CA.
func TokenConfig(token string, ca []byte) map[string]any {
	return map[string]any{"bearerToken": token, "tlsClientConfig": map[string]any{"insecure": false, "caData": ca}}
}

// StartVMI creates the VMI of a node and moves it to Running with the double's address and
// the given Ready condition, as KubeVirt would.
func StartVMI(t *testing.T, ctx context.Context, c client.Client, n vmitest.Node, d *replicadouble.Double, ready bool) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	vmi := vmitest.VMI(n)
	require.NoError(t, c.Create(ctx, vmi))
	require.NoError(t, vmitest.SetStatus(ctx, c, vmi, kubevirtv1.Running, d.Host(), ready))
	return vmi
}
