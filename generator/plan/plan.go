// Package plan resolves the generator's inputs into a plan: every job with its master, its node
// type and its replica layout, checked and sorted, ready for a pure render.
package plan

import (
	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Plan is everything the generator will render, one entry per tenant, sorted by tenant name.
type Plan struct {
	Tenants []TenantPlan
}

// TenantPlan is one tenant and its jobs.
type TenantPlan struct {
	Tenant v1alpha1.Tenant
	// NodeTypes are the node types the tenant's jobs use, sorted by name.
	NodeTypes []v1alpha1.NodeType
	// Jobs are sorted by name.
	Jobs []JobPlan
}

// Job is the tenant's job of that name, or nil.
func (tp *TenantPlan) Job(name string) *JobPlan {
	for i := range tp.Jobs {
		if tp.Jobs[i].Job.Name == name {
			return &tp.Jobs[i]
		}
	}
	return nil
}

// JobPlan is one job, resolved.
type JobPlan struct {
	// Job is the job as written (name, spec), with its tenant in Job.Labels[LabelTenant].
	Job v1alpha1.ManagedInferenceJob
	// Master is the master the job runs, derived from a recipe or written by hand; its Name is
	// set and its spec is what the cluster will see.
	Master v1alpha1.ModelMaster
	// NodeType is the node type the job's replicas run on.
	NodeType v1alpha1.NodeType
	// NodesPerReplica is how many nodes (VMs) one replica spans; GPUsPerNode how many GPUs each
	// of those VMs takes (NodesPerReplica * GPUsPerNode == Master.Spec.PerReplicaGPUCount).
	NodesPerReplica int32
	GPUsPerNode     int32
	// DataParallelLocal is set when a multi-node replica starts with vLLM's data-parallel
	// launcher: each node runs that many data-parallel ranks and serves requests
	// (policy.Layout.Serving).
	DataParallelLocal int32
	// Image, Args and Env are what the model server runs with: the master's, with the job's
	// extra args applied (last one wins per flag). Launcher flags for multi-node (--nnodes,
	// --node-rank, --master-addr, --headless; --data-parallel-address,
	// --data-parallel-start-rank) are added by the renderer per node.
	Image string
	Args  []string
	Env   []v1alpha1.EnvVar
	// ModelCacheSize is the size of each node's model cache volume (default applied).
	ModelCacheSize string
	// SourceFile is the job's input file, for messages.
	SourceFile string
}
