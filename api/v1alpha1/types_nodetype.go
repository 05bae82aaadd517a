package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeTypeSpec describes one class of GPU node a tenant can be allowed to claim.
type NodeTypeSpec struct {
	// GPU is what each node of this type carries.
	GPU NodeGPU `json:"gpu"`
	// HardwareProfile is the vLLM recipes taxonomy profile this node matches (h100, h200, ...);
	// recipe hardware_overrides and strategy_overrides are looked up through it.
	// +optional
	HardwareProfile string `json:"hardwareProfile,omitempty"`
	// CPU is the number of guest vCPU cores a VM that takes a whole node gets.
	// +kubebuilder:validation:Minimum=1
	CPU int32 `json:"cpu"`
	// Memory is the guest memory of a VM that takes a whole node (a Kubernetes quantity).
	// +kubebuilder:validation:MinLength=1
	Memory string `json:"memory"`
	// NodeSelector selects the Kubernetes nodes of this type. Defaults to
	// {"inferplane.io/node-type": <name>}.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// RackLabel is the node label whose value names a node's rack; all nodes of a multi-node
	// replica are placed in one rack. Defaults to topology.inferplane.io/rack.
	// +optional
	RackLabel string `json:"rackLabel,omitempty"`
	// InfiniBand, when set, is passed through to multi-node replicas for GPU-to-GPU traffic.
	// +optional
	InfiniBand *NodeInfiniBand `json:"infiniBand,omitempty"`
	// GuestImage is the golden VM disk (a containerDisk image) with the GPU driver and a
	// container runtime that starts the model server image.
	// +optional
	GuestImage string `json:"guestImage,omitempty"`
	// ServingAddress says where the gateway reaches the serving nodes of VMs of this type
	// (default: the pod network). A tenant's own servingAddress overrides it.
	// +optional
	ServingAddress *ServingAddress `json:"servingAddress,omitempty"`
}

// AddressMode is how the gateway reaches a serving node.
// +kubebuilder:validation:Enum=Pod;Network;LoadBalancer
type AddressMode string

const (
	// AddressPod is the IP of the VM's pod-network interface: the gateway runs in the same
	// cluster and pod network as the VMs.
	AddressPod AddressMode = "Pod"
	// AddressNetwork is the IP of the VM's interface on a Multus network (a data-centre
	// fabric the gateway also reaches).
	AddressNetwork AddressMode = "Network"
	// AddressLoadBalancer is the ingress IP of a Service of type LoadBalancer per serving node.
	AddressLoadBalancer AddressMode = "LoadBalancer"
)

// ServingAddress is where the gateway reaches a job's serving nodes.
type ServingAddress struct {
	// Mode is Pod (the default), Network or LoadBalancer.
	// +optional
	Mode AddressMode `json:"mode,omitempty"`
	// Network is the Multus NetworkAttachmentDefinition (namespace/name or name) the VMs get
	// an interface on, for mode Network. When it is also the node type's InfiniBand network,
	// multi-node VMs use their fabric interface.
	// +optional
	Network string `json:"network,omitempty"`
	// LoadBalancerClass, SourceRanges and ServiceAnnotations shape the Services of mode
	// LoadBalancer (e.g. MetalLB's address-pool annotation). SourceRanges should be the
	// gateway's addresses: anything that reaches a replica's Service bypasses Envoy's key
	// check.
	// +optional
	LoadBalancerClass string `json:"loadBalancerClass,omitempty"`
	// +optional
	SourceRanges []string `json:"sourceRanges,omitempty"`
	// +optional
	ServiceAnnotations map[string]string `json:"serviceAnnotations,omitempty"`
}

// NodeGPU is the GPU side of a node type.
type NodeGPU struct {
	// ResourceName is the device-plugin resource KubeVirt passes through,
	// e.g. nvidia.com/GH100_H100_SXM5_80GB.
	// +kubebuilder:validation:MinLength=1
	ResourceName string `json:"resourceName"`
	// Count is the number of GPUs on one node.
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
	// MemoryGB is the memory of one GPU, in GB.
	// +kubebuilder:validation:Minimum=1
	MemoryGB int32 `json:"memoryGB"`
}

// NodeInfiniBand is the InfiniBand side of a node type.
type NodeInfiniBand struct {
	// ResourceName is the device-plugin resource of one InfiniBand function (SR-IOV VF).
	// +kubebuilder:validation:MinLength=1
	ResourceName string `json:"resourceName"`
	// Count is how many functions a multi-node VM takes.
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
	// Network is the Multus NetworkAttachmentDefinition (namespace/name or name) of the
	// secondary network the replica's nodes talk over.
	// +optional
	Network string `json:"network,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipnt
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.spec.gpu.resourceName`
// +kubebuilder:printcolumn:name="Per node",type=integer,JSONPath=`.spec.gpu.count`
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.hardwareProfile`

// NodeType is a GPU node class, e.g. metal3.gpu-h100. Its name is what tenants' allowedNodeTypes
// match, exactly or by a "<provider>.*" wildcard.
type NodeType struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NodeTypeSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// NodeTypeList is a list of NodeTypes.
type NodeTypeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeType `json:"items"`
}

// Provider is the part of a node type name before its first dot ("metal3" for
// "metal3.gpu-h100"), the unit "<provider>.*" wildcards match.
func Provider(nodeTypeName string) string {
	p, _, _ := strings.Cut(nodeTypeName, ".")
	return p
}

// Selector returns the node labels that select nodes of this type.
func (n *NodeType) Selector() map[string]string {
	if len(n.Spec.NodeSelector) > 0 {
		return n.Spec.NodeSelector
	}
	return map[string]string{DefaultNodeTypeLabel: n.Name}
}

// Rack returns the node label that names a node's rack.
func (n *NodeType) Rack() string {
	if n.Spec.RackLabel != "" {
		return n.Spec.RackLabel
	}
	return DefaultRackLabel
}

func init() {
	SchemeBuilder.Register(&NodeType{}, &NodeTypeList{})
}
