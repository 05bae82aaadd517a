// Package metering counts what a tenant is billed for: the GPU-seconds each of its VMs holds
// GPUs (from the phases of its KubeVirt VirtualMachineInstances, watched in every tenant
// cluster) and the tokens each of its API keys spends (the gateway's hourly counts), as usage
// records that carry the rendered objects' billing labels.
//
// Data flows one way: a VMI becomes a Fact (this file, pure); the Meter (meter.go, pure) keeps
// each VMI's interval and turns what is proven of it into Events, one per VMI and hour; the
// Store (store.go) appends the events as CloudEvents JSON lines beside a checkpoint of the
// meter, so a restart neither loses nor repeats an interval; the Index (index.go) sums the
// events for the usage query; Watch (watch.go) feeds the meter from the clusters and Service
// (service.go) runs it all.
package metering

import (
	"strconv"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Labels are a usage record's billing labels: the same values the rendered objects carry
// (docs/design.md's workload contract), read from the VMI once and kept for its whole life.
type Labels struct {
	Tenant   string `json:"tenant"`
	Tier     string `json:"tier,omitempty"`
	Job      string `json:"job,omitempty"`
	Model    string `json:"model,omitempty"`
	NodeType string `json:"nodeType,omitempty"`
	Replica  string `json:"replica,omitempty"`
	// VM is the VM's name (<job>-r<replica>-n<rank>).
	VM string `json:"vm,omitempty"`
	// Key is the API key id of a token record.
	Key string `json:"key,omitempty"`
}

// Fact is what one look at a VMI says about the GPUs it holds.
type Fact struct {
	UID, Namespace, Name string
	Labels               Labels
	// GPUs are the GPUs passed through to the VM (spec.domain.devices.gpus).
	GPUs int
	// Holding: the VMI's phase is one in which its pod holds the GPUs (Scheduled, Running,
	// Unknown). Terminal: Succeeded or Failed.
	Holding, Terminal bool
	// Start is when it first held them and End when it let them go, from KubeVirt's own
	// record of its phase transitions; zero when the VMI does not say.
	Start, End time.Time
	// Held: the VMI carries the meter's finalizer. Deleted is its deletionTimestamp; Released
	// says KubeVirt is done with it (deleting, and no finalizer left but the meter's).
	Held, Released bool
	Deleted        time.Time
}

// Finalizer is the meter's hold on a VMI that holds GPUs: the VMI cannot go away before the
// meter has recorded when it let them go, even while the meter is not running.
const Finalizer = "metering.inferplane.io/gpu-time"

// holding are the phases in which the VMI's virt-launcher pod runs on a node: the device plugin
// allocated the GPUs when the kubelet admitted the pod (Scheduled is "a target pod was
// scheduled and the system saw that pod in running state"), and nobody else can have them until
// the pod ends. Unknown is a VMI whose host does not answer: its GPUs are not freed either.
var holding = map[kubevirtv1.VirtualMachineInstancePhase]bool{
	kubevirtv1.Scheduled: true, kubevirtv1.Running: true, kubevirtv1.Unknown: true,
}

var terminal = map[kubevirtv1.VirtualMachineInstancePhase]bool{
	kubevirtv1.Succeeded: true, kubevirtv1.Failed: true,
}

// FactOf reads a VMI. The labels come from the VMI's own labels (KubeVirt copies them from the
// VM's template, where render puts them) and the model from its annotation.
func FactOf(vmi *kubevirtv1.VirtualMachineInstance) Fact {
	l := vmi.Labels
	f := Fact{
		UID: string(vmi.UID), Namespace: vmi.Namespace, Name: vmi.Name,
		Labels: Labels{
			Tenant: l[v1alpha1.LabelTenant], Tier: l[v1alpha1.LabelTier], Job: l[v1alpha1.LabelJob],
			Model: vmi.Annotations[v1alpha1.AnnotationModel], NodeType: l[v1alpha1.LabelNodeType],
			Replica: l[v1alpha1.LabelReplica], VM: vmi.Name,
		},
		GPUs:     len(vmi.Spec.Domain.Devices.GPUs),
		Holding:  holding[vmi.Status.Phase],
		Terminal: terminal[vmi.Status.Phase],
	}
	if d := vmi.DeletionTimestamp; d != nil {
		f.Deleted = d.Time.UTC().Truncate(time.Second)
		f.Released = true
	}
	for _, fin := range vmi.Finalizers {
		if fin == Finalizer {
			f.Held = true
		} else {
			f.Released = false
		}
	}
	if f.Labels.Model == "" {
		// VMs rendered before the model annotation existed: their master is the nearest name.
		f.Labels.Model = l[v1alpha1.LabelModelMaster]
	}
	for _, p := range vmi.Status.PhaseTransitionTimestamps {
		at := p.PhaseTransitionTimestamp.Time.UTC().Truncate(time.Second)
		if at.IsZero() {
			continue
		}
		switch {
		case holding[p.Phase] && p.Phase != kubevirtv1.Unknown:
			if f.Start.IsZero() || at.Before(f.Start) {
				f.Start = at
			}
		case terminal[p.Phase]:
			if f.End.IsZero() || at.Before(f.End) {
				f.End = at
			}
		}
	}
	if !f.End.IsZero() && !f.Start.IsZero() && f.End.Before(f.Start) {
		f.End = f.Start
	}
	return f
}

// Metered says whether the VMI is one the meter counts: inferplane's, of a tenant, with GPUs.
func Metered(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return vmi.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue && vmi.Labels[v1alpha1.LabelTenant] != "" &&
		len(vmi.Spec.Domain.Devices.GPUs) > 0
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
