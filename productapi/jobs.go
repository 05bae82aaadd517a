package productapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/jobstatus"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// Path parameters, with the rules huma checks before a handler runs (a name that is no DNS
// label could never be a tenant or a job).
type TenantParam struct {
	Tenant string `path:"tenant" doc:"The tenant" pattern:"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" maxLength:"63"`
}

type JobParams struct {
	TenantParam
	Job string `path:"job" doc:"The job" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"63"`
}

type body[T any] struct{ Body T }

// plannedTenant is the tenant's plan, or a Problem: the inputs of a tenant that do not load
// (someone pushed a broken file by hand) are reported with generate's problems.
func (s *Server) plannedTenant(ctx context.Context, v *view, tenant string) (*plan.TenantPlan, error) {
	p, err := s.plan(ctx, v, tenant)
	if err != nil {
		if len(problem.Problems(err)) > 0 {
			pr := refusal(err)
			pr.Status, pr.Title = http.StatusInternalServerError, http.StatusText(http.StatusInternalServerError)
			pr.Detail = fmt.Sprintf("the inputs of tenant %s at %s do not load (fix them in the inputs repository)", tenant, short(v.commit))
			return nil, pr
		}
		return nil, s.internal("planning tenant "+tenant, err)
	}
	tp := tenantPlan(p)
	if tp == nil {
		return nil, newProblem(http.StatusNotFound, fmt.Sprintf("no tenant %q in the inputs", tenant))
	}
	return tp, nil
}

func (s *Server) listJobs(ctx context.Context, in *TenantParam) (*body[apiv1.JobList], error) {
	v, _, err := s.authorize(ctx, in.Tenant, access.Read)
	if err != nil {
		return nil, err
	}
	tp, err := s.plannedTenant(ctx, v, in.Tenant)
	if err != nil {
		return nil, err
	}
	sts := s.stages(ctx, tp, "")
	out := &body[apiv1.JobList]{Body: apiv1.JobList{Tenant: in.Tenant, InputsCommit: v.commit, Items: []apiv1.Job{}}}
	for i := range tp.Jobs {
		out.Body.Items = append(out.Body.Items, s.jobView(&tp.Jobs[i], sts[tp.Jobs[i].Job.Name]))
	}
	return out, nil
}

// jobAt finds a job in the current inputs; a job not there is looked for once more after a
// fetch, so that a client reading right after its write on another replica finds it.
func (s *Server) jobAt(ctx context.Context, tenant, job string, a access.Action) (*view, *plan.TenantPlan, *plan.JobPlan, error) {
	for attempt := 0; ; attempt++ {
		v, _, err := s.authorize(ctx, tenant, a)
		if err != nil {
			return nil, nil, nil, err
		}
		tp, err := s.plannedTenant(ctx, v, tenant)
		if err != nil {
			return nil, nil, nil, err
		}
		if jp := tp.Job(job); jp != nil {
			return v, tp, jp, nil
		}
		if attempt > 0 {
			return nil, nil, nil, newProblem(http.StatusNotFound, fmt.Sprintf("tenant %s has no job %q (inputs %s)", tenant, job, short(v.commit)))
		}
		if err := s.Refresh(ctx); err != nil {
			s.log.Warn("inputs: fetch failed", "error", err)
		}
	}
}

func (s *Server) getJob(ctx context.Context, in *JobParams) (*body[apiv1.JobDetail], error) {
	v, tp, jp, err := s.jobAt(ctx, in.Tenant, in.Job, access.Read)
	if err != nil {
		return nil, err
	}
	st := s.stages(ctx, tp, in.Job)[in.Job]
	return &body[apiv1.JobDetail]{Body: s.jobDetail(v, jp, st)}, nil
}

// jobView is a job as lists show it.
func (s *Server) jobView(jp *plan.JobPlan, st lifecycle.JobStatus) apiv1.Job {
	j := &jp.Job
	tenant := j.Labels[v1alpha1.LabelTenant]
	out := apiv1.Job{Tenant: tenant, Name: j.Name, Model: cmp.Or(j.Spec.Model, jp.Master.Spec.Model), Runtime: string(j.Spec.EffectiveRuntime()),
		Variant: j.Spec.Variant, NodeType: jp.NodeType.Name, Replicas: j.Spec.Replicas,
		GPUsPerReplica: jp.Master.Spec.PerReplicaGPUCount, NodesPerReplica: jp.NodesPerReplica,
		RequireAPIKey: j.Spec.APIKeyRequired(), Stage: string(st.Stage), Since: timePtr(st.Since), Reason: st.Reason}
	if s.opts.Domain != "" {
		out.Endpoint = gatewayv1.URL(tenant, j.Name, s.opts.Domain)
	}
	return out
}

func (s *Server) jobDetail(v *view, jp *plan.JobPlan, st lifecycle.JobStatus) apiv1.JobDetail {
	m := jp.Master
	from := "hand-written master " + m.Name
	switch {
	case m.Spec.Source != nil:
		from = fmt.Sprintf("derived from recipe %s for %s", m.Spec.Source.Recipe, m.Spec.HardwareProfile)
	case m.Spec.Runtime == "parakeet" && m.Spec.Image == "":
		from = "the built-in Parakeet master"
	}
	d := apiv1.JobDetail{Job: s.jobView(jp, st), InputsCommit: v.commit, GatewayError: st.GatewayError, ReplicaList: []apiv1.Replica{},
		Master: apiv1.Master{Name: m.Name, Model: m.Spec.Model, Image: jp.Image, ImageDigest: m.Spec.ImageDigest,
			PerReplicaGPUCount: m.Spec.PerReplicaGPUCount, Args: jp.Args, From: from}}
	for _, r := range st.Replicas {
		rv := apiv1.Replica{Replica: r.Replica, Stage: string(r.Stage), Since: timePtr(r.Since), Reason: r.Reason, Nodes: []apiv1.Node{}}
		for _, n := range r.Nodes {
			node := apiv1.Node{VM: n.VM, Node: n.Node, Phase: n.Phase, IPs: n.IPs, Ready: n.Ready}
			if n.Agent != nil {
				node.Agent = agentStatus(&n.Agent.Status, n.Agent.At)
			}
			rv.Nodes = append(rv.Nodes, node)
		}
		d.ReplicaList = append(d.ReplicaList, rv)
	}
	if a := st.Application; a != nil {
		d.Application = &apiv1.Application{Name: a.Name, Sync: a.Sync, Health: a.Health, Revision: a.Revision}
	}
	if g := st.Gateway; g != nil {
		d.Gateway = &apiv1.GatewayView{Known: g.Known, Status: g.Status, Reasons: g.Reasons, Ready: g.Ready, Total: g.Total}
	}
	return d
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// stages computes the readiness stages of a tenant's jobs (of job only, when set) from the
// watch caches and the gateway: without a host cluster, or when a cluster cannot be read, each
// stage is unknown and its reason says why.
func (s *Server) stages(ctx context.Context, tp *plan.TenantPlan, only string) map[string]lifecycle.JobStatus {
	out := map[string]lifecycle.JobStatus{}
	reason := s.opts.NoClusterReason
	if s.opts.Clusters != nil {
		r := jobstatus.Reader{Cluster: s.opts.Clusters, Gateway: s.gw, Cache: &s.statuses, Now: s.opts.Now}
		if gl, ok := s.opts.Clusters.(GuestLogs); ok {
			r.Logs = stageLogs{s, gl}
		}
		sts, err := r.Read(ctx, tp, only)
		if err == nil {
			for _, st := range sts {
				out[st.Job] = st
			}
			return out
		}
		reason = "the clusters could not be read: " + err.Error()
	}
	for _, j := range jobstatus.Jobs(tp, only) {
		out[j.Name] = jobstatus.Unknown(j, reason)
	}
	return out
}

type restartInput struct {
	JobParams
	Body apiv1.Restart
}

func (s *Server) restartJob(ctx context.Context, in *restartInput) (*body[apiv1.Restarted], error) {
	_, tp, jp, err := s.jobAt(ctx, in.Tenant, in.Job, access.WriteJobs)
	if err != nil {
		return nil, err
	}
	replica := int32(-1)
	if r := in.Body.Replica; r != nil {
		if *r >= jp.Job.Spec.Replicas {
			return nil, newProblem(http.StatusUnprocessableEntity, fmt.Sprintf("replica %d: job %s/%s has %d replicas (0 to %d)", *r, in.Tenant, in.Job, jp.Job.Spec.Replicas, jp.Job.Spec.Replicas-1))
		}
		replica = *r
	}
	if s.opts.Clusters == nil {
		return nil, newProblem(http.StatusServiceUnavailable, "restart needs the clusters: "+s.opts.NoClusterReason)
	}
	done, err := s.opts.Clusters.Restart(ctx, jobstatus.Tenant(tp), in.Job, replica)
	out := apiv1.Restarted{Tenant: in.Tenant, Job: in.Job, VMs: []apiv1.RestartedVM{}}
	for _, d := range done {
		out.VMs = append(out.VMs, apiv1.RestartedVM{VM: d.VM, How: d.How})
	}
	if err != nil {
		s.log.Warn("restart failed", "tenant", in.Tenant, "job", in.Job, "restarted", len(done), "error", err)
		return nil, newProblem(http.StatusBadGateway, fmt.Sprintf("restart of %s/%s failed after %d VM(s): %v", in.Tenant, in.Job, len(done), err))
	}
	s.log.Info("job restarted", "tenant", in.Tenant, "job", in.Job, "replica", replica, "vms", len(done), "by", identity(ctx).Subject)
	return &body[apiv1.Restarted]{Body: out}, nil
}
