package clusters

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// argoSecret is an Argo CD cluster Secret as its declarative setup documents it.
func argoSecret(name, cluster, server, config string, age time.Duration) corev1.Secret {
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd", CreationTimestamp: metav1.NewTime(t0.Add(-age)),
			Labels: map[string]string{ArgoCDSecretTypeKey: ArgoCDSecretTypeValue}},
		Data: map[string][]byte{ArgoCDKeyName: []byte(cluster), ArgoCDKeyServer: []byte(server), ArgoCDKeyConfig: []byte(config)},
	}
}

// vclusterSecret is the kubeconfig Secret vCluster writes for a virtual cluster.
func vclusterSecret(ns, name, server, token string) corev1.Secret {
	kc := `apiVersion: v1
kind: Config
clusters:
- name: vcluster
  cluster: {server: "` + server + `", certificate-authority-data: Y2E=}
users:
- name: vcluster
  user: {token: ` + token + `}
contexts:
- name: vcluster
  context: {cluster: vcluster, user: vcluster}
current-context: vcluster
`
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(t0)},
		Data:       map[string][]byte{VClusterKeyConfig: []byte(kc)},
	}
}

const goodConfig = `{"bearerToken": "tok-acme", "tlsClientConfig": {"insecure": false, "caData": "Y2E=", "serverName": "api.acme"}}`

func TestReadArgoCDSecrets(t *testing.T) {
	snap := Read([]corev1.Secret{argoSecret("cluster-acme", "acme", "https://127.0.0.1:6443", goodConfig, 0)}, Options{})
	require.Empty(t, snap.Problems)
	require.Len(t, snap.Clusters, 1)
	c := snap.Clusters[0]
	assert.Equal(t, "acme", c.Tenant)
	assert.Equal(t, KindArgoCD, c.Kind)
	assert.Equal(t, "argocd/cluster-acme", c.Secret)
	assert.Equal(t, "https://127.0.0.1:6443", c.Config.Host)
	assert.Equal(t, "tok-acme", c.Config.BearerToken)
	assert.Equal(t, []byte("ca"), c.Config.CAData, "caData is base64 in the JSON, as Argo CD writes it")
	assert.Equal(t, "api.acme", c.Config.ServerName)
	assert.NotEmpty(t, c.Fingerprint)

	// A rotated token is a new fingerprint; the same Secret read again is the same.
	again := Read([]corev1.Secret{argoSecret("cluster-acme", "acme", "https://127.0.0.1:6443", goodConfig, 0)}, Options{})
	assert.Equal(t, c.Fingerprint, again.Clusters[0].Fingerprint)
	rotated := Read([]corev1.Secret{argoSecret("cluster-acme", "acme", "https://127.0.0.1:6443",
		strings.Replace(goodConfig, "tok-acme", "tok-2", 1), 0)}, Options{})
	assert.NotEqual(t, c.Fingerprint, rotated.Clusters[0].Fingerprint)
	assert.Equal(t, []Change{{Type: Changed, Cluster: rotated.Clusters[0]}}, Changes(snap, rotated))
}

func TestReadVClusterSecrets(t *testing.T) {
	secrets := []corev1.Secret{
		vclusterSecret("vcluster-acme", "vc-acme", "https://127.0.0.1:7443", "tok-v"),
		vclusterSecret("vcluster-acme", "other", "https://127.0.0.1:7443", "tok-v"), // not vc-*
		vclusterSecret("elsewhere", "vc-globex", "https://127.0.0.1:7443", "tok-v"), // namespace not watched
	}
	snap := Read(secrets, Options{ArgoCDNamespace: "-", VClusterNamespaces: []string{"vcluster-acme"}})
	require.Empty(t, snap.Problems)
	require.Len(t, snap.Clusters, 1)
	assert.Equal(t, "acme", snap.Clusters[0].Tenant)
	assert.Equal(t, "tok-v", snap.Clusters[0].Config.BearerToken)
	assert.Equal(t, KindVCluster, snap.Clusters[0].Kind)

	// By label: the tenant label names the tenant, whatever the Secret's name.
	s := vclusterSecret("vcluster-acme", "kubeconfig", "https://127.0.0.1:7443", "tok-v")
	s.Labels = map[string]string{"inferplane.io/vcluster": "true", v1alpha1.LabelTenant: "initech"}
	snap = Read([]corev1.Secret{s, secrets[0]}, Options{ArgoCDNamespace: "-", VClusterNamespaces: []string{"vcluster-acme"},
		VClusterSelector: labels.SelectorFromSet(labels.Set{"inferplane.io/vcluster": "true"})})
	require.Len(t, snap.Clusters, 1)
	assert.Equal(t, "initech", snap.Clusters[0].Tenant)

	// vCluster's default server is only reachable inside its pod: read, with a warning.
	snap = Read([]corev1.Secret{vclusterSecret("vcluster-acme", "vc-acme", "https://localhost:8443", "t")},
		Options{VClusterNamespaces: []string{"vcluster-acme"}})
	require.Len(t, snap.Clusters, 1)
	require.Len(t, snap.Problems, 1)
	assert.Contains(t, snap.Problems[0].Reason, "exportKubeConfig.server")
}

// Bad Secrets are reported, each with what is wrong, and never stop the others.
func TestReadReportsBadSecrets(t *testing.T) {
	good := argoSecret("cluster-acme", "acme", "https://127.0.0.1:6443", goodConfig, time.Hour)
	secrets := []corev1.Secret{
		good,
		argoSecret("garbage", "globex", "https://127.0.0.1:6444", "{not json", 0),
		argoSecret("no-server", "initech", "", goodConfig, 0),
		argoSecret("bad-server", "hooli", "127.0.0.1:6443", goodConfig, 0),
		argoSecret("exec", "umbrella", "https://127.0.0.1:6443", `{"execProviderConfig": {"command": "/bin/sh"}}`, 0),
		argoSecret("bad-tenant", "Not_A_Tenant", "https://127.0.0.1:6443", goodConfig, 0),
		argoSecret("claims-acme", "acme", "https://127.0.0.1:7000", goodConfig, 0), // newer: loses
		argoSecret("anonymous", "vandelay", "https://127.0.0.1:6443", `{"tlsClientConfig": {"insecure": true}}`, 0),
	}
	bad := vclusterSecret("vcluster-x", "vc-x", "https://127.0.0.1:7443", "t")
	bad.Data[VClusterKeyConfig] = []byte("clusters: [")
	secrets = append(secrets, bad)
	snap := Read(secrets, Options{VClusterNamespaces: []string{"vcluster-x"}})

	var tenants []string
	for _, c := range snap.Clusters {
		tenants = append(tenants, c.Tenant)
	}
	assert.Equal(t, []string{"acme", "vandelay"}, tenants)
	assert.Equal(t, "argocd/cluster-acme", snap.Clusters[0].Secret, "the older Secret keeps the tenant")
	var got []string
	for _, p := range snap.Problems {
		got = append(got, p.String())
	}
	for _, want := range []string{
		"Secret/argocd/anonymous: config has no credentials",
		"Secret/argocd/anonymous: tlsClientConfig.insecure is true",
		`Secret/argocd/bad-server: skipped: key server: "127.0.0.1:6443": expected an http(s) URL`,
		`Secret/argocd/bad-tenant: skipped: tenant "Not_A_Tenant" (from key name)`,
		"Secret/argocd/claims-acme: skipped: tenant acme is already served by Secret argocd/cluster-acme (the older one wins)",
		"Secret/argocd/exec: skipped: key config: execProviderConfig and awsAuthConfig are not supported",
		"Secret/argocd/garbage: skipped: key config: not Argo CD's cluster config JSON",
		"Secret/argocd/no-server: skipped: key server: missing",
		"Secret/vcluster-x/vc-x: skipped: key config: not a kubeconfig",
	} {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, want)
		}
		assert.True(t, found, "want a problem starting %q in\n%s", want, strings.Join(got, "\n"))
	}
	for _, g := range got {
		assert.NotContains(t, g, "tok-acme", "a problem never shows a credential")
	}
}

func TestChanges(t *testing.T) {
	a := argoSecret("cluster-acme", "acme", "https://127.0.0.1:6443", goodConfig, 0)
	g := argoSecret("cluster-globex", "globex", "https://127.0.0.1:6444", goodConfig, 0)
	before := Read([]corev1.Secret{a}, Options{})
	after := Read([]corev1.Secret{g}, Options{})
	ch := Changes(before, after)
	require.Len(t, ch, 2)
	assert.Equal(t, Added, ch[0].Type)
	assert.Equal(t, "globex", ch[0].Cluster.Tenant)
	assert.Equal(t, Removed, ch[1].Type)
	assert.Equal(t, "acme", ch[1].Cluster.Tenant)
	assert.Empty(t, Changes(after, after))
}

func TestOptionsValidate(t *testing.T) {
	assert.NoError(t, Options{}.Validate())
	assert.ErrorContains(t, Options{ArgoCDNamespace: "Argo CD"}.Validate(), `argo CD namespace "Argo CD"`)
	assert.ErrorContains(t, Options{VClusterNamespaces: []string{"a/b"}}.Validate(), `vCluster namespace "a/b"`)
}

// Find picks the cluster a tenant's Applications sync to: the Argo CD cluster named as their
// destination, else the tenant's entry; a miss says what was read and what is known.
func TestFind(t *testing.T) {
	labelled := argoSecret("cluster-initech-gpu", "initech-gpu", "https://127.0.0.1:6445", goodConfig, 0)
	labelled.Labels[v1alpha1.LabelTenant] = "initech"
	o := Options{VClusterNamespaces: []string{"vcluster-hooli"}}
	snap := Read([]corev1.Secret{
		argoSecret("cluster-acme", "acme", "https://127.0.0.1:6443", goodConfig, 0),
		argoSecret("cluster-globex-prod", "globex-prod", "https://127.0.0.1:6444", goodConfig, 0),
		labelled,
		vclusterSecret("vcluster-hooli", "vc-hooli", "https://127.0.0.1:7443", "tok-v"),
		argoSecret("garbage", "umbrella", "https://127.0.0.1:6446", "{not json", 0),
	}, o)
	for _, tc := range []struct {
		tenant, cluster string
		want            string // the Secret found
		err             []string
	}{
		{tenant: "acme", cluster: "acme", want: "argocd/cluster-acme"},
		{tenant: "globex", cluster: "globex-prod", want: "argocd/cluster-globex-prod"},
		{tenant: "initech", cluster: "initech-gpu", want: "argocd/cluster-initech-gpu"},
		{tenant: "initech", cluster: "initech", want: "argocd/cluster-initech-gpu"}, // by its label
		{tenant: "hooli", cluster: "hooli", want: "vcluster-hooli/vc-hooli"},
		{tenant: "hooli", want: "vcluster-hooli/vc-hooli"},
		{tenant: "globex", cluster: "globex", err: []string{
			"no cluster of tenant globex in the cluster registry (read: Argo CD cluster Secrets in namespace argocd; " +
				"vCluster kubeconfig Secrets vc-* in namespaces vcluster-hooli); known tenants: acme, globex-prod, hooli, initech",
			"Secret/argocd/garbage: skipped: key config: not Argo CD's cluster config JSON"}},
		{tenant: "umbrella", cluster: "umbrella-x", err: []string{
			"no Argo CD cluster named umbrella-x (the tenant's destination) and no cluster of tenant umbrella in the cluster registry"}},
	} {
		c, err := Find(snap, o, tc.tenant, tc.cluster)
		if tc.err != nil {
			for _, want := range tc.err {
				assert.ErrorContains(t, err, want, "%s/%s", tc.tenant, tc.cluster)
			}
			continue
		}
		require.NoError(t, err, "%s/%s", tc.tenant, tc.cluster)
		assert.Equal(t, tc.want, c.Secret, "%s/%s", tc.tenant, tc.cluster)
	}
}

func TestOptionsSources(t *testing.T) {
	assert.Equal(t, "Argo CD cluster Secrets in namespace argocd", Options{}.Sources())
	assert.Equal(t, "vCluster kubeconfig Secrets selected by app=vcluster in namespaces a, b",
		Options{ArgoCDNamespace: "-", VClusterNamespaces: []string{"a", "b"}, VClusterSelector: labels.SelectorFromSet(labels.Set{"app": "vcluster"})}.Sources())
	assert.Equal(t, "no Secrets (no Argo CD namespace and no vCluster namespace)", Options{ArgoCDNamespace: "-"}.Sources())
}
