package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// How a VM was restarted.
const (
	// BySubresource: KubeVirt's restart subresource (virt-api) replaced the VMI.
	BySubresource = "restart subresource"
	// ByDeletingVMI: the VMI was deleted; the VM's runStrategy Always makes a new one.
	ByDeletingVMI = "deleted the VMI"
	// NotRunning: the VM had no VMI; runStrategy Always is starting one already.
	NotRunning = "no VMI was running"
)

// subresources is KubeVirt's aggregated API group, served by virt-api.
var subresources = schema.GroupVersion{Group: "subresources.kubevirt.io", Version: "v1"}

// Restarted is one VM that was restarted, and how.
type Restarted struct {
	VM  string
	How string
}

// Restart restarts the VMs of a job (of one replica when replica >= 0) in the tenant's
// cluster, keeping their volumes: claims, Secrets and the VMs themselves stay. It uses
// KubeVirt's restart subresource where the cluster serves it, else deletes the VMIs so that
// runStrategy Always recreates them; a VM with another run strategy would stay down that way,
// so then nothing is touched. A multi-node replica is restarted whole: vLLM's ranks start
// together.
func Restart(ctx context.Context, cfg *rest.Config, t Tenant, job string, replica int32) ([]Restarted, error) {
	what := "cluster of tenant " + t.Name
	c, err := NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", what, cfg.Host, err)
	}
	sel := client.MatchingLabels{v1alpha1.LabelTenant: t.Name, v1alpha1.LabelJob: job}
	if replica >= 0 {
		sel[v1alpha1.LabelReplica] = strconv.Itoa(int(replica))
	}
	var vms kubevirtv1.VirtualMachineList
	if err := c.List(ctx, &vms, client.InNamespace(t.Namespace), sel); err != nil {
		return nil, clusterErr(what, cfg.Host, "list VirtualMachines in namespace "+t.Namespace, err)
	}
	if len(vms.Items) == 0 {
		target := t.Name + "/" + job
		if replica >= 0 {
			target += " replica " + strconv.Itoa(int(replica))
		}
		return nil, fmt.Errorf("%s (%s): no VirtualMachines of %s in namespace %s: has Argo CD synced the job? (inferplane jobs detail %s/%s)",
			what, cfg.Host, target, t.Namespace, t.Name, job)
	}
	slices.SortFunc(vms.Items, func(a, b kubevirtv1.VirtualMachine) int { return slices.Compare(order(&a), order(&b)) })

	served, err := restartServed(cfg)
	if err != nil {
		return nil, clusterErr(what, cfg.Host, "discover "+subresources.String(), err)
	}
	if !served {
		for _, vm := range vms.Items {
			if rs := runStrategyOf(&vm); rs != kubevirtv1.RunStrategyAlways {
				return nil, fmt.Errorf("%s: VirtualMachine %s/%s has runStrategy %s, and the cluster does not serve KubeVirt's restart subresource: deleting its VMI would leave it stopped; nothing was restarted",
					what, t.Namespace, vm.Name, rs)
			}
		}
	}
	var done []Restarted
	for _, vm := range vms.Items {
		how, err := restartOne(ctx, c, cfg, served, t.Namespace, vm.Name)
		if err != nil {
			return done, clusterErr(what, cfg.Host, "restart VirtualMachine "+t.Namespace+"/"+vm.Name, err)
		}
		done = append(done, Restarted{VM: vm.Name, How: how})
	}
	return done, nil
}

func restartOne(ctx context.Context, c client.Client, cfg *rest.Config, served bool, ns, name string) (string, error) {
	if served {
		rc, err := subresourceClient(cfg)
		if err != nil {
			return "", err
		}
		err = rc.Put().Namespace(ns).Resource("virtualmachines").Name(name).SubResource("restart").
			SetHeader("Content-Type", "application/json").Body([]byte("{}")).Do(ctx).Error()
		return BySubresource, err
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmi.Namespace, vmi.Name = ns, name
	switch err := c.Delete(ctx, vmi); {
	case apierrors.IsNotFound(err):
		return NotRunning, nil
	case err != nil:
		return "", err
	}
	return ByDeletingVMI, nil
}

// restartServed says whether the cluster serves virtualmachines/restart (KubeVirt's virt-api,
// aggregated into the API server).
func restartServed(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(withTimeout(cfg))
	if err != nil {
		return false, err
	}
	list, err := dc.ServerResourcesForGroupVersion(subresources.String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "virtualmachines/restart" }), nil
}

func subresourceClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := withTimeout(cfg)
	c.GroupVersion = &subresources
	c.APIPath = "/apis"
	c.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	return rest.RESTClientFor(c)
}

func withTimeout(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Timeout = Timeout
	return c
}

func runStrategyOf(vm *kubevirtv1.VirtualMachine) kubevirtv1.VirtualMachineRunStrategy {
	if vm.Spec.RunStrategy == nil {
		return "unset"
	}
	return *vm.Spec.RunStrategy
}

// order sorts a job's VMs by replica and node rank as numbers (r10 after r9).
func order(vm *kubevirtv1.VirtualMachine) []int {
	r, _ := strconv.Atoi(vm.Labels[v1alpha1.LabelReplica])
	n, _ := strconv.Atoi(vm.Labels[v1alpha1.LabelNodeRank])
	return []int{r, n}
}
