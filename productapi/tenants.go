package productapi

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// Trailers of a tenant's quota and tier changes in the inputs: the history reads them.
const (
	TrailerTenant = "Inferplane-Tenant"
	TrailerChange = "Inferplane-Change"
	TrailerReason = "Inferplane-Reason"
)

// maxHistory bounds a tenant's history as the API lists it.
const maxHistory = 200

func tenantFile(tenant string) string { return path.Join(tenantsDir, tenant, inputs.TenantFile) }

// plannedInputs is the tenant of a plan as the inputs hold it (with its tier applied).
func plannedInputs(p *generator.Planned, tenant string) *inputs.Tenant {
	for i := range p.Inputs.Tenants {
		if t := &p.Inputs.Tenants[i]; t.Object.Name == tenant {
			return t
		}
	}
	return nil
}

func (s *Server) getQuota(ctx context.Context, in *TenantParam) (*body[apiv1.TenantQuota], error) {
	v, _, err := s.authorize(ctx, in.Tenant, access.Read)
	if err != nil {
		return nil, err
	}
	q, err := s.quotaAt(ctx, v, in.Tenant)
	if err != nil {
		return nil, err
	}
	return &body[apiv1.TenantQuota]{Body: q}, nil
}

// quotaAt is the tenant's quota as view v's inputs say it.
func (s *Server) quotaAt(ctx context.Context, v *view, tenant string) (apiv1.TenantQuota, error) {
	p, err := s.plan(ctx, v, tenant)
	if err != nil {
		if _, perr := s.plannedTenant(ctx, v, tenant); perr != nil {
			return apiv1.TenantQuota{}, perr
		}
		return apiv1.TenantQuota{}, s.internal("planning tenant "+tenant, err)
	}
	t := plannedInputs(p, tenant)
	if t == nil {
		return apiv1.TenantQuota{}, newProblem(http.StatusNotFound, fmt.Sprintf("no tenant %q in the inputs", tenant))
	}
	q := apiv1.TenantQuota{Tenant: tenant, Tier: t.Object.Spec.Tier, Own: quotaOf(t.Written.Spec.Quota),
		InForce: quotaOf(t.Object.Spec.Quota), Jobs: []apiv1.QuotaJob{}, AllowedNodeTypes: t.Object.Spec.AllowedNodeTypes,
		Models: t.Object.Spec.Models, InputsCommit: v.commit}
	if t.Tier != nil {
		q.TierQuota = quotaOf(t.Tier.Spec.Quota)
	}
	jobs := make(map[string]bool, len(t.Jobs))
	for i := range t.Jobs {
		c := policy.JobClaim(&t.Jobs[i].Object)
		q.Jobs = append(q.Jobs, apiv1.QuotaJob{Name: c.Job, Replicas: c.Replicas, GPUs: c.GPUs})
		q.UsedGPUs += c.GPUs
		jobs[c.Job] = true
		q.Over = q.Over || q.InForce.ReplicasPerJob > 0 && c.Replicas > q.InForce.ReplicasPerJob
	}
	q.Over = q.Over || q.InForce.GPUs > 0 && q.UsedGPUs > int64(q.InForce.GPUs) || q.InForce.Jobs > 0 && len(jobs) > int(q.InForce.Jobs)
	return q, nil
}

func quotaOf(q *v1alpha1.Quota) apiv1.Quota {
	if q == nil {
		return apiv1.Quota{}
	}
	return apiv1.Quota{GPUs: q.GPUs, Jobs: q.Jobs, ReplicasPerJob: q.ReplicasPerJob}
}

// checkQuota refuses, before anything is written, a job that would take its tenant past its
// quota (plan.CheckQuota, the rule generate applies): beside the tenant's other jobs in the
// inputs p planned, what those inputs hold being what runs. file is where the job is written.
// A job that breaks another rule is left to the write's check, which says so as generate
// does (the quota is checked only for a job that passes every other rule).
func checkQuota(p *generator.Planned, tenant string, job *v1alpha1.ManagedInferenceJob, file string) error {
	t := plannedInputs(p, tenant)
	if t == nil {
		return nil
	}
	if _, errs := plan.NewResolver(p.Inputs, p.Book).Job(&t.Object, job); len(errs) > 0 {
		return nil
	}
	errs := plan.CheckQuota(t, job, plan.AsRunning(p.Inputs)(tenant))
	if len(errs) == 0 {
		return nil
	}
	var probs problem.List
	probs.AddError(file, errs...)
	return refusal(probs.Err())
}

type quotaChangeInput struct {
	TenantParam
	Body apiv1.QuotaChange
}

func (s *Server) setQuota(ctx context.Context, in *quotaChangeInput) (*body[apiv1.TenantChanged], error) {
	_, _, err := s.authorize(ctx, in.Tenant, access.ManageTenant)
	if err != nil {
		return nil, err
	}
	b := in.Body
	errs := checkReason(b.Reason)
	if b.GPUs == nil && b.Jobs == nil && b.ReplicasPerJob == nil {
		errs = append(errs, field.Required(field.NewPath("gpus"), "at least one of gpus, jobs and replicasPerJob"))
	}
	if len(errs) > 0 {
		return nil, fieldProblems(errs)
	}
	summary := func(was v1alpha1.TenantSpec) string {
		own := quotaOf(was.Quota)
		var parts []string
		for _, f := range []struct {
			name string
			to   *int32
			was  int32
		}{{"gpus", b.GPUs, own.GPUs}, {"jobs", b.Jobs, own.Jobs}, {"replicasPerJob", b.ReplicasPerJob, own.ReplicasPerJob}} {
			if f.to != nil {
				parts = append(parts, fmt.Sprintf("%s %s -> %s", f.name, ownFigure(f.was), ownFigure(*f.to)))
			}
		}
		return "quota " + strings.Join(parts, ", ")
	}
	return s.changeTenant(ctx, in.Tenant, "quota", b.Reason, summary, func(spec *yaml.Node) error {
		return setQuotaYAML(spec, b)
	})
}

// ownFigure words a tenant's own quota figure: 0 is the tier's.
func ownFigure(v int32) string {
	if v == 0 {
		return "tier's"
	}
	return strconv.Itoa(int(v))
}

type tierChangeInput struct {
	TenantParam
	Body apiv1.TierChange
}

func (s *Server) setTier(ctx context.Context, in *tierChangeInput) (*body[apiv1.TenantChanged], error) {
	_, _, err := s.authorize(ctx, in.Tenant, access.ManageTenant)
	if err != nil {
		return nil, err
	}
	b := in.Body
	errs := checkReason(b.Reason)
	if len(content.IsLabelValue(b.Tier)) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("tier"), b.Tier, "must be a tier's name, e.g. h100-dedicated"))
	}
	if len(errs) > 0 {
		return nil, fieldProblems(errs)
	}
	summary := func(was v1alpha1.TenantSpec) string { return fmt.Sprintf("tier %s -> %s", was.Tier, b.Tier) }
	return s.changeTenant(ctx, in.Tenant, "tier", b.Reason, summary, func(spec *yaml.Node) error {
		setScalar(spec, "tier", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: b.Tier})
		return nil
	})
}

// checkReason holds a change's reason to one line: it becomes a commit trailer.
func checkReason(reason string) field.ErrorList {
	if strings.TrimSpace(reason) == "" || strings.ContainsAny(reason, "\r\n\x00") {
		return field.ErrorList{field.Invalid(field.NewPath("reason"), reason, "must be one line saying why (it is recorded in the commit and the tenant's history)")}
	}
	return nil
}

// changeTenant commits one change of the tenant's tenant.yaml (edit, on its spec, keeping the
// file's comments and order) as the caller, with trailers naming the tenant, the change and
// the reason, checked by the generator for the tenant like every write (an unknown tier, a
// tier without the node types or models the tenant's jobs use, a tenant list wider than the
// new tier's: refused, nothing committed). A quota lowered below what runs is committed: the
// render keeps what runs, and growth is refused afterwards. The commit's subject is summary of
// the spec the change replaced, as the inputs it is applied to hold it (not as this replica last
// read them: another replica may have changed it since).
func (s *Server) changeTenant(ctx context.Context, tenant, kind, reason string, summary func(was v1alpha1.TenantSpec) string,
	edit func(spec *yaml.Node) error) (*body[apiv1.TenantChanged], error) {
	message := func(summary string) string {
		return fmt.Sprintf("%s: %s\n\n%s: %s\n%s: %s\n%s: %s", tenant, summary,
			TrailerTenant, tenant, TrailerChange, kind, TrailerReason, strings.TrimSpace(reason))
	}
	w, err := s.write(ctx, change{tenant: tenant, message: message(kind), apply: func(_ context.Context, t *inputsrepo.Tree) error {
		p := tenantFile(tenant)
		data, err := t.ReadFile(p)
		if err != nil {
			return inputsrepo.Conflictf("tenant %s no longer exists in the inputs (%s)", tenant, p)
		}
		var was v1alpha1.Tenant
		if err := k8syaml.Unmarshal(data, &was); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out, err := editSpecYAML(data, edit)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		t.Describe(message(summary(was.Spec)))
		return t.WriteFile(p, out)
	}})
	if err != nil {
		return nil, err
	}
	q, err := s.quotaAt(ctx, s.current(), tenant)
	if err != nil {
		return nil, err
	}
	return &body[apiv1.TenantChanged]{Body: apiv1.TenantChanged{Quota: q, Write: w.w}}, nil
}

func (s *Server) tenantHistory(ctx context.Context, in *TenantParam) (*body[apiv1.TenantHistory], error) {
	v, _, err := s.authorize(ctx, in.Tenant, access.Read)
	if err != nil {
		return nil, err
	}
	entries, err := s.opts.Inputs.History(v.commit, TrailerTenant, in.Tenant, maxHistory)
	if err != nil {
		return nil, s.internal("reading the inputs' history", err)
	}
	out := apiv1.TenantHistory{Tenant: in.Tenant, Changes: []apiv1.TenantChange{}}
	for _, e := range entries {
		kind := e.Trailers[TrailerChange]
		if kind != "quota" && kind != "tier" {
			continue
		}
		out.Changes = append(out.Changes, apiv1.TenantChange{Commit: e.Commit, When: e.When.UTC(), Author: e.Author.Name + " <" + e.Author.Email + ">",
			Change: kind, Summary: strings.TrimPrefix(e.Subject, in.Tenant+": "), Reason: e.Trailers[TrailerReason]})
	}
	return &body[apiv1.TenantHistory]{Body: out}, nil
}

// setQuotaYAML sets the figures of spec.quota a change gives: 0 removes the figure (the tier's
// then applies), and a quota left with no figure is removed.
func setQuotaYAML(spec *yaml.Node, b apiv1.QuotaChange) error {
	q := mapValue(spec, "quota")
	if q == nil || q.Kind != yaml.MappingNode {
		q = &yaml.Node{Kind: yaml.MappingNode}
	}
	for _, f := range []struct {
		key string
		v   *int32
	}{{"gpus", b.GPUs}, {"jobs", b.Jobs}, {"replicasPerJob", b.ReplicasPerJob}} {
		switch {
		case f.v == nil:
		case *f.v == 0:
			setScalar(q, f.key, nil)
		default:
			setScalar(q, f.key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(*f.v))})
		}
	}
	if len(q.Content) == 0 {
		setScalar(spec, "quota", nil)
		return nil
	}
	q.Style = 0 // block style, whatever the file had
	setScalar(spec, "quota", q)
	return nil
}
