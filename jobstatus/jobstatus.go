// Package jobstatus is the one way the CLI (on the operator's files) and the product API read
// where a tenant's jobs are: which clusters hold a planned tenant's objects, the readiness
// stages of its jobs from those objects and the gateway's rotation, and the loop that follows
// a job until it serves or fails. The reads are behind small interfaces (Cluster, Gateway,
// Logs), so each caller brings its own: the CLI reads the clusters on every call, the API
// its watch caches.
package jobstatus

import (
	"context"
	"time"

	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/joblogs"
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

// Logs reaches the console logs of a tenant's cluster, where the inference agents' reports
// are read (package joblogs).
type Logs interface {
	GuestLogs(ctx context.Context, t cluster.Tenant) (joblogs.Cluster, error)
}

// Reader reads the stages of a tenant's jobs.
type Reader struct {
	Cluster Cluster
	Gateway Gateway
	// Logs reads the agents' reports of the running VMs whose stage they would change
	// (lifecycle.AgentWanted); nil, or a cluster whose logs cannot be read, leaves the VMIs'
	// own stages.
	Logs Logs
	// Cache keeps the agents' reports briefly (nil: read every time); Now is the time their
	// age is measured at (nil: time.Now).
	Cache *joblogs.StatusCache
	Now   func() time.Time
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
	agents := agentReader{r: r, t: t}
	var out []lifecycle.JobStatus
	for _, j := range Jobs(tp, only) {
		obs := objs.Job(j.Name)
		obs.Gateway, obs.GatewayError = GatewayView(rot, gwErr, j.Name)
		obs.Agent = agents.reports(ctx, j, obs)
		out = append(out, lifecycle.Compute(j, obs))
	}
	return out, nil
}

// agentReader reads the agents' reports of one tenant's jobs, reaching its cluster's logs
// once, when a job first needs them.
type agentReader struct {
	r       Reader
	t       cluster.Tenant
	cl      joblogs.Cluster
	reached bool
}

func (a *agentReader) reports(ctx context.Context, j lifecycle.Job, obs lifecycle.Observed) map[string]*lifecycle.AgentReport {
	names := lifecycle.AgentWanted(j, obs)
	if len(names) == 0 || a.r.Logs == nil {
		return nil
	}
	if !a.reached {
		a.reached = true
		if cl, err := a.r.Logs.GuestLogs(ctx, a.t); err == nil {
			a.cl = cl
		}
	}
	if a.cl == nil {
		return nil
	}
	now := time.Now
	if a.r.Now != nil {
		now = a.r.Now
	}
	return joblogs.AgentReports(ctx, a.cl, a.r.Cache, a.t.Namespace, a.t.Name, j.Name, obs.VMIs, names, now())
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
