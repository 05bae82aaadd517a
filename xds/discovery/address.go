package discovery

import (
	"cmp"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// setAddress reads where the gateway reaches a serving node, by the node's address mode
// (docs/design.md, "Workload contract"; docs/xds.md, "Reachable replicas"). It returns why
// the replica has no usable address, or "" (a node that is not running yet has none, and that
// is no problem). Mode loadbalancer names a Service; Kube resolves it.
func setAddress(r *Replica, vmi *kubevirtv1.VirtualMachineInstance) string {
	a := vmi.Annotations
	switch mode := cmp.Or(a[v1alpha1.AnnotationAddressMode], v1alpha1.AddressModePod); mode {
	case v1alpha1.AddressModePod:
		r.Address = podIP(vmi)
	case v1alpha1.AddressModeNetwork:
		iface := a[v1alpha1.AnnotationAddressNetwork]
		if iface == "" {
			return fmt.Sprintf("not served: annotation %s is network but %s is missing", v1alpha1.AnnotationAddressMode, v1alpha1.AnnotationAddressNetwork)
		}
		r.Address = interfaceIP(vmi, iface)
		if r.Address == "" && r.Running {
			return fmt.Sprintf("not served yet: running, but its interface %q has no IP (KubeVirt reports a secondary interface's IP through the guest agent)", iface)
		}
	case v1alpha1.AddressModeLoadBalancer:
		r.Service = a[v1alpha1.AnnotationAddressService]
		if r.Service == "" {
			return fmt.Sprintf("not served: annotation %s is loadbalancer but %s is missing", v1alpha1.AnnotationAddressMode, v1alpha1.AnnotationAddressService)
		}
	default:
		return fmt.Sprintf("not served: annotation %s %q: expected %s, %s or %s", v1alpha1.AnnotationAddressMode, mode,
			v1alpha1.AddressModePod, v1alpha1.AddressModeNetwork, v1alpha1.AddressModeLoadBalancer)
	}
	if r.Address != "" {
		if _, err := netip.ParseAddr(r.Address); err != nil {
			bad := r.Address
			r.Address = ""
			return fmt.Sprintf("status IP %q is not an IP address", bad)
		}
	}
	return ""
}

// podIP is the IP of the VMI's pod-network interface (the one Services and Envoy reach in the
// same cluster); secondary networks (Multus, InfiniBand) carry the replica's own traffic. When
// no interface is named after the pod network, the first interface with an address is used
// (KubeVirt lists the pod network first).
func podIP(vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, n := range vmi.Spec.Networks {
		if n.Pod == nil {
			continue
		}
		if ip := interfaceIP(vmi, n.Name); ip != "" {
			return ip
		}
	}
	for _, itf := range vmi.Status.Interfaces {
		if itf.IP != "" {
			return itf.IP
		}
	}
	return ""
}

// interfaceIP is the IP KubeVirt reports for the VMI's interface of that name.
func interfaceIP(vmi *kubevirtv1.VirtualMachineInstance, name string) string {
	for _, itf := range vmi.Status.Interfaces {
		if itf.Name == name && itf.IP != "" {
			return itf.IP
		}
	}
	return ""
}

// serviceSelector selects the Services the generator renders (mode loadbalancer reads them).
func serviceSelector() labels.Selector {
	managed, _ := labels.NewRequirement(v1alpha1.LabelManagedBy, selection.Equals, []string{v1alpha1.ManagedByValue})
	tenant, _ := labels.NewRequirement(v1alpha1.LabelTenant, selection.Exists, nil)
	return labels.NewSelector().Add(*managed, *tenant)
}

// resolveService sets a loadbalancer replica's address from its Service: the first ingress IP
// and the port named http (else the first). It returns why there is none yet, or "".
func resolveService(r *Replica, svc *corev1.Service) string {
	ref := "Service " + r.Namespace + "/" + r.Service
	switch {
	case svc == nil:
		return "not served: " + ref + " (its address, mode loadbalancer) does not exist"
	case svc.Spec.Type != corev1.ServiceTypeLoadBalancer:
		return fmt.Sprintf("not served: %s is of type %q, not LoadBalancer", ref, svc.Spec.Type)
	case len(svc.Spec.Ports) == 0:
		return "not served: " + ref + " has no port"
	}
	port := svc.Spec.Ports[0]
	for _, p := range svc.Spec.Ports {
		if p.Name == "http" {
			port = p
		}
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" {
			continue
		}
		if _, err := netip.ParseAddr(in.IP); err != nil {
			return fmt.Sprintf("not served: %s ingress IP %q is not an IP address", ref, in.IP)
		}
		r.Address, r.Port = in.IP, uint32(port.Port)
		return ""
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.Hostname != "" {
			return fmt.Sprintf("not served: %s has a load-balancer host name (%s), not an IP; give the load balancer an IP", ref, in.Hostname)
		}
	}
	return "not served yet: " + ref + " has no load-balancer IP yet"
}

// trimService keeps in the cache what resolveService reads.
func trimService(svc *corev1.Service) *corev1.Service {
	svc.ManagedFields = nil
	svc.Spec = corev1.ServiceSpec{Type: svc.Spec.Type, Ports: svc.Spec.Ports}
	svc.Status = corev1.ServiceStatus{LoadBalancer: svc.Status.LoadBalancer}
	return svc
}
