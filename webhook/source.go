package webhook

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// ClientSource is a policy.Source, and a policy.Counter, over a controller-runtime client. Reader is normally the manager's
// cached client (informers, no API round trip per admission). Live, when set, is asked again
// when Reader finds nothing: an object created a moment ago may not have reached the cache yet,
// and a denial for that reason would only make Argo CD retry.
type ClientSource struct {
	Reader client.Reader
	Live   client.Reader
}

// Tenant implements policy.Source.
func (c ClientSource) Tenant(ctx context.Context, name string) (*v1alpha1.Tenant, error) {
	return clientGet(ctx, c, name, &v1alpha1.Tenant{})
}

// NodeType implements policy.Source.
func (c ClientSource) NodeType(ctx context.Context, name string) (*v1alpha1.NodeType, error) {
	return clientGet(ctx, c, name, &v1alpha1.NodeType{})
}

// Master implements policy.Source.
func (c ClientSource) Master(ctx context.Context, name string) (*v1alpha1.ModelMaster, error) {
	return clientGet(ctx, c, name, &v1alpha1.ModelMaster{})
}

// NodeTypeNames implements policy.Source.
func (c ClientSource) NodeTypeNames(ctx context.Context) ([]string, error) {
	var list v1alpha1.NodeTypeList
	if err := c.Reader.List(ctx, &list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, nt := range list.Items {
		names = append(names, nt.Name)
	}
	slices.Sort(names)
	return names, nil
}

// Running implements policy.Counter: the tenant's ManagedInferenceJobs, VirtualMachines and
// VMIs no VM owns in namespace, listed live (through Live when set: a VM created a moment ago
// counts at once, where the cache could miss it), so the quota counts what the cluster holds.
// Any list that fails fails the count, and the admission with it.
func (c ClientSource) Running(ctx context.Context, tenant, namespace string) (*policy.Running, error) {
	r := c.Reader
	if c.Live != nil {
		r = c.Live
	}
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelTenant: tenant}}
	var jobs v1alpha1.ManagedInferenceJobList
	if err := r.List(ctx, &jobs, opts...); err != nil {
		return nil, fmt.Errorf("list ManagedInferenceJobs: %w", err)
	}
	var vms kubevirtv1.VirtualMachineList
	if err := r.List(ctx, &vms, opts...); err != nil {
		return nil, fmt.Errorf("list VirtualMachines: %w", err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := r.List(ctx, &vmis, opts...); err != nil {
		return nil, fmt.Errorf("list VirtualMachineInstances: %w", err)
	}
	out := &policy.Running{}
	for i := range jobs.Items {
		out.Jobs = append(out.Jobs, policy.JobClaim(&jobs.Items[i]))
	}
	for i := range vms.Items {
		vm := &vms.Items[i]
		if t := vm.Spec.Template; t != nil {
			out.Nodes = append(out.Nodes, nodeClaim(vm.Name, t.ObjectMeta.Labels, len(t.Spec.Domain.Devices.GPUs)))
		}
	}
	for i := range vmis.Items {
		if vmi := &vmis.Items[i]; !policy.OwnedByVM(vmi) {
			out.Nodes = append(out.Nodes, nodeClaim(vmi.Name, vmi.Labels, len(vmi.Spec.Domain.Devices.GPUs)))
		}
	}
	return out, nil
}

func nodeClaim(name string, labels map[string]string, gpus int) policy.NodeClaim {
	return policy.NodeClaim{Name: name, Job: labels[v1alpha1.LabelJob], Replica: labels[v1alpha1.LabelReplica], GPUs: int64(gpus)}
}

func clientGet[T client.Object](ctx context.Context, c ClientSource, name string, obj T) (T, error) {
	var zero T
	if name == "" {
		// The API server would answer with a confusing "resource name may not be empty".
		return zero, &policy.NotFoundError{Kind: policy.RefOf(obj).Kind, Name: name}
	}
	err := c.Reader.Get(ctx, client.ObjectKey{Name: name}, obj)
	if apierrors.IsNotFound(err) && c.Live != nil {
		err = c.Live.Get(ctx, client.ObjectKey{Name: name}, obj)
	}
	if apierrors.IsNotFound(err) {
		return zero, &policy.NotFoundError{Kind: policy.RefOf(obj).Kind, Name: name}
	}
	if err != nil {
		return zero, err
	}
	return obj, nil
}
