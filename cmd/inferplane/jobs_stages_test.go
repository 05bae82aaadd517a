package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/lifecycletest"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/lifecycle"
)

// runLine runs one command line in-process (words split on spaces; a double-quoted word
// keeps its spaces), returning stdout and stderr together.
func runLine(t *testing.T, line string) (string, error) {
	t.Helper()
	var args []string
	for i, part := range strings.Split(line, `"`) {
		if i%2 == 1 {
			args = append(args, part)
		} else {
			args = append(args, strings.Fields(part)...)
		}
	}
	require.Equal(t, "inferplane", args[0], line)
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(args[1:])
	err := root.ExecuteContext(context.Background())
	t.Logf("$ %s\n%s", line, apiKeyRE.ReplaceAllString(out.String(), "ipk_<redacted>"))
	return out.String(), err
}

// TestJobsThroughEveryStage follows one job with the commands of README's walkthrough from jobs
// create to jobs delete against a host and a tenant API server (real kube-apiservers; the test
// writes the Application status Argo CD's controller would write, and the VMIs and status
// KubeVirt's controllers would write, since neither runs here), the real gateway (`xds
// serve`, watching the tenant cluster's VMIs and probing the replicas) and, in front of it, our
// stand-in for Envoy (e2e/envoystandin; no Envoy binary here) calling its real key check. The
// replicas are replica doubles (no GPU or model here). `jobs detail` is run at every readiness
// stage, with the reason each shows. (TestREADMEWalkthrough runs README itself, in a shell.)
func TestJobsThroughEveryStage(t *testing.T) {
	host, tenant := clusters.Get(t, "host"), clusters.Get(t, "tenant")
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "tenants"), os.DirFS("../../tenants")))
	recipes, err := filepath.Abs("../../recipes")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(recipes, filepath.Join(dir, "recipes")))
	kc, tenantKC := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "tenant.kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(kc, "host", map[string]*rest.Config{"host": host.Config, "acme": tenant.Config}))
	require.NoError(t, kubeenv.WriteKubeconfig(tenantKC, "acme", map[string]*rest.Config{"acme": tenant.Config}))
	secret := writeKeySecret(t)
	const domain = "models.example.com"
	admin, grpcAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := startServe(t, ctx, admin, "--source", "kube", "--kubeconfig", tenantKC, "--domain", domain,
		"--grpc-address", grpcAddr, "--admin-address", admin, "--log-level", "warn",
		"--keys-file", filepath.Join(dir, "keys.db"), "--secret-file", secret, "--probe-interval", "100ms", "--probe-timeout", "100ms")
	t.Cleanup(func() { cancel(); _ = waitServe(t, done) })
	for k, v := range map[string]string{"KUBECONFIG": kc, "INFERPLANE_KEYS_SECRET_FILE": secret, "INFERPLANE_KEYS_FILE": filepath.Join(dir, "keys.db"),
		"INFERPLANE_GATEWAY": startEnvoyStandIn(t, "http://"+admin, grpcAddr), "INFERPLANE_DOMAIN": domain, "INFERPLANE_SERVER": "http://" + admin} {
		t.Setenv(k, v)
	}
	t.Chdir(dir)

	w := &lifecycletest.World{Host: host, Cluster: tenant, Repo: filepath.Join(dir, "out", "acme"), Tenant: "acme"}
	var doubles []*replicadouble.Double
	for r := range 2 {
		d, err := replicadouble.Start(replicadouble.Options{Name: "chat-r" + strconv.Itoa(r), Model: "Qwen/Qwen3-32B"})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		doubles = append(doubles, d)
	}
	run := func(line string) string {
		t.Helper()
		out, err := runLine(t, line)
		require.NoError(t, err, out)
		return out
	}

	out := run("inferplane jobs create acme/chat --model Qwen/Qwen3-32B --replicas 2")
	assert.Contains(t, out, "acme: created (")
	assert.FileExists(t, filepath.Join(w.Repo, "jobs", "chat", "r1-n0-vm.yaml"))
	run("inferplane keys create --tenant acme --endpoint chat --file acme-chat.key")
	detailThroughStages(t, w, doubles, "inferplane jobs detail acme/chat")
	var chat string
	require.Eventually(t, func() bool { // the gateway's file sync picks the new key up
		o, err := runLine(t, `inferplane chat chat.acme "Write a haiku about GPUs" --api-key-file acme-chat.key`)
		chat = o
		return err == nil
	}, 10*time.Second, 200*time.Millisecond)
	assert.Regexp(t, `^Replica chat-r[01] heard: Write a haiku about GPUs\n`, chat)

	out = run("inferplane jobs restart acme/chat --replica 1")
	assert.Contains(t, out, "acme/chat: chat-r1-n0: deleted the VMI")
	c := w.Cluster.Client
	err = c.Get(context.Background(), client.ObjectKey{Namespace: "acme", Name: "chat-r1-n0"}, &kubevirtv1.VirtualMachineInstance{})
	assert.True(t, apierrors.IsNotFound(err))
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "acme", Name: "chat-r1-n0-model-cache"}, &corev1.PersistentVolumeClaim{}))

	out = run("inferplane jobs delete acme/chat --yes --revoke-keys")
	assert.Contains(t, out, "its prune deletes Application acme-chat")
	assert.Regexp(t, `revoked [0-9a-f]{16} \(tenant acme\)`, out)
	assert.NoFileExists(t, filepath.Join("tenants", "acme", "jobs", "chat.yaml"))
	assert.NoDirExists(t, filepath.Join(w.Repo, "jobs", "chat"))
}

// detailThroughStages runs the README's `jobs detail` line at each readiness stage, moving the
// world on in between as Argo CD, the scheduler and KubeVirt would.
func detailThroughStages(t *testing.T, w *lifecycletest.World, doubles []*replicadouble.Double, line string) {
	detail := func(want lifecycle.Stage, code int, reason string) string {
		t.Helper()
		out, err := runLine(t, line)
		assert.Equal(t, code, exitCode(err), "%v\n%s", err, out)
		assert.Contains(t, out, "Stage:      "+string(want), out)
		assert.Contains(t, out, reason)
		return out
	}
	now := time.Now().UTC().Truncate(time.Second)
	vms := []string{"chat-r0-n0", "chat-r1-n0"}
	each := func(set func(i int) func(*kubevirtv1.VirtualMachineInstance)) {
		for i, vm := range vms {
			w.PutVMI(t, vm, set(i))
		}
	}

	detail(lifecycle.StageSyncing, 3, "no Argo CD Application for acme/chat in the host cluster yet")
	w.Sync(t, "chat")
	w.SetApplication(t, "chat", lifecycle.ApplicationStatus{Sync: lifecycle.SyncStatus{Status: lifecycle.SyncOutOfSync},
		OperationState: &lifecycle.OperationState{Phase: lifecycle.PhaseRunning, StartedAt: metav1.NewTime(now),
			Message: "waiting for healthy state of /PersistentVolumeClaim/chat-r0-n0-model-cache"}})
	detail(lifecycle.StageSyncing, 3, "Application acme-chat is OutOfSync: waiting for healthy state of /PersistentVolumeClaim/chat-r0-n0-model-cache")

	w.SetApplication(t, "chat", lifecycletest.Synced(now, "5d41402abc4b"))
	w.ClaimEvent(t, "chat-r0-n0-model-cache", "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
	detail(lifecycle.StageWaitingForCapacity, 3, "PersistentVolumeClaim chat-r0-n0-model-cache is Pending: WaitForFirstConsumer")
	w.BindClaims(t, "chat")
	each(func(int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.All(lifecycletest.Phase(kubevirtv1.Scheduling, "", now),
			lifecycletest.Condition("PodScheduled", corev1.ConditionFalse, "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/GH100_H100_SXM5_80GB.", now))
	})
	detail(lifecycle.StageWaitingForCapacity, 3, "not scheduled: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/GH100_H100_SXM5_80GB.")

	nodes := []string{"gpu-h100-07", "gpu-h100-12"}
	each(func(i int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.All(lifecycletest.Phase(kubevirtv1.Scheduled, nodes[i], now),
			lifecycletest.Condition("PodScheduled", corev1.ConditionTrue, "", "", now))
	})
	detail(lifecycle.StageBooting, 3, "scheduled on gpu-h100-07; the guest is starting")

	// The replicas' model servers are the doubles: their address and port are what the VMIs
	// report, as virt-handler reports the guest's pod-network address.
	each(func(i int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.All(lifecycletest.Phase(kubevirtv1.Running, nodes[i], now), lifecycletest.Interface(doubles[i].Host()),
			lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "", "HTTP probe failed with statuscode: 503", now),
			func(v *kubevirtv1.VirtualMachineInstance) {
				v.Annotations[v1alpha1.AnnotationServingPort] = strconv.Itoa(doubles[i].Port())
			})
	})
	detail(lifecycle.StageLoadingModel, 3, "the model server's /health does not pass yet (downloading and loading the weights): HTTP probe failed with statuscode: 503")

	each(func(int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "", now)
	})
	var out string
	require.Eventually(t, func() bool { // the gateway's own probes take the replicas in
		o, err := runLine(t, line)
		out = o
		return err == nil
	}, 20*time.Second, 200*time.Millisecond)
	assert.Contains(t, out, "Stage:      serving")
	assert.Contains(t, out, "Endpoint:   https://chat.acme.models.example.com (API key required)")
	assert.Contains(t, out, "Gateway:    healthy, 2 of 2 replicas in rotation")
	assert.Regexp(t, `1\s+serving\s+\S+\s+1\s+gpu-h100-12\s+Running\s+127\.0\.0\.1\s+in the gateway's rotation`, out)
}
