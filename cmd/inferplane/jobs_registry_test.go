package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/argocd"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/lifecycletest"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

// argoClusterSecret is the Argo CD cluster Secret of a cluster (Argo CD's declarative setup):
// its name key, its server and, in config, the TLS client configuration that reaches it.
func argoClusterSecret(t testing.TB, name string, cfg *rest.Config) *corev1.Secret {
	s, err := argocd.ClusterSecret(registry.ArgoCDNamespace, name, cfg)
	require.NoError(t, err)
	return s
}

// jobs detail and restart, given only the host cluster's context, find the tenant's cluster
// through the cluster registry in the host cluster, as the gateway does: a host API server
// holding acme's Argo CD cluster Secret (its server the tenant API server's 127.0.0.1 URL, its
// TLS client configuration the credentials) and the job's Application, and a tenant API server
// holding the job's VMs, claims and a VMI, whose status the test writes as KubeVirt's
// controllers would (no VM runs here). Then: --tenant-clusters kubeconfig as before, a
// kubeconfig context taking precedence in auto, the tenant's Argo CD destination naming the
// Secret, and a registry without the tenant.
func TestJobsReachTenantClusterThroughTheRegistry(t *testing.T) {
	host := clusters.Get(t, "host")
	tenant := kubeenv.Another(t) // reachable only through the Secret
	ctx := context.Background()
	tr := newJobsTree(t)
	out, err := tr.run(t, "generate")
	require.NoError(t, err, out)
	hostOnly := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(hostOnly, "host", map[string]*rest.Config{"host": host.Config}))
	gw := "http://" + closedAddr(t)
	run := func(kc string, args ...string) (string, error) {
		return tr.run(t, append(args, "--kubeconfig", kc, "--server", gw)...)
	}

	require.NoError(t, host.EnsureNamespace(ctx, registry.ArgoCDNamespace))
	secret := argoClusterSecret(t, "acme", tenant.Config)
	require.NoError(t, host.Client.Create(ctx, secret))
	t.Cleanup(func() { _ = host.Client.Delete(context.Background(), secret) })

	const job, vm = "mistral-small", "mistral-small-r0-n0"
	w := &lifecycletest.World{Host: host, Cluster: tenant, Repo: filepath.Join(tr.out, "acme"), Tenant: "acme"}
	w.Sync(t, job)
	t.Cleanup(func() { deleteApplication(t, host, render.ApplicationName("acme", job)) })
	t0 := time.Now().UTC().Truncate(time.Second)
	w.SetApplication(t, job, lifecycletest.Synced(t0, "0123abcd"))
	w.BindClaims(t, job)
	running := lifecycletest.All(lifecycletest.Phase(kubevirtv1.Running, "gpu-node-9", t0), lifecycletest.Interface("10.244.9.7"),
		lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "", "HTTP probe failed with statuscode: 503", t0))
	w.PutVMI(t, vm, running)
	wantNodes := []lifecycle.NodeInfo{{VM: vm, Node: "gpu-node-9", Phase: "Running", IPs: []string{"10.244.9.7"}}}
	detail := func(kc string, args ...string) jobDetail {
		t.Helper()
		out, err := run(kc, append([]string{"jobs", "detail", "acme/" + job, "-o", "json"}, args...)...)
		require.Equal(t, exitOnItsWay, exitCode(err), "%v\n%s", err, out)
		var d jobDetail
		require.NoError(t, json.Unmarshal([]byte(out), &d), out)
		return d
	}

	for _, mode := range []string{"auto", "registry"} {
		d := detail(hostOnly, "--tenant-clusters", mode)
		assert.Equal(t, lifecycle.StageLoadingModel, d.Stage, "%s: %s", mode, d.Reason)
		require.Len(t, d.Replicas, 1, mode)
		assert.Equal(t, wantNodes, d.Replicas[0].Nodes, "%s: the VMI's node and address, from the tenant cluster", mode)
	}

	out, err = run(hostOnly, "jobs", "list", "--tenant", "acme")
	assert.Equal(t, exitOnItsWay, exitCode(err), "%v\n%s", err, out)
	assert.Regexp(t, `acme\s+mistral-small\s+vllm\s+\S+\s+1\s+loading-model\s`, out)

	out, err = run(hostOnly, "jobs", "restart", "acme/"+job)
	require.NoError(t, err, out)
	assert.Contains(t, out, "acme/mistral-small: mistral-small-r0-n0: deleted the VMI")
	err = tenant.Client.Get(ctx, client.ObjectKey{Namespace: "acme", Name: vm}, &kubevirtv1.VirtualMachineInstance{})
	assert.True(t, apierrors.IsNotFound(err), "restart deleted the VMI in the tenant cluster: %v", err)
	require.NoError(t, tenant.Client.Get(ctx, client.ObjectKey{Namespace: "acme", Name: vm + "-model-cache"}, &corev1.PersistentVolumeClaim{}))
	w.PutVMI(t, vm, running) // runStrategy Always, as virt-controller would

	// --tenant-clusters kubeconfig reads the kubeconfig only, as before the registry.
	_, err = run(hostOnly, "jobs", "detail", "acme/"+job, "--tenant-clusters", "kubeconfig")
	assert.EqualError(t, err, `the cluster of tenant acme: no context "acme" in kubeconfig `+hostOnly+
		` (contexts: host); name it with --tenant-context (e.g. '{tenant}' or 'vcluster_{tenant}_host')`)
	assert.Equal(t, 1, exitCode(err))

	// A kubeconfig context of the tenant's cluster comes first in auto; registry skips it.
	down := "https://" + closedAddr(t)
	withContext := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(withContext, "host", map[string]*rest.Config{"host": host.Config, "acme": {Host: down}}))
	_, err = run(withContext, "jobs", "detail", "acme/"+job)
	assert.ErrorContains(t, err, "cluster of tenant acme ("+down+"): list VirtualMachines in namespace acme")
	assert.Equal(t, wantNodes, detail(withContext, "--tenant-clusters", "registry").Replicas[0].Nodes)

	// The Secret names acme's cluster acme-gpu: the registry has no cluster for acme...
	secret.Data[registry.ArgoCDKeyName] = []byte("acme-gpu")
	require.NoError(t, host.Client.Update(ctx, secret))
	_, err = run(hostOnly, "jobs", "detail", "acme/"+job, "--tenant-clusters", "registry")
	assert.EqualError(t, err, "the cluster of tenant acme: host cluster ("+host.Config.Host+"): no cluster of tenant acme in the cluster registry "+
		"(read: Argo CD cluster Secrets in namespace argocd); known tenants: acme-gpu")
	_, err = run(hostOnly, "jobs", "detail", "acme/"+job)
	require.Error(t, err)
	assert.Equal(t, 1, exitCode(err))
	for _, want := range []string{
		"the cluster of tenant acme is neither in the kubeconfig nor in the cluster registry:\n",
		`- kubeconfig: no context "acme" in kubeconfig ` + hostOnly,
		"- cluster registry: host cluster (" + host.Config.Host + "): no cluster of tenant acme in the cluster registry (read: Argo CD cluster Secrets in namespace argocd); known tenants: acme-gpu\n",
		`Fix either: add a context "acme" to the kubeconfig (or name the tenants' contexts with --tenant-context), ` +
			`or give the host cluster an Argo CD cluster Secret whose name key is "acme"`,
	} {
		assert.Contains(t, err.Error(), want)
	}

	// ... until acme's Applications go to the Argo CD cluster acme-gpu (spec.argoCD.destination).
	tenantFile := filepath.Join(tr.tenants, "acme", "tenant.yaml")
	y, err := os.ReadFile(tenantFile)
	require.NoError(t, err)
	y = []byte(strings.Replace(string(y), "connector: argocd-main", "connector: argocd-main\n    destination: acme-gpu", 1))
	require.NoError(t, os.WriteFile(tenantFile, y, 0o644))
	assert.Equal(t, wantNodes, detail(hostOnly).Replicas[0].Nodes)
}

// deleteApplication removes an Application the test put into the shared host API server.
func deleteApplication(t *testing.T, host *kubeenv.Env, name string) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(cluster.ApplicationGVK)
	u.SetNamespace(render.DefaultArgoCDNamespace)
	u.SetName(name)
	if err := host.Client.Delete(context.Background(), u); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete Application %s: %v", name, err)
	}
}

// --tenant-clusters and the flags that only one way to the clusters reads: usage errors (exit
// 2) before anything is read.
func TestJobsTenantClustersFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant-clusters", "argocd"}, `--tenant-clusters "argocd": expected auto, registry or kubeconfig`},
		{[]string{"--tenant-clusters", "kubeconfig", "--argocd-namespace", "ops"}, "--argocd-namespace is for --tenant-clusters registry or auto"},
		{[]string{"--tenant-clusters", "kubeconfig", "--vcluster-namespace", "vc"}, "--vcluster-namespace is for --tenant-clusters registry or auto"},
		{[]string{"--tenant-clusters", "registry", "--tenant-context", "{tenant}"}, "--tenant-context is for --tenant-clusters kubeconfig or auto"},
		{[]string{"--vcluster-selector", "a in (b"}, `--vcluster-selector "a in (b"`},
		{[]string{"--argocd-namespace", "Argo_CD"}, `--argocd-namespace/--vcluster-namespace: argo CD namespace "Argo_CD"`},
	} {
		for _, cmd := range [][]string{{"jobs", "list"}, {"jobs", "detail", "acme/chat"}, {"jobs", "restart", "acme/chat"}} {
			_, _, err := execCLI(context.Background(), append(cmd, tc.args...)...)
			assert.Equal(t, 2, exitCode(err), "%v %v: %v", cmd, tc.args, err)
			assert.ErrorContains(t, err, tc.want, "%v %v", cmd, tc.args)
		}
	}
}
