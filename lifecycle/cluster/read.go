package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/lifecycle"
)

// Timeout bounds each call to a cluster, so an unreachable one is reported, not waited on.
const Timeout = 20 * time.Second

// ApplicationGVK is Argo CD's Application kind.
var ApplicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// Tenant is where a tenant's objects are.
type Tenant struct {
	Name string
	// Cluster is the tenant's Argo CD destination name; Namespace holds its workloads there.
	Cluster, Namespace string
	// ArgoCDNamespace holds the tenant's Applications in the host cluster.
	ArgoCDNamespace string
}

// Objects are what the clusters hold of one tenant's jobs.
type Objects struct {
	// Apps are the tenant's Applications by job; nil when the host was not read.
	Apps map[string]*lifecycle.Application
	VMs  []kubevirtv1.VirtualMachine
	VMIs []kubevirtv1.VirtualMachineInstance
	PVCs []corev1.PersistentVolumeClaim
	// Events are the events about claims in the tenant's namespace.
	Events []corev1.Event
}

// Job picks one job's objects, by its label, as lifecycle.Compute wants them.
func (o *Objects) Job(job string) lifecycle.Observed {
	obs := lifecycle.Observed{App: o.Apps[job]}
	mine := func(labels map[string]string) bool { return labels[v1alpha1.LabelJob] == job }
	claims := map[string]bool{}
	for _, vm := range o.VMs {
		if mine(vm.Labels) {
			obs.VMs = append(obs.VMs, vm)
		}
	}
	for _, vmi := range o.VMIs {
		if mine(vmi.Labels) {
			obs.VMIs = append(obs.VMIs, vmi)
		}
	}
	for _, pvc := range o.PVCs {
		if mine(pvc.Labels) {
			obs.PVCs = append(obs.PVCs, pvc)
			claims[pvc.Name] = true
		}
	}
	for _, e := range o.Events {
		if claims[e.InvolvedObject.Name] {
			obs.Events = append(obs.Events, e)
		}
	}
	return obs
}

// Scheme knows the kinds read and written here.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // a static list: only a programming error gets here
		}
	}
	return s
}

// NewClient is a client for cfg with the package's scheme and each call bounded by Timeout.
func NewClient(cfg *rest.Config) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = Timeout
	cfg.UserAgent = "inferplane-jobs"
	return client.New(cfg, client.Options{Scheme: Scheme()})
}

// ReadApplications lists a tenant's Applications in the host cluster, by job.
func ReadApplications(ctx context.Context, c client.Reader, host string, t Tenant) (map[string]*lifecycle.Application, error) {
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(ApplicationGVK.GroupVersion().WithKind("ApplicationList"))
	err := c.List(ctx, &list, client.InNamespace(t.ArgoCDNamespace), client.MatchingLabels{v1alpha1.LabelTenant: t.Name})
	if err != nil {
		return nil, clusterErr("host cluster", host, "list Argo CD Applications in namespace "+t.ArgoCDNamespace, err)
	}
	apps := map[string]*lifecycle.Application{}
	for i := range list.Items {
		u := &list.Items[i]
		var app lifecycle.Application
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &app); err != nil {
			return nil, fmt.Errorf("host cluster: Application %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		if job := u.GetLabels()[v1alpha1.LabelJob]; job != "" {
			apps[job] = &app
		}
	}
	return apps, nil
}

// ReadWorkloads lists a tenant's VMs, VMIs, claims and claim events in its own cluster.
func ReadWorkloads(ctx context.Context, c client.Reader, host string, t Tenant, into *Objects) error {
	what := "cluster of tenant " + t.Name
	sel := client.MatchingLabels{v1alpha1.LabelTenant: t.Name}
	ns := client.InNamespace(t.Namespace)
	var vms kubevirtv1.VirtualMachineList
	if err := c.List(ctx, &vms, ns, sel); err != nil {
		return clusterErr(what, host, "list VirtualMachines in namespace "+t.Namespace, err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := c.List(ctx, &vmis, ns, sel); err != nil {
		return clusterErr(what, host, "list VirtualMachineInstances in namespace "+t.Namespace, err)
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := c.List(ctx, &pvcs, ns, sel); err != nil {
		return clusterErr(what, host, "list PersistentVolumeClaims in namespace "+t.Namespace, err)
	}
	var events corev1.EventList
	if err := c.List(ctx, &events, ns, client.MatchingFieldsSelector{
		Selector: fields.OneTermEqualSelector("involvedObject.kind", "PersistentVolumeClaim")}); err != nil {
		return clusterErr(what, host, "list events in namespace "+t.Namespace, err)
	}
	into.VMs, into.VMIs, into.PVCs, into.Events = vms.Items, vmis.Items, pvcs.Items, events.Items
	return nil
}

// clusterErr names the cluster, its address and what was being done.
func clusterErr(what, host, doing string, err error) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s (%s): %s: the kind is not served there (are KubeVirt's and Argo CD's CRDs installed?): %w", what, host, doing, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s (%s): %s: no answer within %s: %w", what, host, doing, Timeout, err)
	}
	return fmt.Errorf("%s (%s): %s: %w", what, host, doing, err)
}

// Read reads a tenant's objects: its Applications from the host cluster (when host is true)
// and its workloads from its own cluster.
func Read(ctx context.Context, a Access, t Tenant, host bool) (*Objects, error) {
	objs := &Objects{}
	if host {
		cfg, err := a.Host(ctx)
		if err != nil {
			return nil, err
		}
		c, err := NewClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("host cluster (%s): %w", cfg.Host, err)
		}
		if objs.Apps, err = ReadApplications(ctx, c, cfg.Host, t); err != nil {
			return nil, err
		}
	}
	cfg, err := a.Tenant(ctx, t.Name, t.Cluster)
	if err != nil {
		return nil, err
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster of tenant %s (%s): %w", t.Name, cfg.Host, err)
	}
	if err := ReadWorkloads(ctx, c, cfg.Host, t, objs); err != nil {
		return nil, err
	}
	return objs, nil
}

// Direct reads a tenant's objects from the clusters on every call (Read with the host
// cluster), for a caller without watch caches: the CLI.
type Direct struct{ Access Access }

// Objects reads the tenant's Applications and workloads now.
func (d Direct) Objects(ctx context.Context, t Tenant) (*Objects, error) {
	return Read(ctx, d.Access, t, true)
}
