// Package validate judges manifests offline the way the webhook would if they were applied
// together, and input jobs the way generate would: the use-case of `inferplane validate`, and
// of anything else (the product API) that must refuse in the same words. It reads what it is
// given and prints nothing: the caller shows the Report.
//
// Policy data (Tenants, NodeTypes, ModelMasters) comes from the files themselves, then from the
// inputs (the generator's tenants tree), then from the masters the plan resolves with the
// recipes. An input job (a file in a <tenant>/jobs/ folder, which carries no tenant label) is
// resolved with the inputs by the plan's Resolver, so it is refused exactly as generate refuses
// it; without the inputs, it is labelled with its folder's tenant and reviewed like a manifest.
package validate

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/policy"
)

// Options are what to judge and the policy data behind it.
type Options struct {
	// Files are manifest files by path (the shape of render.Files).
	Files map[string][]byte
	// Inputs is the generator's tenants tree (nil: none): its node types, masters and
	// tenants are policy data, and its Resolver resolves input jobs.
	Inputs *inputs.Inputs
	// Book holds the recipes (nil: none), to derive the masters of jobs that name a recipe
	// model.
	Book *recipe.Book
}

// Report is what was judged.
type Report struct {
	// Files and Documents count the manifest files and all their objects (any kind);
	// Skipped are the files that hold no Kubernetes object (a values file such as
	// vcluster.yaml).
	Files, Documents int
	Skipped          []string
	// Results are the objects the policy reads, in path then document order, allowed ones
	// included; Guarded ones were judged.
	Results []policy.Result
	// InputJobs counts the input jobs among them (judged with their folder's tenant).
	InputJobs int
	// Notes say what the caller should know about the judgement (a job that names a recipe
	// model where no recipes were given, a master the recipes could not derive).
	Notes []string
}

// Checked counts the objects judged (labelled inferplane.io/tenant, or input jobs).
func (r *Report) Checked() int {
	n := 0
	for _, res := range r.Results {
		if res.Guarded {
			n++
		}
	}
	return n
}

// Denied are the results that broke a rule.
func (r *Report) Denied() []policy.Result {
	var out []policy.Result
	for _, res := range r.Results {
		if !res.Allowed() {
			out = append(out, res)
		}
	}
	return out
}

// Run judges o.Files. The error means the input is unusable (a file that does not decode,
// conflicting policy data); the report then holds what was read.
func Run(ctx context.Context, o Options) (*Report, error) {
	decoded, err := policy.DecodeFiles(o.Files)
	rep := &Report{Files: decoded.Files, Documents: decoded.Documents, Skipped: decoded.Skipped}
	if err != nil {
		return rep, err
	}
	in := o.Inputs
	if in == nil {
		in = &inputs.Inputs{}
	}
	j := judge{ctx: ctx, rep: rep, in: o.Inputs, resolver: plan.NewResolver(in, o.Book), book: o.Book}
	objs := make([]client.Object, len(decoded.Objects))
	tenants := make([]*v1alpha1.Tenant, len(decoded.Objects)) // an input job's tenant, when the inputs have it
	for i, obj := range decoded.Objects {
		var tenant string
		objs[i], tenant = j.label(obj, decoded.Paths[i])
		if tenant != "" {
			rep.InputJobs++
			tenants[i] = in.Tenant(tenant)
		}
	}
	base, err := j.policyData(objs)
	if err != nil {
		return rep, err
	}
	var reviewed []client.Object
	for i, obj := range objs {
		if tenants[i] == nil {
			reviewed = append(reviewed, obj)
		}
	}
	results, err := policy.ReviewObjects(ctx, base, reviewed)
	if err != nil {
		return rep, fmt.Errorf("policy data: %w", err)
	}
	for i, obj := range objs {
		if t := tenants[i]; t != nil {
			// As generate resolves it, which names the job's own model, not a derived master.
			job := decoded.Objects[i].(*v1alpha1.ManagedInferenceJob)
			res := policy.Result{Ref: policy.RefOf(obj), Guarded: true}
			_, res.Errors = j.resolver.Job(t, job)
			if len(res.Errors) == 0 {
				res.Errors = j.quota(t.Name, job)
			}
			rep.Results = append(rep.Results, res)
			continue
		}
		rep.Results = append(rep.Results, results[0])
		results = results[1:]
	}
	return rep, nil
}

// judge is one Run.
type judge struct {
	ctx      context.Context
	rep      *Report
	in       *inputs.Inputs
	resolver *plan.Resolver
	book     *recipe.Book
}

// quota holds an input job to its tenant's quota as generate would if the file were in the
// inputs: beside the tenant's other jobs there, the inputs' job of that name (if any) being
// what runs.
func (j *judge) quota(tenant string, job *v1alpha1.ManagedInferenceJob) field.ErrorList {
	for i := range j.in.Tenants {
		if t := &j.in.Tenants[i]; t.Object.Name == tenant {
			return plan.CheckQuota(t, job, plan.AsRunning(j.in)(tenant))
		}
	}
	return nil
}

func (j *judge) note(format string, args ...any) {
	j.rep.Notes = append(j.rep.Notes, fmt.Sprintf(format, args...))
}

// label turns an input job (read from <tenant>/jobs/<job>.yaml, without a tenant label) into
// the job generate renders: tenant and namespace from the folder. It returns the object
// (a copy where labelled) and the tenant of an input job ("" for anything else).
func (j *judge) label(obj client.Object, path string) (client.Object, string) {
	job, ok := obj.(*v1alpha1.ManagedInferenceJob)
	if !ok || policy.IsGuarded(job) {
		return obj, ""
	}
	dir := filepath.Dir(filepath.Clean(path))
	tenant := filepath.Base(filepath.Dir(dir))
	if filepath.Base(dir) != inputs.JobsDir || tenant == "." || tenant == string(filepath.Separator) || tenant == "" {
		return obj, ""
	}
	labelled := job.DeepCopy()
	if labelled.Labels == nil {
		labelled.Labels = map[string]string{}
	}
	labelled.Labels[v1alpha1.LabelTenant] = tenant
	if labelled.Namespace == "" {
		labelled.Namespace = tenant
	}
	return labelled, tenant
}

// policyData is the policy data behind the objects' own: the inputs' node types, masters and
// tenants, then the masters the resolver finds for the guarded jobs among objs (each such job
// is relabelled with its master's name in objs, as the generator labels it) and for every job
// of the inputs (the masters rendered VMs name by their model-master label).
func (j *judge) policyData(objs []client.Object) (policy.Overlay, error) {
	base := policy.Overlay{}
	if j.in != nil {
		store, err := inputsStore(j.in)
		if err != nil {
			return nil, err
		}
		base = append(base, store)
	}
	local, err := policy.NewStore(objs...)
	if err != nil {
		return nil, err
	}
	known := append(policy.Overlay{local}, base...)
	derived := &policy.Store{}
	for i, o := range objs {
		job, ok := o.(*v1alpha1.ManagedInferenceJob)
		if !ok || !policy.IsGuarded(job) {
			continue
		}
		m, err := j.master(known, job)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		if err := derived.Add(m); err != nil {
			return nil, err
		}
		labelled := job.DeepCopy()
		labelled.Labels[v1alpha1.LabelModelMaster] = m.Name
		objs[i] = labelled
	}
	if j.in != nil {
		for _, t := range j.in.Tenants {
			for _, job := range t.Jobs {
				m, _, errs := j.resolver.Master(&job.Object, j.resolver.NodeType(job.Object.Spec.NodeType))
				if m == nil || len(errs) > 0 {
					continue // validate judges the given objects; generate reports the inputs' problems
				}
				if err := derived.Add(m); err != nil {
					return nil, fmt.Errorf("%s: %w", job.File, err)
				}
			}
		}
	}
	return append(base, derived), nil
}

// master is the master the plan resolves for job when the policy data has none by the job's
// master name; nil when there is nothing to resolve (a known master) or it cannot be (a note
// says why).
func (j *judge) master(known policy.Source, job *v1alpha1.ManagedInferenceJob) (*v1alpha1.ModelMaster, error) {
	name, _ := policy.JobMaster(job)
	if _, err := known.Master(j.ctx, name); name != "" && !policy.IsNotFound(err) {
		return nil, nil // found, or a read error the review reports
	}
	if j.book == nil && job.Spec.EffectiveRuntime() != v1alpha1.RuntimeParakeet {
		if strings.Contains(name, "/") {
			j.note("%s names model %q, which is no ModelMaster: pass --recipes DIR to derive its master", policy.RefOf(job), name)
		}
		return nil, nil
	}
	nt, err := known.NodeType(j.ctx, job.Spec.NodeType)
	if err != nil && !policy.IsNotFound(err) {
		return nil, err
	}
	m, _, errs := j.resolver.Master(job, nt)
	if len(errs) > 0 {
		j.note("%s: no master for model %q: %s", policy.RefOf(job), job.Spec.Model, errs[0].Detail)
		return nil, nil
	}
	return m, nil
}

// inputsStore is the inputs' node types, hand-written masters and tenants as policy data.
func inputsStore(in *inputs.Inputs) (*policy.Store, error) {
	store := &policy.Store{}
	add := func(file string, obj client.Object) error {
		if err := store.Add(obj); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		return nil
	}
	for i := range in.NodeTypes {
		if err := add(in.NodeTypes[i].File, &in.NodeTypes[i].Object); err != nil {
			return nil, err
		}
	}
	for i := range in.Masters {
		if err := add(in.Masters[i].File, &in.Masters[i].Object); err != nil {
			return nil, err
		}
	}
	for i := range in.Tenants {
		if err := add(in.Tenants[i].File, &in.Tenants[i].Object); err != nil {
			return nil, err
		}
	}
	return store, nil
}
