package productapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// modelEntry is a model with its choices (computed once per version of the inputs it reads).
type modelEntry = apiv1.Model

func (s *Server) listModels(ctx context.Context, in *TenantParam) (*body[apiv1.ModelList], error) {
	v, _, err := s.authorize(ctx, in.Tenant, access.Read)
	if err != nil {
		return nil, err
	}
	p, err := s.plan(ctx, v, in.Tenant)
	if err != nil {
		if _, perr := s.plannedTenant(ctx, v, in.Tenant); perr != nil {
			return nil, perr
		}
		return nil, s.internal("planning tenant "+in.Tenant, err)
	}
	tn := plannedInputs(p, in.Tenant)
	if tn == nil {
		return nil, newProblem(http.StatusNotFound, fmt.Sprintf("no tenant %q in the inputs", in.Tenant))
	}
	t := &tn.Object // in force: its tier's node types and catalogue, narrowed by its own lists
	out := apiv1.ModelList{Tenant: in.Tenant, Tier: t.Spec.Tier, InputsCommit: v.commit, NodeTypes: []apiv1.NodeType{}}
	allowed := allowedNodeTypes(t, p)
	for _, nt := range allowed {
		out.NodeTypes = append(out.NodeTypes, apiv1.NodeType{Name: nt.Name, GPUsPerNode: nt.Spec.GPU.Count,
			GPUMemoryGB: nt.Spec.GPU.MemoryGB, HardwareProfile: nt.Spec.HardwareProfile})
	}
	models, err := get(&s.cache.mu, &s.cache.models, planKey(v, in.Tenant), func() ([]modelEntry, error) {
		return modelChoices(p, allowed, t.Spec.Models), nil
	})
	if err != nil {
		return nil, s.internal("listing models", err)
	}
	out.Models = models
	if out.Shared, err = s.sharedModels(v, t); err != nil {
		return nil, s.internal("listing shared models", err)
	}
	return &body[apiv1.ModelList]{Body: out}, nil
}

// sharedModels are the provider tenants' endpoints that t (in force) may call with its own
// keys (policy.SharedCallAllowed, the rule the gateway's key check applies), by model. The
// plan holds t alone: the providers and their jobs are read from the view.
func (s *Server) sharedModels(v *view, t *v1alpha1.Tenant) ([]apiv1.SharedModel, error) {
	out := []apiv1.SharedModel{}
	all, err := s.tenants(v)
	if err != nil {
		return nil, err
	}
	for _, pr := range all {
		if !pr.Spec.Provider || pr.Name == t.Name {
			continue
		}
		dir := path.Join(tenantsDir, pr.Name, inputs.JobsDir)
		entries, err := v.tree.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
				continue
			}
			data, err := v.tree.ReadFile(path.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			var j v1alpha1.ManagedInferenceJob
			if err := yaml.Unmarshal(data, &j); err != nil {
				return nil, fmt.Errorf("%s: %w", path.Join(dir, e.Name()), err)
			}
			if !policy.SharedCallAllowed(pr, t, j.Spec.Model) {
				continue
			}
			m := apiv1.SharedModel{Model: j.Spec.Model, Provider: pr.Name, Endpoint: j.Name}
			if s.opts.Domain != "" {
				m.URL = gatewayv1.URL(pr.Name, j.Name, s.opts.Domain)
			}
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b apiv1.SharedModel) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.Provider, b.Provider), strings.Compare(a.Endpoint, b.Endpoint))
	})
	return out, nil
}

// allowedNodeTypes are the node types of the inputs the tenant may use.
func allowedNodeTypes(t *v1alpha1.Tenant, p *generator.Planned) []*v1alpha1.NodeType {
	var out []*v1alpha1.NodeType
	for i := range p.Inputs.NodeTypes {
		nt := &p.Inputs.NodeTypes[i].Object
		if policy.NodeTypeAllowed(t.Spec.AllowedNodeTypes, nt.Name) && nt.Spec.GPU.Count > 0 {
			out = append(out, nt)
		}
	}
	return out
}

// modelChoices resolves every model of the tenant's catalogue (hand-written masters, Parakeet,
// each recipe that policy.JobModelOffered finds in it) on every allowed node type exactly as a
// job naming it would be resolved (plan.Resolver), keeping the node types where it would be
// admitted.
func modelChoices(p *generator.Planned, allowed []*v1alpha1.NodeType, catalogue []string) []apiv1.Model {
	r := plan.NewResolver(p.Inputs, p.Book)
	out := []apiv1.Model{}
	add := func(model string, rt v1alpha1.Runtime, source string, master *v1alpha1.ModelMaster) {
		if !policy.JobModelOffered(catalogue, model, master) {
			return
		}
		m := apiv1.Model{Model: model, Runtime: string(rt), Source: source, Choices: []apiv1.Choice{}}
		for _, nt := range allowed {
			job := &v1alpha1.ManagedInferenceJob{Spec: v1alpha1.ManagedInferenceJobSpec{Model: model, Runtime: rt, NodeType: nt.Name}}
			master, from, errs := r.Master(job, nt)
			if master == nil || len(errs) > 0 {
				continue
			}
			layout, err := policy.ReplicaLayout(master, nt)
			if err != nil {
				continue
			}
			m.Choices = append(m.Choices, apiv1.Choice{NodeType: nt.Name, Master: master.Name, GPUsPerReplica: master.Spec.PerReplicaGPUCount,
				NodesPerReplica: layout.Nodes, Why: why(master, from, nt, layout)})
		}
		if len(m.Choices) > 0 {
			out = append(out, m)
		}
	}
	for _, hw := range p.Inputs.Masters {
		add(hw.Object.Name, hw.Object.Spec.Runtime, "master", &hw.Object)
	}
	add(v1alpha1.ParakeetModel, v1alpha1.RuntimeParakeet, "built-in", nil)
	if p.Book != nil {
		for _, id := range p.Book.Models() {
			if !recipe.IsParakeetName(id) {
				add(id, v1alpha1.RuntimeVLLM, "recipe", nil)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b apiv1.Model) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// why says where a choice's GPU count comes from.
func why(m *v1alpha1.ModelMaster, from string, nt *v1alpha1.NodeType, l policy.Layout) string {
	sp := m.Spec
	par := fmt.Sprintf("tensor parallel %d x pipeline parallel %d x data parallel %d = %d GPUs",
		max(sp.TensorParallelSize, 1), max(sp.PipelineParallelSize, 1), max(sp.DataParallelSize, 1), sp.PerReplicaGPUCount)
	where := fmt.Sprintf("%d node(s) of %s (%d GPUs of %d GB each)", l.Nodes, nt.Name, nt.Spec.GPU.Count, nt.Spec.GPU.MemoryGB)
	if src := sp.Source; src != nil && src.Strategy != "" {
		return fmt.Sprintf("%s, strategy %s: %s per replica, on %s", from, src.Strategy, par, where)
	}
	return fmt.Sprintf("%s: %s per replica, on %s", from, par, where)
}
