package productapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/lifecycle/jobfile"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

type createJobInput struct {
	TenantParam
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"Makes a retried create write once"`
	Body           apiv1.JobCreate
}

type createJobOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     apiv1.JobWritten
}

func (s *Server) createJob(ctx context.Context, in *createJobInput) (*createJobOutput, error) {
	if _, _, err := s.authorize(ctx, in.Tenant, access.WriteJobs); err != nil {
		return nil, err
	}
	b := in.Body
	if errs := policy.CheckJobName(field.NewPath("name"), b.Name, max(b.Replicas, 1), 1); len(errs) > 0 {
		return nil, fieldProblems(errs)
	}
	reqBody, _ := json.Marshal(b)
	w, err := s.write(ctx, change{
		tenant:  in.Tenant,
		message: fmt.Sprintf("%s: create job %s (%s)", in.Tenant, b.Name, b.Model),
		idemKey: in.IdempotencyKey, request: "POST " + in.Tenant + "/jobs " + string(reqBody),
		apply: func(ctx context.Context, t *inputsrepo.Tree) error {
			return s.applyCreate(ctx, t, in.Tenant, b)
		},
	})
	if err != nil {
		return nil, err
	}
	v, _, err := s.authorize(ctx, in.Tenant, access.Read)
	if err != nil {
		return nil, err
	}
	out := &createJobOutput{Status: http.StatusCreated, Location: Prefix + "/tenants/" + in.Tenant + "/jobs/" + b.Name}
	out.Body.Write = w.w
	tp := w.tp // the tenant as the write's check planned it
	if tp == nil {
		tp, err = s.plannedTenant(ctx, v, in.Tenant)
	}
	if err == nil {
		if jp := tp.Job(b.Name); jp != nil {
			out.Body.Job = s.jobView(jp, s.stages(ctx, tp, b.Name)[b.Name])
			return out, nil
		}
	}
	// Replayed after the job was deleted again, or the fetch lags: the write's own words.
	out.Body.Job = apiv1.Job{Tenant: in.Tenant, Name: b.Name, Model: b.Model, Stage: "unknown", Reason: "the job is not in the inputs this replica has fetched"}
	return out, nil
}

// applyCreate writes the job's file with the defaults `jobs create` derives: the runtime of the
// Parakeet model, the tenant's only allowed node type, the master's GPUs per replica.
func (s *Server) applyCreate(ctx context.Context, t *inputsrepo.Tree, tenant string, b apiv1.JobCreate) error {
	v := &view{tree: t}
	tp, err := s.plan(ctx, v, tenant)
	if err != nil {
		return err
	}
	spec := v1alpha1.ManagedInferenceJobSpec{Model: b.Model, Runtime: v1alpha1.Runtime(b.Runtime), Variant: b.Variant,
		Strategy: b.Strategy, NodeType: b.NodeType, GPUCount: b.GPUCount, Replicas: max(b.Replicas, 1),
		ModelCacheSize: b.ModelCacheSize, Features: b.Features, RequireAPIKey: b.RequireAPIKey}
	nj, err := jobfile.New(tp.Inputs, tp.Book, tenantsDir, tenant, b.Name, spec,
		"# Written by the product API (POST /api/v1/tenants/"+tenant+"/jobs); edit it like any job file.\n", false)
	if e := (*jobfile.ExistsError)(nil); errors.As(err, &e) {
		return inputsrepo.Conflictf("%v; delete it first or change its replicas", err)
	}
	if err != nil {
		return err
	}
	p := path.Join(tenantsDir, nj.Rel)
	if _, err := fs.Stat(t, p); err == nil {
		return inputsrepo.Conflictf("file %s exists", p)
	}
	job := &v1alpha1.ManagedInferenceJob{Spec: nj.Spec}
	job.Name = b.Name
	if err := checkQuota(tp, tenant, job, p); err != nil {
		return err
	}
	data := nj.Data
	return t.WriteFile(p, data)
}

type deleteJobInput struct{ JobParams }

func (s *Server) deleteJob(ctx context.Context, in *deleteJobInput) (*body[apiv1.JobDeleted], error) {
	if _, _, _, err := s.jobAt(ctx, in.Tenant, in.Job, access.WriteJobs); err != nil {
		return nil, err
	}
	w, err := s.write(ctx, change{
		tenant:  in.Tenant,
		message: fmt.Sprintf("%s: delete job %s", in.Tenant, in.Job),
		apply: func(ctx context.Context, t *inputsrepo.Tree) error {
			p, err := s.jobFileIn(ctx, t, in.Tenant, in.Job)
			if err != nil {
				return err
			}
			return t.Remove(p)
		},
	})
	if err != nil {
		return nil, err
	}
	return &body[apiv1.JobDeleted]{Body: apiv1.JobDeleted{Tenant: in.Tenant, Name: in.Job, Write: w.w}}, nil
}

// jobFileIn is the file that defines a job in a tree; a job that is not there (deleted
// meanwhile) is a conflict.
func (s *Server) jobFileIn(ctx context.Context, t *inputsrepo.Tree, tenant, job string) (string, error) {
	tp, err := s.plan(ctx, &view{tree: t}, tenant)
	if err != nil {
		return "", err
	}
	rel, err := jobfile.Find(tp.Inputs, tenantsDir, tenant, job)
	if err != nil {
		return "", inputsrepo.Conflictf("job %s/%s no longer exists in the inputs (deleted meanwhile)", tenant, job)
	}
	return path.Join(tenantsDir, rel), nil
}

type replicasInput struct {
	JobParams
	Body apiv1.ReplicasChange
}

func (s *Server) setReplicas(ctx context.Context, in *replicasInput) (*body[apiv1.JobWritten], error) {
	if _, _, _, err := s.jobAt(ctx, in.Tenant, in.Job, access.ScaleJobs); err != nil {
		return nil, err
	}
	n := in.Body.Replicas
	if errs := policy.CheckJobName(field.NewPath("name"), in.Job, max(n, 1), 1); len(errs) > 0 {
		return nil, fieldProblems(errs)
	}
	w, err := s.write(ctx, change{
		tenant:  in.Tenant,
		message: fmt.Sprintf("%s: job %s to %d replicas", in.Tenant, in.Job, n),
		apply: func(ctx context.Context, t *inputsrepo.Tree) error {
			p, err := s.jobFileIn(ctx, t, in.Tenant, in.Job)
			if err != nil {
				return err
			}
			if err := s.checkReplicasQuota(ctx, t, in.Tenant, in.Job, n, p); err != nil {
				return err
			}
			data, err := t.ReadFile(p)
			if err != nil {
				return err
			}
			out, err := setReplicasYAML(data, n)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			return t.WriteFile(p, out)
		},
	})
	if err != nil {
		return nil, err
	}
	tp, jp := w.tp, (*plan.JobPlan)(nil) // the tenant as the write's check planned it
	if tp != nil {
		jp = tp.Job(in.Job)
	}
	if jp == nil {
		if _, tp, jp, err = s.jobAt(ctx, in.Tenant, in.Job, access.Read); err != nil {
			return nil, err
		}
	}
	return &body[apiv1.JobWritten]{Body: apiv1.JobWritten{Job: s.jobView(jp, s.stages(ctx, tp, in.Job)[in.Job]), Write: w.w}}, nil
}

// checkReplicasQuota refuses, before anything is written, a replica change that would take
// the tenant past its quota (checkQuota): the job at file p of tree t, with n replicas.
func (s *Server) checkReplicasQuota(ctx context.Context, t *inputsrepo.Tree, tenant, job string, n int32, p string) error {
	tp, err := s.plan(ctx, &view{tree: t}, tenant)
	if err != nil {
		return err
	}
	if tn := plannedInputs(tp, tenant); tn != nil {
		for i := range tn.Jobs {
			if j := tn.Jobs[i].Object.DeepCopy(); j.Name == job {
				j.Spec.Replicas = n
				return checkQuota(tp, tenant, j, p)
			}
		}
	}
	return nil
}

// setReplicasYAML sets spec.replicas in a job file, keeping its comments and the rest as
// written.
func setReplicasYAML(data []byte, n int32) ([]byte, error) {
	return editSpecYAML(data, func(spec *yaml.Node) error {
		setScalar(spec, "replicas", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(n)})
		return nil
	})
}
