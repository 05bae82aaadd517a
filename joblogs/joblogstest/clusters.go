package joblogstest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

// Clusters is a TEST DOUBLE of the product API's view of the clusters (its ClusterReader, and
// GuestLogs): fixed objects, and the virt-launcher pods and console logs of Pods.
type Clusters struct {
	Objs *cluster.Objects
	Pods *Cluster
}

// Objects implements productapi.ClusterReader.
func (c Clusters) Objects(context.Context, cluster.Tenant) (*cluster.Objects, error) {
	return c.Objs, nil
}

// Restart implements productapi.ClusterReader (it restarts nothing).
func (c Clusters) Restart(context.Context, cluster.Tenant, string, int32) ([]cluster.Restarted, error) {
	return nil, nil
}

// GuestLogs implements productapi.GuestLogs.
func (c Clusters) GuestLogs(context.Context, cluster.Tenant) (joblogs.Cluster, error) {
	return c.Pods, nil
}

// Running is what the clusters hold of a job whose Application is synced and whose VMs run
// on a node but are not ready yet (the model server loads): each VMI's UID is the one Pod
// labels its pod with ("vmi-virt-launcher-<vm>"), so name the pods virt-launcher-<vm>.
func Running(job string, vms ...string) *cluster.Objects {
	o := &cluster.Objects{Apps: map[string]*lifecycle.Application{job: {ObjectMeta: metav1.ObjectMeta{Name: job},
		Status: lifecycle.ApplicationStatus{Sync: lifecycle.SyncStatus{Status: lifecycle.SyncSynced}}}}}
	for _, name := range vms {
		labels := map[string]string{v1alpha1.LabelJob: job, v1alpha1.LabelServing: v1alpha1.ServingValue}
		o.VMs = append(o.VMs, kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
		o.VMIs = append(o.VMIs, kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			UID: types.UID("vmi-virt-launcher-" + name)},
			Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, NodeName: "gpu-h100-07"}})
	}
	return o
}
