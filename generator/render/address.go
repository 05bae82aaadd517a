package render

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/policy"
)

// netServing names a VM's interface on the serving network (mode Network), unless the
// replica's fabric network is that network.
const netServing = "serving"

// address is where the gateway reaches a job's serving nodes (docs/design.md, "Workload
// contract"): the node type's servingAddress, unless the tenant sets its own.
type address struct {
	spec v1alpha1.ServingAddress
	// iface is the VM interface the gateway reaches (mode Network): netServing, or netFabric
	// when the serving network is the replica's fabric.
	iface string
}

func (a address) mode() v1alpha1.AddressMode {
	if a.spec.Mode == "" {
		return v1alpha1.AddressPod
	}
	return a.spec.Mode
}

// resolveAddress picks and checks a job's serving address; problems name the file that sets it.
func resolveAddress(probs *problem.List, t *tenant, j *job, tenantFile string) {
	spec, file := j.nodeType.Spec.ServingAddress, nodeTypeFile(j.nodeType)
	if t.spec.ServingAddress != nil {
		spec, file = t.spec.ServingAddress, tenantFile
	}
	if spec == nil {
		return
	}
	checkAddress(probs, file, spec)
	j.address.spec = *spec
	if j.address.mode() == v1alpha1.AddressNetwork {
		j.address.iface = netServing
		if j.multiNode() && j.fabric == spec.Network {
			j.address.iface = netFabric
		}
	}
}

// checkAddress checks one servingAddress.
func checkAddress(probs *problem.List, file string, a *v1alpha1.ServingAddress) {
	f := field.NewPath("spec", "servingAddress")
	switch a.Mode {
	case "", v1alpha1.AddressPod, v1alpha1.AddressLoadBalancer:
		if a.Network != "" {
			probs.Add(file, f.Child("network"), "no network unless mode is Network", "got %q with mode %q", a.Network, a.Mode)
		}
	case v1alpha1.AddressNetwork:
		if msg := networkNameErr(a.Network); msg != "" {
			probs.Add(file, f.Child("network"), "the Multus NetworkAttachmentDefinition the gateway reaches the VMs on (name or namespace/name)", "%s", msg)
		}
	default:
		probs.Add(file, f.Child("mode"), "Pod, Network or LoadBalancer", "got %q", a.Mode)
	}
	if a.Mode != v1alpha1.AddressLoadBalancer && (a.LoadBalancerClass != "" || len(a.SourceRanges) > 0 || len(a.ServiceAnnotations) > 0) {
		probs.Add(file, f.Child("mode"), "LoadBalancer when loadBalancerClass, sourceRanges or serviceAnnotations are set", "got %q", a.Mode)
	}
	for _, r := range a.SourceRanges {
		if _, err := netip.ParsePrefix(r); err != nil {
			probs.Add(file, f.Child("sourceRanges"), "CIDRs such as 10.0.0.0/24", "got %q", r)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.ServiceAnnotations)) {
		for _, msg := range validation.IsQualifiedName(k) {
			probs.Add(file, f.Child("serviceAnnotations"), "annotation keys such as metallb.universe.tf/address-pool", "key %q: %s", k, msg)
		}
	}
	if c := a.LoadBalancerClass; c != "" {
		for _, msg := range validation.IsQualifiedName(c) {
			probs.Add(file, f.Child("loadBalancerClass"), "a label-style name such as example.com/internal-vip", "got %q: %s", c, msg)
		}
	}
}

func networkNameErr(n string) string {
	if n == "" {
		return "missing"
	}
	ns, name, scoped := strings.Cut(n, "/")
	if !scoped {
		name, ns = ns, ""
	}
	if scoped {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return "namespace " + ns + ": " + msgs[0]
		}
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "name " + name + ": " + msgs[0]
	}
	return ""
}

// addressAnnotations are the VM template annotations that tell discovery where a serving
// node is reached (none on nodes that do not serve).
func addressAnnotations(j *job, vm string, n int32, into map[string]string) {
	if !j.serving(n) {
		return
	}
	switch j.address.mode() {
	case v1alpha1.AddressNetwork:
		into[v1alpha1.AnnotationAddressMode] = v1alpha1.AddressModeNetwork
		into[v1alpha1.AnnotationAddressNetwork] = j.address.iface
	case v1alpha1.AddressLoadBalancer:
		into[v1alpha1.AnnotationAddressMode] = v1alpha1.AddressModeLoadBalancer
		into[v1alpha1.AnnotationAddressService] = loadBalancerName(vm)
	default:
		into[v1alpha1.AnnotationAddressMode] = v1alpha1.AddressModePod
	}
}

// servingInterface is the extra interface and network of mode Network (none when the fabric
// interface serves, or in other modes).
func servingInterface(j *job) (*kubevirtv1.Interface, *kubevirtv1.Network) {
	if j.address.iface != netServing {
		return nil, nil
	}
	return &kubevirtv1.Interface{Name: netServing, InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{
			Bridge: &kubevirtv1.InterfaceBridge{},
		}}, &kubevirtv1.Network{Name: netServing, NetworkSource: kubevirtv1.NetworkSource{
			Multus: &kubevirtv1.MultusNetwork{NetworkName: j.address.spec.Network},
		}}
}

// loadBalancerName is the Service of a serving node in mode LoadBalancer: the VM's name.
func loadBalancerName(vm string) string { return vm }

// loadBalancer is a serving node's Service of type LoadBalancer (mode LoadBalancer): the
// gateway sends that node's traffic to its ingress IP.
func loadBalancer(t *tenant, j *job, r, n int32, labels map[string]string) object[corev1.ServiceSpec] {
	sel := t.replicaLabels(j, r)
	sel[v1alpha1.LabelNodeRank] = labels[v1alpha1.LabelNodeRank]
	a := j.address.spec
	spec := corev1.ServiceSpec{
		Type:     corev1.ServiceTypeLoadBalancer,
		Selector: sel,
		Ports: []corev1.ServicePort{{
			Name: "http", Protocol: corev1.ProtocolTCP, Port: v1alpha1.ServingPort,
			TargetPort: intstr.FromInt32(v1alpha1.ServingPort),
		}},
		LoadBalancerSourceRanges: slices.Clone(a.SourceRanges),
	}
	if a.LoadBalancerClass != "" {
		class := a.LoadBalancerClass
		spec.LoadBalancerClass = &class
	}
	var annotations map[string]string
	if len(a.ServiceAnnotations) > 0 {
		annotations = maps.Clone(a.ServiceAnnotations)
	}
	return object[corev1.ServiceSpec]{
		APIVersion: "v1",
		Kind:       "Service",
		Metadata: meta{Name: loadBalancerName(policy.VMName(j.name, r, n)), Namespace: t.namespace,
			Labels: labels, Annotations: annotations},
		Spec: spec,
	}
}
