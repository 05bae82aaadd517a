package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

var (
	t0 = time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
	t2 = t0.Add(2 * time.Minute)
	t3 = t0.Add(3 * time.Minute)
)

func mt(t time.Time) metav1.Time { return metav1.NewTime(t) }

func synced() *Application {
	return &Application{ObjectMeta: metav1.ObjectMeta{Name: "acme-chat"}, Status: ApplicationStatus{
		Sync: SyncStatus{Status: SyncSynced, Revision: "abc123"}, Health: HealthStatus{Status: HealthProgressing},
		OperationState: &OperationState{Phase: PhaseSucceeded, StartedAt: mt(t0)},
	}}
}

func vm(name string, ps kubevirtv1.VirtualMachinePrintableStatus) kubevirtv1.VirtualMachine {
	always := kubevirtv1.RunStrategyAlways
	return kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: mt(t0)},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &always},
		Status:     kubevirtv1.VirtualMachineStatus{PrintableStatus: ps},
	}
}

func vmi(name string, head bool, phase kubevirtv1.VirtualMachineInstancePhase, conds ...kubevirtv1.VirtualMachineInstanceCondition) kubevirtv1.VirtualMachineInstance {
	labels := map[string]string{v1alpha1.LabelRole: v1alpha1.RoleWorker}
	if head {
		labels = map[string]string{v1alpha1.LabelRole: v1alpha1.RoleHead, v1alpha1.LabelServing: v1alpha1.ServingValue}
	}
	v := kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: mt(t0), Labels: labels},
		Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase, Conditions: conds,
			PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
				{Phase: kubevirtv1.Pending, PhaseTransitionTimestamp: mt(t0)},
			}},
	}
	if phase == kubevirtv1.Scheduled || phase == kubevirtv1.Running || phase == kubevirtv1.Failed {
		v.Status.NodeName = "gpu-node-7"
		v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
			kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: kubevirtv1.Scheduled, PhaseTransitionTimestamp: mt(t1)})
	}
	if phase == kubevirtv1.Running || phase == kubevirtv1.Failed {
		v.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.7", IPs: []string{"10.0.0.7", "fd00::7"}}}
		v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
			kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: mt(t2)})
	}
	return v
}

func cond(t kubevirtv1.VirtualMachineInstanceConditionType, s corev1.ConditionStatus, reason, msg string, at time.Time) kubevirtv1.VirtualMachineInstanceCondition {
	return kubevirtv1.VirtualMachineInstanceCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: mt(at)}
}

func pvc(name string, phase corev1.PersistentVolumeClaimPhase) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: mt(t0)},
		Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
}

var (
	ready      = cond(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "", t3)
	notReady   = cond(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "", "HTTP probe failed with statuscode: 503", t2)
	inRotation = &Rotation{Known: true, Status: "healthy", Ready: 1, Total: 1, InRotation: map[string]bool{"chat-r0-n0": true}}
)

// The stages of a one-replica, one-node job, each from the objects Argo CD and KubeVirt's
// controllers would have written, with its reason and the time it was entered.
func TestComputeStages(t *testing.T) {
	job := Job{Tenant: "acme", Name: "chat", Replicas: 1, NodesPerReplica: 1}
	running := func(c ...kubevirtv1.VirtualMachineInstanceCondition) []kubevirtv1.VirtualMachineInstance {
		return []kubevirtv1.VirtualMachineInstance{vmi("chat-r0-n0", true, kubevirtv1.Running, c...)}
	}
	vms := []kubevirtv1.VirtualMachine{vm("chat-r0-n0", kubevirtv1.VirtualMachineStatusRunning)}
	bound := []corev1.PersistentVolumeClaim{pvc("chat-r0-n0-model-cache", corev1.ClaimBound)}
	cases := []struct {
		name   string
		obs    Observed
		stage  Stage
		since  time.Time
		reason string
	}{
		{name: "no application yet", obs: Observed{},
			stage: StageSyncing, reason: "no Argo CD Application for acme/chat"},
		{name: "application out of sync with Argo CD's message", obs: Observed{App: &Application{
			ObjectMeta: metav1.ObjectMeta{Name: "acme-chat"},
			Status: ApplicationStatus{Sync: SyncStatus{Status: SyncOutOfSync}, Conditions: []ApplicationCondition{
				{Type: "ComparisonError", Message: "rpc error: repository not found", LastTransitionTime: &metav1.Time{Time: t1}}}},
		}}, stage: StageSyncing, since: t1, reason: "Application acme-chat is OutOfSync: ComparisonError: rpc error: repository not found"},
		{name: "sync running", obs: Observed{App: &Application{ObjectMeta: metav1.ObjectMeta{Name: "acme-chat"}, Status: ApplicationStatus{
			Sync: SyncStatus{Status: SyncOutOfSync}, OperationState: &OperationState{Phase: PhaseRunning, Message: "waiting for healthy state of /Secret/x", StartedAt: mt(t2)},
		}}}, stage: StageSyncing, since: t2, reason: "waiting for healthy state of /Secret/x"},
		{name: "sync failed", obs: Observed{App: &Application{ObjectMeta: metav1.ObjectMeta{Name: "acme-chat"}, Status: ApplicationStatus{
			Sync: SyncStatus{Status: SyncOutOfSync}, OperationState: &OperationState{Phase: PhaseFailed, StartedAt: mt(t1), FinishedAt: &metav1.Time{Time: t2},
				Message: `one or more objects failed to apply, reason: admission webhook "vm.inferplane.io" denied the request`},
		}}}, stage: StageFailed, since: t2, reason: `Argo CD sync failed: one or more objects failed to apply, reason: admission webhook "vm.inferplane.io" denied`},
		{name: "synced but the VM is not there", obs: Observed{App: synced()},
			stage: StageSyncing, reason: "VirtualMachine chat-r0-n0 is not in the tenant cluster yet"},
		{name: "claim not bound", obs: Observed{App: synced(), VMs: vms,
			PVCs: []corev1.PersistentVolumeClaim{pvc("chat-r0-n0-model-cache", corev1.ClaimPending)},
			Events: []corev1.Event{
				{InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Name: "chat-r0-n0-model-cache"}, Reason: "WaitForFirstConsumer", Message: "waiting for first consumer", LastTimestamp: mt(t1)},
				{InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Name: "chat-r0-n0-model-cache"}, Reason: "ProvisioningFailed", Message: "storageclass \"fast\" not found", LastTimestamp: mt(t2)},
			}}, stage: StageWaitingForCapacity, since: t0,
			reason: `PersistentVolumeClaim chat-r0-n0-model-cache is Pending: ProvisioningFailed: storageclass "fast" not found`},
		{name: "unschedulable, with the scheduler's reason", obs: Observed{App: synced(), VMs: vms, PVCs: bound,
			VMIs: []kubevirtv1.VirtualMachineInstance{vmi("chat-r0-n0", true, kubevirtv1.Scheduling,
				cond("PodScheduled", corev1.ConditionFalse, "Unschedulable", "0/4 nodes are available: 4 Insufficient nvidia.com/GH100_H100_SXM5_80GB.", t1))}},
			stage: StageWaitingForCapacity, since: t1,
			reason: "not scheduled: Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/GH100_H100_SXM5_80GB."},
		{name: "no VMI yet", obs: Observed{App: synced(), VMs: []kubevirtv1.VirtualMachine{vm("chat-r0-n0", kubevirtv1.VirtualMachineStatusProvisioning)}, PVCs: bound},
			stage: StageWaitingForCapacity, since: t0, reason: "VirtualMachine chat-r0-n0 has no instance yet (Provisioning)"},
		{name: "booting", obs: Observed{App: synced(), VMs: vms, PVCs: bound,
			VMIs: []kubevirtv1.VirtualMachineInstance{vmi("chat-r0-n0", true, kubevirtv1.Scheduled)}},
			stage: StageBooting, since: t1, reason: "scheduled on gpu-node-7; the guest is starting"},
		{name: "loading the model", obs: Observed{App: synced(), VMs: vms, PVCs: bound, VMIs: running(notReady)},
			stage: StageLoadingModel, since: t2, reason: "/health does not pass yet (downloading and loading the weights): HTTP probe failed with statuscode: 503"},
		{name: "ready, not in the gateway yet", obs: Observed{App: synced(), VMs: vms, PVCs: bound, VMIs: running(ready),
			Gateway: &Rotation{Known: true, Status: "unavailable", Total: 1, InRotation: map[string]bool{}}},
			stage: StageLoadingModel, since: t3, reason: "the gateway's own probe has not taken the replica in yet (0 of 1 replicas in rotation)"},
		{name: "ready, gateway unknown", obs: Observed{App: synced(), VMs: vms, PVCs: bound, VMIs: running(ready), GatewayError: "connection refused"},
			stage: StageLoadingModel, since: t3, reason: "could not be asked whether it sends traffic: connection refused"},
		{name: "ready, endpoint unknown to the gateway", obs: Observed{App: synced(), VMs: vms, PVCs: bound, VMIs: running(ready), Gateway: &Rotation{}},
			stage: StageLoadingModel, reason: "the gateway has no endpoint for the job yet"},
		{name: "serving", obs: Observed{App: synced(), VMs: vms, PVCs: bound, VMIs: running(ready), Gateway: inRotation},
			stage: StageServing, since: t3, reason: "in the gateway's rotation"},
		{name: "serving by the gateway's count", obs: Observed{App: synced(), VMs: vms, PVCs: bound, VMIs: running(ready),
			Gateway: &Rotation{Known: true, Ready: 1, Total: 1}}, stage: StageServing, reason: "in the gateway's rotation (1 of 1 replicas)"},
		{name: "image pull failure", obs: Observed{App: synced(), PVCs: bound, VMs: []kubevirtv1.VirtualMachine{func() kubevirtv1.VirtualMachine {
			v := vm("chat-r0-n0", kubevirtv1.VirtualMachineStatusImagePullBackOff)
			v.Status.Conditions = []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue,
				Reason: "ImagePullBackOff", Message: "Back-off pulling image ghcr.io/inferplane/gpu-guest:ubuntu-24.04", LastTransitionTime: mt(t2)}}
			return v
		}()}}, stage: StageFailed, since: t2, reason: "VirtualMachine chat-r0-n0 is ImagePullBackOff: ImagePullBackOff: Back-off pulling image"},
		{name: "VMI failed", obs: Observed{App: synced(), VMs: vms, PVCs: bound,
			VMIs: []kubevirtv1.VirtualMachineInstance{vmi("chat-r0-n0", true, kubevirtv1.Failed,
				cond("Ready", corev1.ConditionFalse, "GuestNotRunning", "the guest crashed", t2))}},
			stage: StageFailed, since: t2, reason: "VMI chat-r0-n0 failed: GuestNotRunning: the guest crashed"},
		{name: "VM stopped", obs: Observed{App: synced(), PVCs: bound, VMs: []kubevirtv1.VirtualMachine{vm("chat-r0-n0", kubevirtv1.VirtualMachineStatusStopped)}},
			stage: StageFailed, reason: "VirtualMachine chat-r0-n0 is Stopped (runStrategy Always)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Compute(job, tc.obs)
			assert.Equal(t, tc.stage, st.Stage, st.Reason)
			assert.Contains(t, st.Reason, tc.reason)
			if !tc.since.IsZero() {
				assert.Equal(t, tc.since, st.Since.UTC())
			}
			if assert.Len(t, st.Replicas, 1) {
				assert.Equal(t, st.Stage, st.Replicas[0].Stage)
				assert.Len(t, st.Replicas[0].Nodes, 1)
			}
		})
	}
}

// A job is as ready as its least ready replica; a multi-node replica as its least ready node,
// and its --headless workers need only run (the head alone serves /health).
func TestComputeLeastReady(t *testing.T) {
	job := Job{Tenant: "acme", Name: "chat", Replicas: 2, NodesPerReplica: 2}
	obs := Observed{App: synced(), Gateway: &Rotation{Known: true, Ready: 1, Total: 2, InRotation: map[string]bool{"chat-r0-n0": true}}}
	for _, name := range []string{"chat-r0-n0", "chat-r0-n1", "chat-r1-n0", "chat-r1-n1"} {
		obs.VMs = append(obs.VMs, vm(name, kubevirtv1.VirtualMachineStatusRunning))
		obs.PVCs = append(obs.PVCs, pvc(name+"-model-cache", corev1.ClaimBound))
	}
	obs.VMIs = []kubevirtv1.VirtualMachineInstance{
		vmi("chat-r0-n0", true, kubevirtv1.Running, ready),
		vmi("chat-r0-n1", false, kubevirtv1.Running),
		vmi("chat-r1-n0", true, kubevirtv1.Running, ready),
		vmi("chat-r1-n1", false, kubevirtv1.Scheduled),
	}
	st := Compute(job, obs)
	assert.Equal(t, StageServing, st.Replicas[0].Stage, st.Replicas[0].Reason)
	assert.Equal(t, StageBooting, st.Replicas[1].Stage)
	assert.Equal(t, "node chat-r1-n1: scheduled on gpu-node-7; the guest is starting", st.Replicas[1].Reason)
	assert.Equal(t, StageBooting, st.Stage)
	assert.Equal(t, "replica 1: node chat-r1-n1: scheduled on gpu-node-7; the guest is starting", st.Reason)
	assert.Equal(t, []NodeInfo{
		{VM: "chat-r0-n0", Node: "gpu-node-7", Phase: "Running", IPs: []string{"10.0.0.7", "fd00::7"}, Ready: true},
		{VM: "chat-r0-n1", Node: "gpu-node-7", Phase: "Running", IPs: []string{"10.0.0.7", "fd00::7"}},
	}, st.Replicas[0].Nodes)
	assert.Equal(t, &AppSummary{Name: "acme-chat", Sync: SyncSynced, Health: HealthProgressing, Revision: "abc123"}, st.Application)

	// Without names from the gateway, its count must cover the replicas ready in the cluster.
	obs.VMIs[3] = vmi("chat-r1-n1", false, kubevirtv1.Running)
	obs.Gateway = &Rotation{Known: true, Ready: 1, Total: 2}
	st = Compute(job, obs)
	assert.Equal(t, StageLoadingModel, st.Stage)
	assert.Contains(t, st.Reason, "the gateway has 1 of 2 replicas in rotation")
	obs.Gateway.Ready = 2
	assert.Equal(t, StageServing, Compute(job, obs).Stage)
}

// Every node of a data-parallel replica serves (label inferplane.io/serving): each must pass
// /health, not only run.
func TestComputeDataParallelNodesServe(t *testing.T) {
	job := Job{Tenant: "acme", Name: "dep", Replicas: 1, NodesPerReplica: 2}
	obs := Observed{App: synced(), Gateway: &Rotation{Known: true, Ready: 1, Total: 2, InRotation: map[string]bool{"dep-r0-n0": true}}}
	for _, name := range []string{"dep-r0-n0", "dep-r0-n1"} {
		v := vm(name, kubevirtv1.VirtualMachineStatusRunning)
		v.Labels = map[string]string{v1alpha1.LabelServing: v1alpha1.ServingValue}
		obs.VMs = append(obs.VMs, v)
		obs.PVCs = append(obs.PVCs, pvc(name+"-model-cache", corev1.ClaimBound))
	}
	worker := vmi("dep-r0-n1", true, kubevirtv1.Running)
	obs.VMIs = []kubevirtv1.VirtualMachineInstance{vmi("dep-r0-n0", true, kubevirtv1.Running, ready), worker}
	st := Compute(job, obs)
	assert.Equal(t, StageLoadingModel, st.Stage)
	assert.Contains(t, st.Reason, "node dep-r0-n1: running on gpu-node-7; the model server's /health does not pass yet")

	obs.VMIs[1] = vmi("dep-r0-n1", true, kubevirtv1.Running, ready)
	assert.Equal(t, StageServing, Compute(job, obs).Stage)
}

// A cause all replicas share (the Application) is told once, without a replica number.
func TestComputeSharedReason(t *testing.T) {
	st := Compute(Job{Tenant: "acme", Name: "chat", Replicas: 3, NodesPerReplica: 1}, Observed{})
	assert.Equal(t, StageSyncing, st.Stage)
	assert.True(t, strings.HasPrefix(st.Reason, "no Argo CD Application for acme/chat"), st.Reason)
	assert.Len(t, st.Replicas, 3)
}

func TestStageOrder(t *testing.T) {
	assert.Equal(t, []Stage{"failed", "crash-looping", "unknown", "syncing", "waiting-for-capacity", "booting",
		"pulling-image", "downloading-weights", "loading-model", "serving"}, Stages())
	assert.Less(t, StageBooting.Rank(), StageServing.Rank())
	assert.Equal(t, -1, Stage("nope").Rank())
}
