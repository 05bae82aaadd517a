package cluster_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/lifecycletest"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

var clusters kubeenv.Servers

func TestMain(m *testing.M) { os.Exit(clusters.Main(m)) }

var acme = cluster.Tenant{Name: "acme", Cluster: "acme", Namespace: "acme", ArgoCDNamespace: "argocd"}

// world renders the bundled examples' tenant acme and returns it with a host and a tenant
// API server and a kubeconfig whose contexts "host" and "acme" reach them.
func world(t *testing.T) (*lifecycletest.World, cluster.Kubeconfig) {
	t.Helper()
	host, tenant := clusters.Get(t, "host"), clusters.Get(t, "tenant")
	out := t.TempDir()
	_, err := generator.Generate(context.Background(), generator.Options{
		RecipesDir: "../../recipes", TenantsDir: "../../tenants", OutDir: out, Tenant: "acme"})
	require.NoError(t, err)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(kc, "host", map[string]*rest.Config{"host": host.Config, "acme": tenant.Config}))
	return &lifecycletest.World{Host: host, Cluster: tenant, Repo: filepath.Join(out, "acme"), Tenant: "acme"},
		cluster.Kubeconfig{Path: kc}
}

func now() time.Time { return time.Now().UTC().Truncate(time.Second) }

// stage reads the clusters as `jobs detail` does and computes the job's stage.
func stage(t *testing.T, kc cluster.Kubeconfig, job string, replicas int32, gw *lifecycle.Rotation) lifecycle.JobStatus {
	t.Helper()
	objs, err := cluster.Read(context.Background(), kc, acme, true)
	require.NoError(t, err)
	obs := objs.Job(job)
	obs.Gateway = gw
	return lifecycle.Compute(lifecycle.Job{Tenant: "acme", Name: job, Replicas: replicas, NodesPerReplica: 1}, obs)
}

// Each readiness stage, with its reason, from objects in real API servers: the host cluster
// with Argo CD's CRDs holds the job's Application, whose status the test writes as Argo CD's
// controller would; the tenant cluster with KubeVirt's CRDs holds the job's rendered VMs,
// claims and Secrets, and the VMIs and status KubeVirt's controllers would write (no VM runs
// here).
func TestStagesFromTheClusters(t *testing.T) {
	w, kc := world(t)
	const job = "mistral-small"
	assertStage := func(want lifecycle.Stage, reason string, gw *lifecycle.Rotation) {
		t.Helper()
		st := stage(t, kc, job, 1, gw)
		assert.Equal(t, want, st.Stage, st.Reason)
		assert.Contains(t, st.Reason, reason)
	}
	assertStage(lifecycle.StageSyncing, "no Argo CD Application for acme/mistral-small", nil)

	w.Sync(t, job)
	t0 := now()
	w.SetApplication(t, job, lifecycle.ApplicationStatus{Sync: lifecycle.SyncStatus{Status: lifecycle.SyncOutOfSync},
		Conditions: []lifecycle.ApplicationCondition{{Type: "ComparisonError", Message: "failed to fetch the repository", LastTransitionTime: &metav1.Time{Time: t0}}}})
	assertStage(lifecycle.StageSyncing, "Application acme-mistral-small is OutOfSync: ComparisonError: failed to fetch the repository", nil)

	w.SetApplication(t, job, lifecycletest.Synced(t0, "0123abcd"))
	w.ClaimEvent(t, "mistral-small-r0-n0-model-cache", "ProvisioningFailed", `storageclass.storage.k8s.io "fast" not found`)
	assertStage(lifecycle.StageWaitingForCapacity, `PersistentVolumeClaim mistral-small-r0-n0-model-cache is Pending: ProvisioningFailed: storageclass.storage.k8s.io "fast" not found`, nil)

	w.BindClaims(t, job)
	const vm = "mistral-small-r0-n0"
	w.PutVMI(t, vm, lifecycletest.All(lifecycletest.Phase(kubevirtv1.Scheduling, "", t0),
		lifecycletest.Condition("PodScheduled", corev1.ConditionFalse, "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/GH100_H100_SXM5_80GB.", t0)))
	assertStage(lifecycle.StageWaitingForCapacity, "not scheduled: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/GH100_H100_SXM5_80GB.", nil)

	w.PutVMI(t, vm, lifecycletest.All(lifecycletest.Phase(kubevirtv1.Scheduled, "gpu-node-3", t0),
		lifecycletest.Condition("PodScheduled", corev1.ConditionTrue, "", "", t0)))
	assertStage(lifecycle.StageBooting, "scheduled on gpu-node-3; the guest is starting", nil)

	w.PutVMI(t, vm, lifecycletest.All(lifecycletest.Phase(kubevirtv1.Running, "gpu-node-3", t0), lifecycletest.Interface("10.244.3.7"),
		lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "", "HTTP probe failed with statuscode: 503", t0)))
	assertStage(lifecycle.StageLoadingModel, "the model server's /health does not pass yet", nil)

	w.PutVMI(t, vm, lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "", t0))
	assertStage(lifecycle.StageLoadingModel, "the gateway could not be asked", nil)
	gw := &lifecycle.Rotation{Known: true, Status: "healthy", Ready: 1, Total: 1, InRotation: map[string]bool{vm: true}}
	assertStage(lifecycle.StageServing, "in the gateway's rotation", gw)
	st := stage(t, kc, job, 1, gw)
	assert.Equal(t, []lifecycle.NodeInfo{{VM: vm, Node: "gpu-node-3", Phase: "Running", IPs: []string{"10.244.3.7"}, Ready: true}}, st.Replicas[0].Nodes)
	assert.Equal(t, &lifecycle.AppSummary{Name: "acme-mistral-small", Sync: "Synced", Health: "Progressing", Revision: "0123abcd"}, st.Application)

	w.SetVMStatus(t, vm, kubevirtv1.VirtualMachineStatus{PrintableStatus: kubevirtv1.VirtualMachineStatusCrashLoopBackOff,
		Conditions: []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue,
			Reason: "CrashLoopBackOff", Message: "the VMI failed 5 times", LastTransitionTime: metav1.NewTime(t0)}}})
	assertStage(lifecycle.StageFailed, "VirtualMachine mistral-small-r0-n0 is CrashLoopBackOff: CrashLoopBackOff: the VMI failed 5 times", gw)

	failed := lifecycletest.Synced(t0, "0123abcd")
	failed.Sync.Status = lifecycle.SyncOutOfSync
	failed.OperationState.Phase, failed.OperationState.Message = lifecycle.PhaseFailed, `admission webhook "vm.inferplane.io" denied the request: 2 GPUs, master claims 1`
	w.SetApplication(t, job, failed)
	assertStage(lifecycle.StageFailed, `Argo CD sync failed: admission webhook "vm.inferplane.io" denied the request`, gw)
}

// Restart without KubeVirt's restart subresource (this API server has no virt-api, so the
// fallback is the path this test proves): it deletes the VMIs, of one replica or all, so that
// runStrategy Always recreates them; the VMs, the model-cache claims and the cloud-init
// Secrets stay.
func TestRestartDeletesVMIsKeepsStorage(t *testing.T) {
	w, kc := world(t)
	const job = "qwen3-32b"
	w.Sync(t, job)
	for _, vm := range []string{"qwen3-32b-r0-n0", "qwen3-32b-r1-n0"} {
		w.PutVMI(t, vm, lifecycletest.Phase(kubevirtv1.Running, "gpu-node-1", now()))
	}
	cfg, err := kc.Tenant(context.Background(), "acme", "acme")
	require.NoError(t, err)
	c := w.Cluster.Client
	exists := func(obj client.Object, name string) bool {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: "acme", Name: name}, obj)
		if apierrors.IsNotFound(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}

	done, err := cluster.Restart(context.Background(), cfg, acme, job, 1)
	require.NoError(t, err)
	assert.Equal(t, []cluster.Restarted{{VM: "qwen3-32b-r1-n0", How: cluster.ByDeletingVMI}}, done)
	assert.True(t, exists(&kubevirtv1.VirtualMachineInstance{}, "qwen3-32b-r0-n0"), "replica 0 is untouched")
	assert.False(t, exists(&kubevirtv1.VirtualMachineInstance{}, "qwen3-32b-r1-n0"))

	done, err = cluster.Restart(context.Background(), cfg, acme, job, -1)
	require.NoError(t, err)
	assert.Equal(t, []cluster.Restarted{{VM: "qwen3-32b-r0-n0", How: cluster.ByDeletingVMI}, {VM: "qwen3-32b-r1-n0", How: cluster.NotRunning}}, done)
	for _, r := range []string{"r0", "r1"} {
		assert.False(t, exists(&kubevirtv1.VirtualMachineInstance{}, "qwen3-32b-"+r+"-n0"))
		assert.True(t, exists(&kubevirtv1.VirtualMachine{}, "qwen3-32b-"+r+"-n0"), "the VM stays")
		assert.True(t, exists(&corev1.PersistentVolumeClaim{}, "qwen3-32b-"+r+"-n0-model-cache"), "the model cache stays")
		assert.True(t, exists(&corev1.Secret{}, "qwen3-32b-"+r+"-n0-cloud-init"), "the cloud-init Secret stays")
	}

	_, err = cluster.Restart(context.Background(), cfg, acme, job, 7)
	assert.ErrorContains(t, err, "no VirtualMachines of acme/qwen3-32b replica 7 in namespace acme: has Argo CD synced the job?")

	// A VM that deleting its VMI would leave stopped is not touched.
	var vm kubevirtv1.VirtualMachine
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "acme", Name: "qwen3-32b-r0-n0"}, &vm))
	halted := kubevirtv1.RunStrategyHalted
	vm.Spec.RunStrategy = &halted
	require.NoError(t, c.Update(context.Background(), &vm))
	w.PutVMI(t, "qwen3-32b-r1-n0", lifecycletest.Phase(kubevirtv1.Running, "gpu-node-1", now()))
	_, err = cluster.Restart(context.Background(), cfg, acme, job, -1)
	assert.ErrorContains(t, err, "VirtualMachine acme/qwen3-32b-r0-n0 has runStrategy Halted")
	assert.ErrorContains(t, err, "nothing was restarted")
	assert.True(t, exists(&kubevirtv1.VirtualMachineInstance{}, "qwen3-32b-r1-n0"))
}

// An unreachable cluster and a missing context are errors that name the cluster, its address
// and what to do.
func TestUnreachableCluster(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(kc, "host", map[string]*rest.Config{
		"host": {Host: "https://" + addr}, "acme": {Host: "https://" + addr}}))

	_, err = cluster.Read(context.Background(), cluster.Kubeconfig{Path: kc}, acme, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cluster of tenant acme (https://"+addr+"): list VirtualMachines in namespace acme")
	assert.Contains(t, err.Error(), "connection refused")

	_, err = cluster.Read(context.Background(), cluster.Kubeconfig{Path: kc, TenantContext: "vcluster_{tenant}"}, acme, false)
	assert.EqualError(t, err, `the cluster of tenant acme: no context "vcluster_acme" in kubeconfig `+kc+` (contexts: acme, host); name it with --tenant-context (e.g. '{tenant}' or 'vcluster_{tenant}_host')`)
	_, err = cluster.Read(context.Background(), cluster.Kubeconfig{Path: kc, HostContext: "mgmt"}, acme, true)
	assert.ErrorContains(t, err, `the host cluster: no context "mgmt" in kubeconfig`)
}

// standInForVirtAPI is a loopback proxy in front of the tenant's real API server that answers
// what KubeVirt's virt-api answers once aggregated into a real cluster's API server (it cannot
// run here): discovery of subresources.kubevirt.io/v1, and PUT .../virtualmachines/<vm>/restart,
// which it records and carries out as virt-api and virt-controller would, by replacing the VMI
// (here: deleting it). Every other request goes to the real API server.
func standInForVirtAPI(t *testing.T, real *rest.Config) (*rest.Config, *[]string) {
	t.Helper()
	target, err := url.Parse(real.Host)
	require.NoError(t, err)
	rt, err := rest.TransportFor(real)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = rt
	c, err := cluster.NewClient(real)
	require.NoError(t, err)
	var restarted []string
	var mu sync.Mutex
	restart := regexp.MustCompile(`^/apis/subresources.kubevirt.io/v1/namespaces/([^/]+)/virtualmachines/([^/]+)/restart$`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch m := restart.FindStringSubmatch(r.URL.Path); {
		case r.URL.Path == "/apis/subresources.kubevirt.io/v1":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(metav1.APIResourceList{
				TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "subresources.kubevirt.io/v1",
				APIResources: []metav1.APIResource{{Name: "virtualmachines/restart", Namespaced: true, Kind: "VirtualMachine", Verbs: []string{"update"}}}})
		case m != nil && r.Method == http.MethodPut:
			mu.Lock()
			restarted = append(restarted, m[1]+"/"+m[2])
			mu.Unlock()
			vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: m[1], Name: m[2]}}
			if err := c.Delete(r.Context(), vmi); err != nil && !apierrors.IsNotFound(err) {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, &restarted
}

// Where the cluster serves KubeVirt's restart subresource, restart uses it rather than
// deleting VMIs itself. The subresource is answered by our stand-in for virt-api (see
// standInForVirtAPI); listing the VMs goes through it to the real API server.
func TestRestartSubresourceThroughAStandInForVirtAPI(t *testing.T) {
	w, _ := world(t)
	const job = "transcribe"
	w.Sync(t, job)
	w.PutVMI(t, "transcribe-r0-n0", lifecycletest.Phase(kubevirtv1.Running, "gpu-node-2", now()))
	cfg, restarted := standInForVirtAPI(t, w.Cluster.Config)
	done, err := cluster.Restart(context.Background(), cfg, acme, job, -1)
	require.NoError(t, err)
	assert.Equal(t, []cluster.Restarted{{VM: "transcribe-r0-n0", How: cluster.BySubresource}}, done)
	assert.Equal(t, []string{"acme/transcribe-r0-n0"}, *restarted)
	err = w.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: "acme", Name: "transcribe-r0-n0"}, &kubevirtv1.VirtualMachineInstance{})
	assert.True(t, apierrors.IsNotFound(err), "the stand-in replaced the VMI: %v", err)
}

// Auto takes the kubeconfig's context of the tenant's cluster without reading the registry,
// goes to the registry only when that context is missing, and then gives both reasons.
func TestAutoPrefersTheKubeconfig(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "https://" + l.Addr().String()
	l.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(kc, "host", map[string]*rest.Config{"host": {Host: down}, "acme": {Host: "https://127.0.0.1:6443"}}))
	k := cluster.Kubeconfig{Path: kc}
	auto := cluster.Auto{Kubeconfig: k, Registry: &cluster.Registry{Kubeconfig: k}}

	cfg, err := auto.Tenant(context.Background(), "acme", "acme")
	require.NoError(t, err, "the host (and so the registry) is down, but acme's context is there")
	assert.Equal(t, "https://127.0.0.1:6443", cfg.Host)

	_, err = auto.Tenant(context.Background(), "globex", "globex")
	require.Error(t, err)
	for _, want := range []string{
		"the cluster of tenant globex is neither in the kubeconfig nor in the cluster registry:\n",
		`- kubeconfig: no context "globex" in kubeconfig ` + kc + " (contexts: acme, host)",
		"- cluster registry: host cluster (" + down + "): read the cluster registry: list Secrets in argocd:",
		"connection refused",
		`Fix either: add a context "globex" to the kubeconfig`,
	} {
		assert.Contains(t, err.Error(), want)
	}

	_, err = (&cluster.Registry{Kubeconfig: k, Options: registry.Options{ArgoCDNamespace: "Argo CD"}}).Tenant(context.Background(), "acme", "acme")
	assert.ErrorContains(t, err, `the cluster of tenant acme: cluster registry: argo CD namespace "Argo CD"`)
}
