package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Stage is how far a replica (or a job) is on its way to serving, in the order it passes
// them: syncing, waiting-for-capacity, booting, pulling-image, downloading-weights,
// loading-model, serving. Failed, crash-looping and unknown are off that road. The three
// stages between booting and serving come from what the inference agent in the VM reports
// (AgentReport); without a report a running VM is loading-model.
type Stage string

const (
	// StageFailed: Argo CD's sync failed, or a VM cannot start (image pull, crash loop, a
	// missing claim), with the reason.
	StageFailed Stage = "failed"
	// StageUnknown: the clusters could not be read.
	StageUnknown Stage = "unknown"
	// StageSyncing: the Application is not Synced yet (or does not exist), so the VMs may
	// not be there or may be old.
	StageSyncing Stage = "syncing"
	// StageWaitingForCapacity: the VM is not scheduled (no node with free GPUs of the node
	// type, the scheduler's reason) or its model-cache claim is not bound.
	StageWaitingForCapacity Stage = "waiting-for-capacity"
	// StageBooting: the VMI has a node and the guest is starting (image pull, boot, the
	// model server's container starting).
	StageBooting Stage = "booting"
	// StagePullingImage: the agent pulls the model server's image (bytes done and total).
	StagePullingImage Stage = "pulling-image"
	// StageDownloadingWeights: the model server downloads the weights into the model cache.
	StageDownloadingWeights Stage = "downloading-weights"
	// StageCrashLooping: the model server exited and the agent restarts it with a backoff
	// (the exit code, how long it ran, the restarts and its last line).
	StageCrashLooping Stage = "crash-looping"
	// StageLoadingModel: the VMI runs, but the model server's /health does not pass yet
	// (downloading and loading weights), or the gateway has not taken the replica in yet.
	StageLoadingModel Stage = "loading-model"
	// StageServing: the gateway sends the replica traffic.
	StageServing Stage = "serving"
)

// stageOrder ranks stages from least to most ready.
var stageOrder = []Stage{StageFailed, StageCrashLooping, StageUnknown, StageSyncing, StageWaitingForCapacity, StageBooting,
	StagePullingImage, StageDownloadingWeights, StageLoadingModel, StageServing}

// Stages are every stage, from least to most ready.
func Stages() []Stage { return slices.Clone(stageOrder) }

// Rank is the stage's place from least to most ready (-1 for a stage not among them).
func (s Stage) Rank() int { return slices.Index(stageOrder, s) }

// JobStatus is a job's stage, the least ready of its replicas', with what was read.
type JobStatus struct {
	Tenant string    `json:"tenant"`
	Job    string    `json:"job"`
	Stage  Stage     `json:"stage"`
	Since  time.Time `json:"since,omitzero"`
	Reason string    `json:"reason,omitempty"`
	// Application is the Argo CD Application's state; nil when there is none.
	Application *AppSummary `json:"application,omitempty"`
	// Gateway is the gateway's view of the endpoint; nil when it could not be asked.
	Gateway      *Rotation       `json:"gateway,omitempty"`
	GatewayError string          `json:"gatewayError,omitempty"`
	Replicas     []ReplicaStatus `json:"replicas"`
}

// AppSummary is what `jobs detail` shows of the Application.
type AppSummary struct {
	Name     string `json:"name"`
	Sync     string `json:"sync"`
	Health   string `json:"health,omitempty"`
	Revision string `json:"revision,omitempty"`
}

// ReplicaStatus is one replica: its stage, since when, why, and its nodes (VMs).
type ReplicaStatus struct {
	Replica int32      `json:"replica"`
	Stage   Stage      `json:"stage"`
	Since   time.Time  `json:"since,omitzero"`
	Reason  string     `json:"reason,omitempty"`
	Nodes   []NodeInfo `json:"nodes"`
}

// NodeInfo is one VM of a replica as its VMI reports it.
type NodeInfo struct {
	// VM is the VirtualMachine's name (<job>-r<replica>-n<rank>).
	VM string `json:"vm"`
	// Node is the Kubernetes node the VMI runs on (status.nodeName).
	Node  string   `json:"node,omitempty"`
	Phase string   `json:"phase,omitempty"`
	IPs   []string `json:"ips,omitempty"`
	Ready bool     `json:"ready"`
	// Agent is what the VM's inference agent last reported, when it was read.
	Agent *AgentReport `json:"agent,omitempty"`
}

// verdict is a stage with when it was entered and why.
type verdict struct {
	stage  Stage
	since  time.Time
	reason string
}

// Compute joins what was observed about a job into its stages. It reads nothing.
func Compute(j Job, o Observed) JobStatus {
	st := JobStatus{Tenant: j.Tenant, Job: j.Name, Gateway: o.Gateway, GatewayError: o.GatewayError, Replicas: []ReplicaStatus{}}
	if o.App != nil {
		st.Application = &AppSummary{Name: o.App.Name, Sync: o.App.Status.Sync.Status,
			Health: o.App.Status.Health.Status, Revision: o.App.Status.Sync.Revision}
	}
	app, appBlocks := applicationVerdict(j, o.App)
	idx := indexObserved(o)
	for r := range j.Replicas {
		rs := ReplicaStatus{Replica: r}
		for n := range max(j.NodesPerReplica, 1) {
			name := policy.VMName(j.Name, r, n)
			ni := nodeInfo(name, idx.vmis)
			ni.Agent = o.Agent[name]
			rs.Nodes = append(rs.Nodes, ni)
		}
		v := app
		if !appBlocks {
			v = replicaVerdict(j, r, idx, o)
		}
		rs.Stage, rs.Since, rs.Reason = v.stage, v.since, v.reason
		st.Replicas = append(st.Replicas, rs)
	}
	st.Stage, st.Since, st.Reason = jobVerdict(st.Replicas)
	return st
}

// jobVerdict is the least ready replica's stage; a job without replicas is only as far as
// its Application.
func jobVerdict(rs []ReplicaStatus) (Stage, time.Time, string) {
	if len(rs) == 0 {
		return StageUnknown, time.Time{}, "the job has no replicas"
	}
	worst := rs[0]
	for _, r := range rs[1:] {
		if r.Stage.Rank() < worst.Stage.Rank() {
			worst = r
		}
	}
	same := true
	for _, r := range rs {
		same = same && r.Stage == worst.Stage && r.Reason == worst.Reason
	}
	reason := worst.Reason
	switch {
	case same && worst.Stage != StageServing:
		// One cause for all (the Application, usually): no replica to name.
	case worst.Stage == StageServing && len(rs) > 1:
		reason = fmt.Sprintf("all %d replicas %s", len(rs), reason)
	case len(rs) > 1:
		reason = fmt.Sprintf("replica %d: %s", worst.Replica, reason)
	}
	return worst.Stage, worst.Since, reason
}

// applicationVerdict is the stage Argo CD holds every replica at: syncing while the
// Application is missing or not Synced, failed when its last sync failed. blocks is false
// once the Application is Synced, and the VMs decide.
func applicationVerdict(j Job, app *Application) (v verdict, blocks bool) {
	if app == nil {
		return verdict{stage: StageSyncing, reason: fmt.Sprintf(
			"no Argo CD Application for %s/%s in the host cluster yet (Argo CD creates it from the tenant repository's argocd/ folder once the commit is pulled)",
			j.Tenant, j.Name)}, true
	}
	s := &app.Status
	if op := s.OperationState; op != nil && (op.Phase == PhaseFailed || op.Phase == PhaseError) {
		since := op.StartedAt.Time
		if op.FinishedAt != nil {
			since = op.FinishedAt.Time
		}
		return verdict{stage: StageFailed, since: since, reason: "Argo CD sync " + strings.ToLower(op.Phase) + ": " + cmp.Or(op.Message, "-")}, true
	}
	if s.Sync.Status == SyncSynced {
		return verdict{}, false
	}
	v = verdict{stage: StageSyncing, reason: fmt.Sprintf("Application %s is %s", app.Name, cmp.Or(s.Sync.Status, "not compared yet"))}
	var msgs []string
	for _, c := range s.Conditions {
		msgs = append(msgs, c.Type+": "+c.Message)
		if c.LastTransitionTime != nil {
			v.since = later(v.since, c.LastTransitionTime.Time)
		}
	}
	if op := s.OperationState; op != nil {
		if op.Message != "" {
			msgs = append(msgs, op.Message)
		}
		v.since = later(v.since, op.StartedAt.Time)
	}
	if v.since.IsZero() && s.ReconciledAt != nil {
		v.since = s.ReconciledAt.Time
	}
	if len(msgs) > 0 {
		v.reason += ": " + strings.Join(msgs, "; ")
	}
	return v, true
}

// observedIndex holds the observed objects by name.
type observedIndex struct {
	vms    map[string]*kubevirtv1.VirtualMachine
	vmis   map[string]*kubevirtv1.VirtualMachineInstance
	pvcs   map[string]*corev1.PersistentVolumeClaim
	events map[string][]corev1.Event // by the PVC they are about
	agent  map[string]*AgentReport   // by VM
}

func indexObserved(o Observed) observedIndex {
	idx := observedIndex{vms: map[string]*kubevirtv1.VirtualMachine{}, vmis: map[string]*kubevirtv1.VirtualMachineInstance{},
		pvcs: map[string]*corev1.PersistentVolumeClaim{}, events: map[string][]corev1.Event{}, agent: o.Agent}
	for i := range o.VMs {
		idx.vms[o.VMs[i].Name] = &o.VMs[i]
	}
	for i := range o.VMIs {
		idx.vmis[o.VMIs[i].Name] = &o.VMIs[i]
	}
	for i := range o.PVCs {
		idx.pvcs[o.PVCs[i].Name] = &o.PVCs[i]
	}
	for _, e := range o.Events {
		if e.InvolvedObject.Kind == "PersistentVolumeClaim" {
			idx.events[e.InvolvedObject.Name] = append(idx.events[e.InvolvedObject.Name], e)
		}
	}
	return idx
}

func nodeInfo(vm string, vmis map[string]*kubevirtv1.VirtualMachineInstance) NodeInfo {
	n := NodeInfo{VM: vm}
	vmi, ok := vmis[vm]
	if !ok {
		return n
	}
	n.Node, n.Phase, n.Ready = vmi.Status.NodeName, string(vmi.Status.Phase), vmiReady(vmi)
	for _, iface := range vmi.Status.Interfaces {
		for _, ip := range append([]string{iface.IP}, iface.IPs...) {
			if ip != "" && !slices.Contains(n.IPs, ip) {
				n.IPs = append(n.IPs, ip)
			}
		}
	}
	return n
}

// replicaVerdict is the least ready of the replica's nodes; a replica whose every node is
// ready is serving once the gateway has it in rotation.
func replicaVerdict(j Job, r int32, idx observedIndex, o Observed) verdict {
	nodes := max(j.NodesPerReplica, 1)
	var worst *verdict
	for n := range nodes {
		name := policy.VMName(j.Name, r, n)
		// The head serves; so does every node of a data-parallel replica (its VM says so).
		serving := n == 0 || (idx.vms[name] != nil && idx.vms[name].Labels[v1alpha1.LabelServing] == v1alpha1.ServingValue)
		v := nodeVerdict(name, serving, idx)
		if nodes > 1 {
			v.reason = "node " + name + ": " + v.reason
		}
		if worst == nil || v.stage.Rank() < worst.stage.Rank() {
			worst = &v
		}
	}
	if worst.stage != StageServing {
		return *worst
	}
	return rotationVerdict(policy.VMName(j.Name, r, 0), *worst, o)
}

// rotationVerdict decides a replica that is ready in its cluster: serving when the gateway
// sends it traffic. The gateway names the replicas it uses when it can; otherwise its count
// of ready replicas must cover every replica that is ready in the cluster.
func rotationVerdict(head string, ready verdict, o Observed) verdict {
	g := o.Gateway
	waiting := verdict{stage: StageLoadingModel, since: ready.since}
	switch {
	case g == nil:
		waiting.reason = "/health passes in the cluster; the gateway could not be asked whether it sends traffic: " + cmp.Or(o.GatewayError, "no gateway configured")
		return waiting
	case !g.Known:
		waiting.reason = "/health passes in the cluster, but the gateway has no endpoint for the job yet"
		return waiting
	case g.InRotation != nil && g.InRotation[head]:
		return verdict{stage: StageServing, since: ready.since, reason: "in the gateway's rotation"}
	case g.InRotation != nil:
		waiting.reason = fmt.Sprintf("/health passes in the cluster, but the gateway's own probe has not taken the replica in yet (%d of %d replicas in rotation)", g.Ready, g.Total)
		return waiting
	}
	readyInCluster := 0
	for _, vmi := range o.VMIs {
		if vmi.Labels[v1alpha1.LabelServing] == v1alpha1.ServingValue && vmi.Status.Phase == kubevirtv1.Running && vmiReady(&vmi) {
			readyInCluster++
		}
	}
	if g.Ready > 0 && g.Ready >= readyInCluster {
		return verdict{stage: StageServing, since: ready.since, reason: fmt.Sprintf("in the gateway's rotation (%d of %d replicas)", g.Ready, g.Total)}
	}
	waiting.reason = fmt.Sprintf("/health passes in the cluster, but the gateway has %d of %d replicas in rotation", g.Ready, g.Total)
	return waiting
}

// nodeVerdict is one VM's stage. A node that is ready (a serving node's /health passes; a
// --headless worker runs) is reported as serving: the replica then asks the gateway.
func nodeVerdict(name string, serving bool, idx observedIndex) verdict {
	vm, vmi := idx.vms[name], idx.vmis[name]
	pvcName := name + "-model-cache"
	if vm == nil {
		return verdict{stage: StageSyncing, reason: "VirtualMachine " + name + " is not in the tenant cluster yet, though Argo CD reports the Application Synced"}
	}
	if v, ok := vmFailure(vm); ok {
		return v
	}
	if vmi == nil {
		if v, ok := pvcPending(idx.pvcs[pvcName], idx.events[pvcName]); ok {
			return v
		}
		return verdict{stage: StageWaitingForCapacity, since: vm.CreationTimestamp.Time,
			reason: fmt.Sprintf("VirtualMachine %s has no instance yet (%s)", name, cmp.Or(string(vm.Status.PrintableStatus), "no status yet"))}
	}
	switch vmi.Status.Phase {
	case kubevirtv1.VmPhaseUnset, kubevirtv1.Pending, kubevirtv1.Scheduling:
		if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c != nil && c.Status == corev1.ConditionFalse {
			return verdict{stage: StageWaitingForCapacity, since: c.LastTransitionTime.Time,
				reason: "not scheduled: " + joinNonEmpty(": ", c.Reason, c.Message)}
		}
		if v, ok := pvcPending(idx.pvcs[pvcName], idx.events[pvcName]); ok {
			return v
		}
		return verdict{stage: StageWaitingForCapacity, since: phaseSince(vmi, vmi.Status.Phase, vmi.CreationTimestamp.Time),
			reason: "waiting for a node with free GPUs of the node type (VMI " + cmp.Or(string(vmi.Status.Phase), "Pending") + ")"}
	case kubevirtv1.Scheduled:
		return verdict{stage: StageBooting, since: phaseSince(vmi, kubevirtv1.Scheduled, vmi.CreationTimestamp.Time),
			reason: "scheduled on " + cmp.Or(vmi.Status.NodeName, "a node") + "; the guest is starting"}
	case kubevirtv1.Running:
		return runningVerdict(name, vmi, serving, idx.agent[name])
	case kubevirtv1.Failed:
		return verdict{stage: StageFailed, since: phaseSince(vmi, kubevirtv1.Failed, vmi.CreationTimestamp.Time),
			reason: "VMI " + name + " failed" + conditionText(vmi) + "; runStrategy Always starts a new one"}
	case kubevirtv1.Succeeded:
		return verdict{stage: StageFailed, since: phaseSince(vmi, kubevirtv1.Succeeded, vmi.CreationTimestamp.Time),
			reason: "the guest of " + name + " shut down; runStrategy Always starts a new one"}
	default:
		return verdict{stage: StageFailed, since: phaseSince(vmi, vmi.Status.Phase, vmi.CreationTimestamp.Time),
			reason: fmt.Sprintf("VMI %s is %s (its node %s may be lost)", name, vmi.Status.Phase, cmp.Or(vmi.Status.NodeName, "-"))}
	}
}

// runningVerdict is a running VM's stage: its agent's report when it has one that says more
// than the VMI (a crash loop always does); otherwise serving once /health passes (a serving
// node) or at once (a --headless worker), else loading-model.
func runningVerdict(name string, vmi *kubevirtv1.VirtualMachineInstance, serving bool, rep *AgentReport) verdict {
	since := phaseSince(vmi, kubevirtv1.Running, vmi.CreationTimestamp.Time)
	ready := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
	isReady := ready != nil && ready.Status == corev1.ConditionTrue
	if rep != nil && (rep.Status.Stage == guestlog.StageCrashLooping || (!isReady && rep.Status.Stage != guestlog.StageServing)) {
		if v, ok := agentVerdict(rep, vmi.Status.NodeName); ok {
			return v
		}
	}
	switch {
	case !serving:
		return verdict{stage: StageServing, since: since, reason: "running on " + vmi.Status.NodeName}
	case isReady:
		return verdict{stage: StageServing, since: ready.LastTransitionTime.Time, reason: "/health passes"}
	}
	reason := "running on " + vmi.Status.NodeName + "; the model server's /health does not pass yet (downloading and loading the weights)"
	if rep != nil && rep.Status.Stage == guestlog.StageServing {
		reason = "running on " + vmi.Status.NodeName + "; the agent says the model server is up, but /health does not pass yet"
	}
	if ready != nil && ready.Message != "" {
		reason += ": " + ready.Message
	}
	return verdict{stage: StageLoadingModel, since: since, reason: reason}
}

// vmFailure reads the VM's printable status for the failures KubeVirt reports there.
func vmFailure(vm *kubevirtv1.VirtualMachine) (verdict, bool) {
	switch ps := vm.Status.PrintableStatus; ps {
	case kubevirtv1.VirtualMachineStatusCrashLoopBackOff, kubevirtv1.VirtualMachineStatusErrImagePull,
		kubevirtv1.VirtualMachineStatusImagePullBackOff, kubevirtv1.VirtualMachineStatusPvcNotFound,
		kubevirtv1.VirtualMachineStatusDataVolumeError:
		v := verdict{stage: StageFailed, since: vm.CreationTimestamp.Time, reason: "VirtualMachine " + vm.Name + " is " + string(ps)}
		for _, c := range vm.Status.Conditions {
			if c.Type == kubevirtv1.VirtualMachineFailure && c.Status == corev1.ConditionTrue {
				v.reason += ": " + joinNonEmpty(": ", c.Reason, c.Message)
				v.since = c.LastTransitionTime.Time
			}
		}
		return v, true
	case kubevirtv1.VirtualMachineStatusStopped:
		return verdict{stage: StageFailed, since: vm.CreationTimestamp.Time,
			reason: "VirtualMachine " + vm.Name + " is Stopped (runStrategy " + runStrategyOf(vm) + "); the generator renders runStrategy Always"}, true
	}
	return verdict{}, false
}

// pvcPending says why a model-cache claim is not bound, from its latest event.
func pvcPending(pvc *corev1.PersistentVolumeClaim, events []corev1.Event) (verdict, bool) {
	if pvc == nil || pvc.Status.Phase == corev1.ClaimBound {
		return verdict{}, false
	}
	v := verdict{stage: StageWaitingForCapacity, since: pvc.CreationTimestamp.Time,
		reason: "PersistentVolumeClaim " + pvc.Name + " is " + cmp.Or(string(pvc.Status.Phase), "Pending")}
	var last *corev1.Event
	for i := range events {
		if last == nil || eventTime(events[i]).After(eventTime(*last)) {
			last = &events[i]
		}
	}
	if last != nil {
		v.reason += ": " + joinNonEmpty(": ", last.Reason, last.Message)
	}
	return v, true
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func vmiReady(vmi *kubevirtv1.VirtualMachineInstance) bool {
	c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) *kubevirtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

// conditionText is ": reason: message" of the VMI's first false or failure condition.
func conditionText(vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, c := range vmi.Status.Conditions {
		if c.Status == corev1.ConditionFalse && (c.Reason != "" || c.Message != "") {
			return ": " + joinNonEmpty(": ", c.Reason, c.Message)
		}
	}
	if vmi.Status.Reason != "" {
		return ": " + vmi.Status.Reason
	}
	return ""
}

// phaseSince is when the VMI entered phase, by KubeVirt's phaseTransitionTimestamps.
func phaseSince(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, otherwise time.Time) time.Time {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == phase {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return otherwise
}

func runStrategyOf(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.RunStrategy == nil {
		return "unset"
	}
	return string(*vm.Spec.RunStrategy)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}
