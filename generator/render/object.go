package render

import (
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// object is a Kubernetes object with a typed spec. It exists instead of the upstream structs'
// metav1.ObjectMeta so that the files hold only what we set: no `creationTimestamp: null`, no
// `status: {}`, nothing a reader has to skip.
type object[S any] struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   meta   `json:"metadata"`
	Spec       S      `json:"spec"`
}

// meta is the part of ObjectMeta a rendered object can carry.
type meta struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Finalizers  []string          `json:"finalizers,omitempty"`
}

// jobLabels are the labels of every object of a job.
func (t *tenant) jobLabels(j *job) map[string]string {
	return t.withTier(map[string]string{
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue,
		v1alpha1.LabelTenant:    t.name,
		v1alpha1.LabelJob:       j.name,
	})
}

// withTier adds the tenant's tier, a billing label the meter reads from each VMI: it is the
// tenant's spec.tier and nothing else, so a re-render or a restart never changes it. It labels
// objects and never selects them.
func (t *tenant) withTier(l map[string]string) map[string]string {
	if t.spec.Tier != "" {
		l[v1alpha1.LabelTier] = t.spec.Tier
	}
	return l
}

// replicaLabels are the labels of a replica's objects (its Service) and what selects its pods:
// never the tier, which a tier change would change under running VMs.
func (t *tenant) replicaLabels(j *job, replica int32) map[string]string {
	return map[string]string{
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue,
		v1alpha1.LabelTenant:    t.name,
		v1alpha1.LabelJob:       j.name,
		v1alpha1.LabelReplica:   itoa(replica),
	}
}

// nodeLabels are the workload contract's labels of one node (VM) of a replica, also used for
// its cloud-init Secret and model-cache PVC.
func (t *tenant) nodeLabels(j *job, replica, rank int32) map[string]string {
	l := map[string]string{
		v1alpha1.LabelManagedBy:   v1alpha1.ManagedByValue,
		v1alpha1.LabelTenant:      t.name,
		v1alpha1.LabelJob:         j.name,
		v1alpha1.LabelReplica:     itoa(replica),
		v1alpha1.LabelNodeRank:    itoa(rank),
		v1alpha1.LabelRole:        policy.Role(rank),
		v1alpha1.LabelNodeType:    j.nodeType.Name,
		v1alpha1.LabelRuntime:     string(j.runtime),
		v1alpha1.LabelModelMaster: j.master,
	}
	if j.serving(rank) {
		l[v1alpha1.LabelServing] = v1alpha1.ServingValue
	}
	return t.withTier(l)
}
