// Package jobstatus is the one way the CLI (on the operator's files) and the product API read
// where a tenant's jobs are: which clusters hold a planned tenant's objects, the readiness
// stages of its jobs from those objects and the gateway's rotation, and the loop that follows
// a job until it serves or fails. The reads are behind small interfaces (Cluster, Gateway,
// Agents), so each caller brings its own: the CLI reads the clusters on every call, the API
// its watch caches.
package jobstatus

import (
	"context"

	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
	"github.com/inferplane/inferplane/policy"
)

// Tenant is where a planned tenant's objects are in the clusters.
func Tenant(tp *plan.TenantPlan) cluster.Tenant {
	n := tp.Tenant.Name
	return cluster.Tenant{Name: n, Cluster: render.Destination(n, &tp.Tenant.Spec), Namespace: n,
		ArgoCDNamespace: render.ArgoCDNamespace(&tp.Tenant.Spec)}
}

// Cluster reads a tenant's Applications (host cluster) and workloads (its own cluster).
type Cluster interface {
	Objects(ctx context.Context, t cluster.Tenant) (*cluster.Objects, error)
}

// Gateway is the gateway's view of a tenant's endpoints, by job.
type Gateway interface {
	Rotations(ctx context.Context, tenant string) (map[string]*lifecycle.Rotation, error)
}

// Agents reads the inference agents' reports of the VMs whose stage they would change
// (lifecycle.AgentWanted); nil when none could be read.
type Agents interface {
	AgentReports(ctx context.Context, t cluster.Tenant, j lifecycle.Job, obs lifecycle.Observed) map[string]*lifecycle.AgentReport
}

// Reader reads the stages of a tenant's jobs. Agents may be nil (no agent is read).
type Reader struct {
	Cluster Cluster
	Gateway Gateway
	Agents  Agents
}

// Read computes the stages of the tenant's jobs (of job only, when set), in the plan's order.
// The clusters are read first; the gateway only when they answered. An error says the
// clusters could not be read; a gateway that does not answer is in each status instead.
func (r Reader) Read(ctx context.Context, tp *plan.TenantPlan, only string) ([]lifecycle.JobStatus, error) {
	t := Tenant(tp)
	objs, err := r.Cluster.Objects(ctx, t)
	if err != nil {
		return nil, err
	}
	rot, gwErr := r.Gateway.Rotations(ctx, tp.Tenant.Name)
	var out []lifecycle.JobStatus
	for _, j := range Jobs(tp, only) {
		obs := objs.Job(j.Name)
		obs.Gateway, obs.GatewayError = GatewayView(rot, gwErr, j.Name)
		if r.Agents != nil {
			obs.Agent = r.Agents.AgentReports(ctx, t, j, obs)
		}
		out = append(out, lifecycle.Compute(j, obs))
	}
	return out, nil
}

// Jobs are the planned tenant's jobs (job only, when set) as the stages need them.
func Jobs(tp *plan.TenantPlan, only string) []lifecycle.Job {
	var out []lifecycle.Job
	for _, jp := range tp.Jobs {
		if only != "" && jp.Job.Name != only {
			continue
		}
		out = append(out, lifecycle.Job{Tenant: tp.Tenant.Name, Name: jp.Job.Name, Replicas: jp.Job.Spec.Replicas, NodesPerReplica: jp.NodesPerReplica})
	}
	return out
}

// GatewayView is a job's endpoint in the gateway's answer: nil with why when the gateway
// could not be asked, an empty rotation when it has no such endpoint (yet).
func GatewayView(rot map[string]*lifecycle.Rotation, err error, job string) (*lifecycle.Rotation, string) {
	switch {
	case err != nil:
		return nil, err.Error()
	case rot[job] != nil:
		return rot[job], ""
	}
	return &lifecycle.Rotation{}, ""
}

// Unknown is a job whose clusters were not read, and why: every replica and its VMs unknown.
func Unknown(j lifecycle.Job, reason string) lifecycle.JobStatus {
	st := lifecycle.JobStatus{Tenant: j.Tenant, Job: j.Name, Stage: lifecycle.StageUnknown, Reason: reason, Replicas: []lifecycle.ReplicaStatus{}}
	for r := range j.Replicas {
		rs := lifecycle.ReplicaStatus{Replica: r, Stage: lifecycle.StageUnknown, Reason: reason}
		for n := range max(j.NodesPerReplica, 1) {
			rs.Nodes = append(rs.Nodes, lifecycle.NodeInfo{VM: policy.VMName(j.Name, r, n)})
		}
		st.Replicas = append(st.Replicas, rs)
	}
	return st
}

// Settled: a stage that will not move by itself: serving, failed, or the model server
// crash-looping (its cause, an out-of-memory or a wrong revision, needs a change).
func Settled(s lifecycle.Stage) bool {
	return s == lifecycle.StageServing || s == lifecycle.StageFailed || s == lifecycle.StageCrashLooping
}
