package policy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// workload is a VirtualMachine or a VirtualMachineInstance as the rules see it: the labels and
// spec its virt-launcher pod gets, and where those live in the object (for messages).
type workload struct {
	kind, name, namespace string
	// ownedByVM: a VMI a VirtualMachine owns (its VM was held to the quota already).
	ownedByVM bool
	// vmLabels are a VirtualMachine's own labels (nil for a VMI): the template must repeat
	// them, since only the template's reach the VMI and its pod.
	vmLabels map[string]string
	// podLabels and podAnnotations are the template's (VM) or the object's (VMI).
	podLabels      map[string]string
	podAnnotations map[string]string
	spec           *kubevirtv1.VirtualMachineInstanceSpec

	labelsPath, annotationsPath, specPath *field.Path
}

func vmWorkload(vm *kubevirtv1.VirtualMachine) workload {
	w := workload{
		kind: GroupKindVM.Kind, name: vm.Name, namespace: vm.Namespace, vmLabels: vm.Labels,
		labelsPath:      field.NewPath("spec", "template", "metadata", "labels"),
		annotationsPath: field.NewPath("spec", "template", "metadata", "annotations"),
		specPath:        field.NewPath("spec", "template", "spec"),
	}
	if t := vm.Spec.Template; t != nil {
		w.podLabels, w.podAnnotations, w.spec = t.ObjectMeta.Labels, t.ObjectMeta.Annotations, &t.Spec
	}
	return w
}

func vmiWorkload(vmi *kubevirtv1.VirtualMachineInstance) workload {
	return workload{
		kind: GroupKindVMI.Kind, name: vmi.Name, namespace: vmi.Namespace, ownedByVM: OwnedByVM(vmi),
		podLabels: vmi.Labels, podAnnotations: vmi.Annotations, spec: &vmi.Spec,
		labelsPath: metaLabels, annotationsPath: field.NewPath("metadata", "annotations"), specPath: specPath,
	}
}

// OwnedByVM reports whether a VirtualMachine owns the VMI (KubeVirt's controller made it for
// the VM).
func OwnedByVM(vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, o := range vmi.OwnerReferences {
		if o.Kind == GroupKindVM.Kind && strings.HasPrefix(o.APIVersion, GroupKindVM.Group+"/") {
			return true
		}
	}
	return false
}

// WorkloadNames are the policy data a VM or VMI names through its labels.
type WorkloadNames struct{ Tenant, Master, NodeType string }

func (w workload) names() WorkloadNames {
	l := w.podLabels
	if l == nil {
		l = w.vmLabels
	}
	return WorkloadNames{Tenant: l[v1alpha1.LabelTenant], Master: l[v1alpha1.LabelModelMaster], NodeType: l[v1alpha1.LabelNodeType]}
}

// inferplaneLabels are the labels of the workload contract (docs/design.md).
var inferplaneLabels = []string{
	v1alpha1.LabelTenant, v1alpha1.LabelJob, v1alpha1.LabelReplica, v1alpha1.LabelNodeRank,
	v1alpha1.LabelRole, v1alpha1.LabelNodeType, v1alpha1.LabelRuntime, v1alpha1.LabelModelMaster,
	v1alpha1.LabelServing, v1alpha1.LabelTier,
}

// requiredLabels are the ones the rules cannot work without.
var requiredLabels = []string{
	v1alpha1.LabelTenant, v1alpha1.LabelJob, v1alpha1.LabelReplica, v1alpha1.LabelNodeRank,
	v1alpha1.LabelRole, v1alpha1.LabelNodeType, v1alpha1.LabelModelMaster,
}

// CheckVirtualMachine applies the workload rules to a guarded KubeVirt VirtualMachine.
func CheckVirtualMachine(vm *kubevirtv1.VirtualMachine, d Data) field.ErrorList {
	w := vmWorkload(vm)
	if w.spec == nil {
		return field.ErrorList{field.Required(specPath.Child("template"), "an inferplane VirtualMachine needs a VMI template")}
	}
	return checkWorkload(w, d)
}

// CheckVirtualMachineInstance applies the workload rules to a guarded VirtualMachineInstance.
func CheckVirtualMachineInstance(vmi *kubevirtv1.VirtualMachineInstance, d Data) field.ErrorList {
	return checkWorkload(vmiWorkload(vmi), d)
}

// checkWorkload holds one VM (one node of one replica) to the replica layout of its master on
// its node type: exactly perReplicaGPUCount GPUs on one VM when they fit a node, else one whole
// node per VM, ranks below the node count, one rack; plus tenant, node type and device rules;
// and, once all those pass and d.Running counts the tenant's cluster, the tenant's quota (not
// for a VMI a VM owns: its VM was held to it).
// With the name rule (<job>-r<replica>-n<rank>) at most one VM exists per rank, so a replica's
// VMs together never request more than perReplicaGPUCount GPUs.
func checkWorkload(w workload, d Data) field.ErrorList {
	out := checkContractLabels(w)
	if w.missingLabels() {
		return out
	}
	l := w.podLabels
	n := w.names()
	out = append(out, checkTenant(n.Tenant, w.namespace, w.labelsPath, d.Tenant)...)
	rank, rankOK := checkName(&out, w)

	master := checkMasterRef(&out, n.Master, w.labelsPath.Key(v1alpha1.LabelModelMaster), d.Master)
	ntPath := w.labelsPath.Key(v1alpha1.LabelNodeType)
	nt := checkNodeTypeRef(&out, n.NodeType, ntPath, d)
	if master != nil {
		if rt, ok := l[v1alpha1.LabelRuntime]; ok && rt != string(master.Spec.Runtime) {
			out = append(out, field.Invalid(w.labelsPath.Key(v1alpha1.LabelRuntime), rt,
				fmt.Sprintf("must match runtime %q of ModelMaster %s", master.Spec.Runtime, master.Name)))
		}
		if e := checkAnnotation(w, v1alpha1.AnnotationPerReplicaGPUCount, master.Spec.PerReplicaGPUCount); e != nil {
			e.Detail += fmt.Sprintf(" (ModelMaster %s)", master.Name)
			out = append(out, e)
		}
	}
	if nt == nil {
		return out
	}
	out = append(out, checkDevices(w, nt)...)
	if master == nil {
		return out
	}
	layout, err := ReplicaLayout(master, nt)
	if err != nil {
		return append(out, field.Invalid(ntPath, nt.Name, err.Error()))
	}
	out = append(out, checkLayout(w, master, nt, layout, rank, rankOK)...)
	if len(out) == 0 && d.Tenant != nil && !w.ownedByVM {
		out = checkWorkloadQuota(w, d)
	}
	return out
}

// checkContractLabels reports the workload contract's labels that are missing, or that a
// VirtualMachine's template does not repeat.
func checkContractLabels(w workload) field.ErrorList {
	var out field.ErrorList
	reported := map[string]bool{}
	for _, k := range inferplaneLabels {
		if v, ok := w.vmLabels[k]; ok && w.podLabels[k] != v {
			reported[k] = true
			detail := fmt.Sprintf("must repeat the VirtualMachine's label %s=%q (only the template's labels reach the VMI and its pod)", k, v)
			if tv, ok := w.podLabels[k]; ok {
				out = append(out, field.Invalid(w.labelsPath.Key(k), tv, detail))
			} else {
				out = append(out, field.Required(w.labelsPath.Key(k), detail))
			}
		}
	}
	for _, k := range requiredLabels {
		if w.podLabels[k] == "" && !reported[k] {
			out = append(out, field.Required(w.labelsPath.Key(k), "required on inferplane workloads (docs/design.md, workload contract)"))
		}
	}
	return out
}

// missingLabels reports whether a label the rules cannot work without is missing or empty.
func (w workload) missingLabels() bool {
	for _, k := range requiredLabels {
		if w.podLabels[k] == "" {
			return true
		}
	}
	return false
}

// checkName checks the replica and node-rank labels and the name they imply; it returns the
// rank and whether it parsed.
func checkName(out *field.ErrorList, w workload) (int64, bool) {
	l := w.podLabels
	replica, rErr := ordinal(l[v1alpha1.LabelReplica])
	if rErr != nil {
		*out = append(*out, field.Invalid(w.labelsPath.Key(v1alpha1.LabelReplica), l[v1alpha1.LabelReplica], rErr.Error()))
	}
	rank, nErr := ordinal(l[v1alpha1.LabelNodeRank])
	if nErr != nil {
		*out = append(*out, field.Invalid(w.labelsPath.Key(v1alpha1.LabelNodeRank), l[v1alpha1.LabelNodeRank], nErr.Error()))
	}
	if rErr == nil && nErr == nil {
		if want := VMName(l[v1alpha1.LabelJob], int32(replica), int32(rank)); w.name != want {
			*out = append(*out, field.Invalid(metaName, w.name, fmt.Sprintf(
				"must be %q, <job>-r<replica>-n<node-rank> from its labels (one VM per node of a replica)", want)))
		}
	}
	return rank, nErr == nil
}

// checkLayout holds the VM to one node of the replica layout: its GPUs, rank, role, the
// replica-nodes annotation and, across nodes, one rack.
func checkLayout(w workload, master *v1alpha1.ModelMaster, nt *v1alpha1.NodeType, layout Layout, rank int64, rankOK bool) field.ErrorList {
	var out field.ErrorList
	l := w.podLabels
	if got := len(w.spec.Domain.Devices.GPUs); got != int(layout.GPUsPerNode) {
		how := fmt.Sprintf("a replica of ModelMaster %s needs %s, which fit one node of NodeType %s (%s): one VM with all %d",
			master.Name, gpus(master.Spec.PerReplicaGPUCount), nt.Name, gpus(nt.Spec.GPU.Count), layout.GPUsPerNode)
		if layout.Nodes > 1 {
			how = fmt.Sprintf("a replica of ModelMaster %s needs %d GPUs, %d whole nodes of NodeType %s: each VM takes all %d GPUs of its node",
				master.Name, master.Spec.PerReplicaGPUCount, layout.Nodes, nt.Name, layout.GPUsPerNode)
		}
		out = append(out, field.Invalid(w.specPath.Child("domain", "devices", "gpus"), got,
			fmt.Sprintf("must be %d: %s", layout.GPUsPerNode, how)))
	}
	if rankOK {
		if rank >= int64(layout.Nodes) {
			out = append(out, field.Invalid(w.labelsPath.Key(v1alpha1.LabelNodeRank), l[v1alpha1.LabelNodeRank],
				fmt.Sprintf("must be below %d, the nodes of one replica of ModelMaster %s on NodeType %s", layout.Nodes, master.Name, nt.Name)))
		}
		if role, got := Role(int32(rank)), l[v1alpha1.LabelRole]; got != role {
			out = append(out, field.Invalid(w.labelsPath.Key(v1alpha1.LabelRole), got,
				fmt.Sprintf("must be %q for node-rank %d (rank 0 is the head)", role, rank)))
		}
		out = append(out, checkServing(w, master, layout, int32(rank))...)
	}
	if e := checkAnnotation(w, v1alpha1.AnnotationReplicaNodes, layout.Nodes); e != nil {
		out = append(out, e)
	}
	if layout.Nodes > 1 && !hasRackAffinity(w.spec.Affinity, nt.Rack(), l) {
		out = append(out, field.Invalid(w.specPath.Child("affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
			fielderr.Omit, fmt.Sprintf("no rack term: a replica spanning %d nodes runs in one rack: it needs a required pod affinity "+
				"with topologyKey %q whose selector matches exactly this replica's pods (labels %s, %s, %s)",
				layout.Nodes, nt.Rack(), v1alpha1.LabelTenant, v1alpha1.LabelJob, v1alpha1.LabelReplica)))
	}
	return out
}

// checkServing holds the serving label to the layout: the xDS server routes requests to every
// node that carries it, so it must be on exactly the nodes that answer HTTP.
func checkServing(w workload, master *v1alpha1.ModelMaster, layout Layout, rank int32) field.ErrorList {
	got, has := w.podLabels[v1alpha1.LabelServing]
	path := w.labelsPath.Key(v1alpha1.LabelServing)
	switch serving := layout.Serving(rank); {
	case serving && got != v1alpha1.ServingValue:
		why := "the head of a replica answers requests"
		if rank > 0 {
			why = fmt.Sprintf("every node of a replica of ModelMaster %s runs its own %d data-parallel ranks and answers requests for them", master.Name, layout.DataParallelLocal)
		}
		detail := fmt.Sprintf("must be %q on node-rank %d: %s", v1alpha1.ServingValue, rank, why)
		if !has {
			return field.ErrorList{field.Required(path, detail)}
		}
		return field.ErrorList{field.Invalid(path, got, detail)}
	case !serving && has:
		return field.ErrorList{field.Invalid(path, got, fmt.Sprintf(
			"must be absent on node-rank %d: a worker of a replica of ModelMaster %s runs --headless and answers no requests", rank, master.Name))}
	}
	return nil
}

// checkDevices holds the VM's node selection and passed-through devices to its node type.
func checkDevices(w workload, nt *v1alpha1.NodeType) field.ErrorList {
	var out field.ErrorList
	sel := nt.Selector()
	for _, k := range sortedKeys(sel) {
		detail := fmt.Sprintf("must be %q to select nodes of NodeType %s", sel[k], nt.Name)
		if got, ok := w.spec.NodeSelector[k]; !ok {
			out = append(out, field.Required(w.specPath.Child("nodeSelector").Key(k), detail))
		} else if got != sel[k] {
			out = append(out, field.Invalid(w.specPath.Child("nodeSelector").Key(k), got, detail))
		}
	}
	devices := w.spec.Domain.Devices
	devPath := w.specPath.Child("domain", "devices")
	for i, g := range devices.GPUs {
		if g.DeviceName != nt.Spec.GPU.ResourceName {
			out = append(out, field.Invalid(devPath.Child("gpus").Index(i).Child("deviceName"), g.DeviceName,
				fmt.Sprintf("must be %q, the GPU of NodeType %s", nt.Spec.GPU.ResourceName, nt.Name)))
		}
	}
	ib := nt.Spec.InfiniBand
	for i, h := range devices.HostDevices {
		if ib == nil || h.DeviceName != ib.ResourceName {
			want := fmt.Sprintf("NodeType %s passes through no host devices", nt.Name)
			if ib != nil {
				want = fmt.Sprintf("must be %q, the InfiniBand function of NodeType %s (GPUs go in devices.gpus)", ib.ResourceName, nt.Name)
			}
			out = append(out, field.Invalid(devPath.Child("hostDevices").Index(i).Child("deviceName"), h.DeviceName, want))
		}
	}
	if ib != nil && len(devices.HostDevices) > int(ib.Count) {
		out = append(out, field.Invalid(devPath.Child("hostDevices"), len(devices.HostDevices),
			fmt.Sprintf("must be at most %d, the InfiniBand functions of NodeType %s", ib.Count, nt.Name)))
	}
	// A device-plugin resource asked for as a plain resource would reach the virt-launcher pod
	// without passing the GPU rules.
	for _, rl := range []struct {
		path string
		list corev1.ResourceList
	}{{"requests", w.spec.Domain.Resources.Requests}, {"limits", w.spec.Domain.Resources.Limits}} {
		for _, name := range sortedKeys(rl.list) {
			if extendedResource(string(name)) {
				q := rl.list[name]
				out = append(out, field.Invalid(w.specPath.Child("domain", "resources", rl.path).Key(string(name)), q.String(),
					"device-plugin resources are passed through devices.gpus and devices.hostDevices, where the rules check them"))
			}
		}
	}
	return out
}

func extendedResource(name string) bool {
	domain, _, ok := strings.Cut(name, "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// hasRackAffinity reports whether a required pod-affinity term keeps the pod in the rack of the
// other pods of its replica: topologyKey is the rack label and the selector matches this pod's
// labels but no pod of another tenant, job or replica.
func hasRackAffinity(aff *corev1.Affinity, rack string, podLabels map[string]string) bool {
	if aff == nil || aff.PodAffinity == nil {
		return false
	}
	for _, term := range aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != rack || term.LabelSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil {
			continue
		}
		// matchLabelKeys adds "key in (this pod's value)" to the selector (the scheduler does).
		for _, k := range term.MatchLabelKeys {
			if v, ok := podLabels[k]; ok {
				if r, err := labels.NewRequirement(k, selection.In, []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
		if !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		exact := true
		for _, k := range []string{v1alpha1.LabelTenant, v1alpha1.LabelJob, v1alpha1.LabelReplica} {
			other := maps.Clone(podLabels)
			other[k] = podLabels[k] + "-other"
			without := maps.Clone(podLabels)
			delete(without, k)
			if sel.Matches(labels.Set(other)) || sel.Matches(labels.Set(without)) {
				exact = false
			}
		}
		if exact {
			return true
		}
	}
	return false
}

// checkAnnotation compares an optional numeric annotation with the value the rules derive.
func checkAnnotation(w workload, key string, want int32) *field.Error {
	v, ok := w.podAnnotations[key]
	if !ok || v == strconv.Itoa(int(want)) {
		return nil
	}
	return field.Invalid(w.annotationsPath.Key(key), v, fmt.Sprintf("must be %q when set", strconv.Itoa(int(want))))
}

// ordinal parses a replica or node-rank label: a whole number, no sign, no leading zeros.
// VMName is the name of the VM of node rank of a job's replica: <job>-r<replica>-n<rank> (the
// workload contract the generator renders and this package checks).
func VMName(job string, replica, rank int32) string {
	return job + "-r" + strconv.Itoa(int(replica)) + "-n" + strconv.Itoa(int(rank))
}

// Role is the role label of node rank of a replica: rank 0 is the head, the others workers.
func Role(rank int32) string {
	if rank == 0 {
		return v1alpha1.RoleHead
	}
	return v1alpha1.RoleWorker
}

func ordinal(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("must be a whole number (0, 1, ...)")
	}
	return n, nil
}

func sortedKeys[V any, M ~map[K]V, K ~string](m M) []K {
	return slices.Sorted(maps.Keys(m))
}
