// Package vmitest builds KubeVirt VirtualMachineInstances the way KubeVirt creates them from
// the generator's VirtualMachines (labels and annotations of the workload contract in
// docs/design.md copied from the VM template), and plays KubeVirt's part of moving them to
// Running with an IP, for the xDS server's tests against a real API server.
package vmitest

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Node describes one VMI of a replica.
type Node struct {
	Tenant, Job, Runtime string
	Replica, Rank        int
	// Nodes is the replica's node count (rank 0 is the head).
	Nodes int
	// Serving marks a node other than the head as serving (the data-parallel launcher);
	// the head always serves.
	Serving       bool
	ServingPort   int
	RequireAPIKey bool
}

// VMI renders the VMI KubeVirt creates for one node: name <job>-r<replica>-n<rank> in the
// tenant's namespace, the contract's labels and annotations, a pod network named "default"
// (masquerade) and, for multi-node replicas, a secondary Multus network.
func VMI(n Node) *kubevirtv1.VirtualMachineInstance {
	role := v1alpha1.RoleHead
	if n.Rank > 0 {
		role = v1alpha1.RoleWorker
	}
	nodes := max(n.Nodes, 1)
	serving := n.Rank == 0 || n.Serving
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-r%d-n%d", n.Job, n.Replica, n.Rank),
			Namespace: n.Tenant,
			Labels: map[string]string{
				v1alpha1.LabelManagedBy:   v1alpha1.ManagedByValue,
				v1alpha1.LabelTenant:      n.Tenant,
				v1alpha1.LabelJob:         n.Job,
				v1alpha1.LabelReplica:     strconv.Itoa(n.Replica),
				v1alpha1.LabelNodeRank:    strconv.Itoa(n.Rank),
				v1alpha1.LabelRole:        role,
				v1alpha1.LabelNodeType:    "h100-8x",
				v1alpha1.LabelRuntime:     n.Runtime,
				v1alpha1.LabelModelMaster: "qwen3-32b",
			},
			Annotations: map[string]string{
				v1alpha1.AnnotationServingPort:        strconv.Itoa(n.ServingPort),
				v1alpha1.AnnotationRequireAPIKey:      strconv.FormatBool(n.RequireAPIKey),
				v1alpha1.AnnotationReplicaNodes:       strconv.Itoa(nodes),
				v1alpha1.AnnotationPerReplicaGPUCount: strconv.Itoa(8 * nodes),
			},
		},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Domain: kubevirtv1.DomainSpec{
				Devices: kubevirtv1.Devices{
					Interfaces: []kubevirtv1.Interface{{
						Name:                   "default",
						InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}},
					}},
					GPUs: []kubevirtv1.GPU{{Name: "gpu0", DeviceName: "nvidia.com/GH100_H100_SXM5_80GB"}},
				},
			},
			Networks:     []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
			NodeSelector: map[string]string{v1alpha1.DefaultNodeTypeLabel: "h100-8x"},
		},
	}
	if serving {
		vmi.Labels[v1alpha1.LabelServing] = v1alpha1.ServingValue
	}
	if nodes > 1 {
		vmi.Spec.Domain.Devices.Interfaces = append(vmi.Spec.Domain.Devices.Interfaces, kubevirtv1.Interface{
			Name: "overlay", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}},
		})
		vmi.Spec.Networks = append(vmi.Spec.Networks, kubevirtv1.Network{
			Name: "overlay", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "ib-overlay"}},
		})
	}
	return vmi
}

// SetStatus plays virt-controller: it writes the VMI's phase, its interfaces' IPs (the pod
// network first, then an overlay address for multi-node VMIs) and its Ready condition. The
// VMI CRD has no status subresource, so this is an update of the object.
func SetStatus(ctx context.Context, c client.Client, vmi *kubevirtv1.VirtualMachineInstance,
	phase kubevirtv1.VirtualMachineInstancePhase, ip string, ready bool) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
		return err
	}
	vmi.Status.Phase = phase
	vmi.Status.Interfaces = nil
	if ip != "" {
		vmi.Status.Interfaces = append(vmi.Status.Interfaces, kubevirtv1.VirtualMachineInstanceNetworkInterface{
			Name: "default", IP: ip, IPs: []string{ip}, InterfaceName: "eth0",
		})
		if len(vmi.Spec.Networks) > 1 {
			vmi.Status.Interfaces = append(vmi.Status.Interfaces, kubevirtv1.VirtualMachineInstanceNetworkInterface{
				Name: "overlay", IP: "192.168.50.10", IPs: []string{"192.168.50.10"}, InterfaceName: "eth1",
			})
		}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	vmi.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{
		Type:               kubevirtv1.VirtualMachineInstanceReady,
		Status:             status,
		LastTransitionTime: metav1.Now(),
	}}
	return c.Update(ctx, vmi)
}
