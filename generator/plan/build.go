package plan

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/vllmargs"
	"github.com/inferplane/inferplane/policy"
)

// DefaultModelCacheSize is the model-cache volume of a job that names no size.
const DefaultModelCacheSize = "200Gi"

// Running is what each tenant runs now, by job name: the baseline its quota keeps
// (policy.CheckJobQuota refuses only growth past it). A nil Running, or a tenant it gives no
// jobs for, runs nothing: every job is new.
type Running func(tenant string) map[string]policy.Claim

// AsRunning is the inputs' own jobs as what runs: a plan that only reads them (nothing grows
// past itself) never refuses a job for quota.
func AsRunning(in *inputs.Inputs) Running {
	return func(tenant string) map[string]policy.Claim {
		for i := range in.Tenants {
			if t := &in.Tenants[i]; t.Object.Name == tenant {
				out := make(map[string]policy.Claim, len(t.Jobs))
				for j := range t.Jobs {
					out[t.Jobs[j].Object.Name] = policy.JobClaim(&t.Jobs[j].Object)
				}
				return out
			}
		}
		return nil
	}
}

// Build resolves every job of in to its master, node type and replica layout (Resolver),
// applies the defaults and checks the rules between a tenant's jobs, the quota against what
// runs (nil: every job is new). book holds the recipes; nil means none were loaded, so only
// hand-written masters and Parakeet resolve. Every problem of the run is returned at once (a
// problem.Errors, sorted); on any problem the plan is nil.
func Build(in *inputs.Inputs, book *recipe.Book, running Running) (*Plan, error) {
	r := NewResolver(in, book)
	var probs problem.List
	p := &Plan{}
	for i := range in.Tenants {
		var now map[string]policy.Claim
		if running != nil {
			now = running(in.Tenants[i].Object.Name)
		}
		tp, tprobs := r.tenant(&in.Tenants[i], now)
		p.Tenants = append(p.Tenants, tp)
		probs.Merge(tprobs)
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(p.Tenants, func(a, b TenantPlan) int { return strings.Compare(a.Tenant.Name, b.Tenant.Name) })
	return p, nil
}

// tenant resolves a tenant's jobs and holds each one that resolves to the tenant's quota,
// beside its other jobs and against what it ran (running).
func (r *Resolver) tenant(t *inputs.Tenant, running map[string]policy.Claim) (TenantPlan, problem.List) {
	var probs problem.List
	tp := TenantPlan{Tenant: t.Object}
	used := map[string]v1alpha1.NodeType{}
	for i := range t.Jobs {
		j := &t.Jobs[i]
		jp, errs := r.Job(&t.Object, &j.Object)
		if len(errs) == 0 {
			// Quota only for a job that passes every other rule: its GPUs are then what it asks.
			errs = CheckQuota(t, &j.Object, running)
		}
		if len(errs) > 0 {
			probs.AddError(j.File, errs...)
			continue
		}
		jp.SourceFile = j.File
		used[jp.NodeType.Name] = jp.NodeType
		tp.Jobs = append(tp.Jobs, jp)
	}
	for _, name := range slices.Sorted(maps.Keys(used)) {
		tp.NodeTypes = append(tp.NodeTypes, used[name])
	}
	return tp, probs
}

// CheckQuota holds one job of tenant t to the tenant's quota (policy.CheckJobQuota): beside
// the tenant's other jobs in the inputs, and against what the job ran before (running; absent:
// it is new). generate, validate, `jobs create` and the product API call it, so they refuse a
// job over quota in the same words.
func CheckQuota(t *inputs.Tenant, job *v1alpha1.ManagedInferenceJob, running map[string]policy.Claim) field.ErrorList {
	jobs := make([]*v1alpha1.ManagedInferenceJob, len(t.Jobs))
	for i := range t.Jobs {
		jobs[i] = &t.Jobs[i].Object
	}
	var before *policy.Claim
	if c, ok := running[job.Name]; ok {
		before = &c
	}
	return policy.CheckJobQuota(&t.Object, job, policy.JobClaims(jobs, job.Name), before)
}

// newJobPlan is a checked job with its master, node type and layout, defaults applied: the
// tenant label, the model cache size, the image and the server's arguments (the master's,
// then the job's extra ones, last one winning per flag).
func newJobPlan(t *v1alpha1.Tenant, job *v1alpha1.ManagedInferenceJob, master *v1alpha1.ModelMaster, nt *inputs.NodeType, layout policy.Layout) JobPlan {
	ms, spec := &master.Spec, &job.Spec
	jp := JobPlan{
		Job:               *job.DeepCopy(),
		Master:            *master,
		NodeType:          *nt.Object.DeepCopy(),
		NodesPerReplica:   layout.Nodes,
		GPUsPerNode:       layout.GPUsPerNode,
		DataParallelLocal: layout.DataParallelLocal,
		Image:             ms.Image,
		Env:               slices.Clone(ms.Env),
		ModelCacheSize:    spec.ModelCacheSize,
	}
	if jp.Job.Labels == nil {
		jp.Job.Labels = map[string]string{}
	}
	jp.Job.Labels[v1alpha1.LabelTenant] = t.Name
	if jp.ModelCacheSize == "" {
		jp.ModelCacheSize = DefaultModelCacheSize
	}
	switch ms.Runtime {
	case v1alpha1.RuntimeParakeet:
		if jp.Image == "" {
			jp.Image = v1alpha1.DefaultParakeetImage
		}
		jp.Args = slices.Clone(ms.Args)
		if len(spec.ExtraArgs) > 0 {
			jp.Args = vllmargs.Merge(ms.Args, spec.ExtraArgs)
		}
	default:
		if jp.Image == "" {
			jp.Image = v1alpha1.DefaultVLLMImage
		}
		jp.Args = vllmargs.Merge(ms.Args, parallelArgs(ms), spec.ExtraArgs)
	}
	if ms.ImageDigest != "" {
		jp.Image += "@" + ms.ImageDigest // the pin: a tag moved later changes nothing
	}
	return jp
}

// parallelArgs adds the parallel-size flags a hand-written master sets only in its fields, so
// that vLLM uses the GPUs the master claims. Derived masters carry the flags already; a size
// of 1 is vLLM's default and needs no flag.
func parallelArgs(ms *v1alpha1.ModelMasterSpec) []string {
	args, _ := vllmargs.ParseSizes(ms.Args)
	var out []string
	if ms.TensorParallelSize > 1 && args.TP == 0 {
		out = append(out, vllmargs.TensorParallelSize, strconv.Itoa(int(ms.TensorParallelSize)))
	}
	if ms.PipelineParallelSize > 1 && args.PP == 0 {
		out = append(out, vllmargs.PipelineParallelSize, strconv.Itoa(int(ms.PipelineParallelSize)))
	}
	return out
}
