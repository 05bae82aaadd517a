package plan

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/suggest"
	"github.com/inferplane/inferplane/policy"
)

// Resolver finds what a job of the inputs runs: its master (hand-written, Parakeet's, or
// derived from a recipe for its node type), its node type and its replica layout, and holds
// the job to the policy's job rules (policy.CheckJobSpec). generate, validate, `jobs create`
// and the product API resolve jobs with it, so they refuse a job in the same words.
type Resolver struct {
	book      *recipe.Book
	nodeTypes map[string]*inputs.NodeType
	masters   map[string]*inputs.Master
	// nodeTypeNames are every node type's name, sorted (what a refused node type is offered).
	nodeTypeNames []string
}

// NewResolver resolves jobs against in's node types and masters and book's recipes (nil: no
// recipes were loaded, so only hand-written masters and Parakeet resolve).
func NewResolver(in *inputs.Inputs, book *recipe.Book) *Resolver {
	r := &Resolver{book: book, nodeTypes: map[string]*inputs.NodeType{}, masters: map[string]*inputs.Master{}}
	for i := range in.NodeTypes {
		nt := &in.NodeTypes[i]
		r.nodeTypes[nt.Object.Name] = nt
	}
	for i := range in.Masters {
		m := &in.Masters[i]
		r.masters[m.Object.Name] = m
	}
	r.nodeTypeNames = slices.Sorted(maps.Keys(r.nodeTypes))
	return r
}

// NodeType is the node type of that name in the inputs, or nil.
func (r *Resolver) NodeType(name string) *v1alpha1.NodeType {
	if nt, ok := r.nodeTypes[name]; ok {
		return &nt.Object
	}
	return nil
}

// Paths of a job's fields the resolver names.
var (
	specPath     = field.NewPath("spec")
	modelPath    = specPath.Child("model")
	nodeTypePath = specPath.Child("nodeType")
	runtimePath  = specPath.Child("runtime")
)

// Job resolves job of tenant t. errs are every problem of the job (field errors on its own
// fields, for its file); on any, the plan is the zero JobPlan.
func (r *Resolver) Job(t *v1alpha1.Tenant, job *v1alpha1.ManagedInferenceJob) (JobPlan, field.ErrorList) {
	nt := r.nodeTypes[job.Spec.NodeType]
	var ntObj *v1alpha1.NodeType
	if nt != nil {
		ntObj = &nt.Object
	}
	master, from, errs := r.Master(job, ntObj)
	errs = append(errs, policy.CheckJobSpec(job, policy.Data{Tenant: t, Master: master, NodeType: ntObj, NodeTypes: r.nodeTypeNames})...)
	if len(errs) > 0 || master == nil || nt == nil {
		return JobPlan{}, errs
	}
	layout, err := policy.ReplicaLayout(master, ntObj)
	if err != nil { // CheckJobSpec reported it
		return JobPlan{}, field.ErrorList{fielderr.Errorf(nodeTypePath, "%v", err)}
	}
	if src := master.Spec.Source; src != nil && src.Nodes > 0 && src.Nodes != layout.Nodes {
		return JobPlan{}, field.ErrorList{fielderr.Expected(nodeTypePath,
			fmt.Sprintf("a node type with %d GPUs per node, as master %s was derived for", master.Spec.PerReplicaGPUCount/src.Nodes, master.Name),
			"master %s (%s) was derived for %d node(s) per replica, but %d GPUs over nodes of %s (%d GPUs each) make %d",
			master.Name, from, src.Nodes, master.Spec.PerReplicaGPUCount, nt.Object.Name, nt.Object.Spec.GPU.Count, layout.Nodes)}
	}
	return newJobPlan(t, job, master, nt, layout), nil
}

// Master resolves the master job runs on node type nt (nil: the job names none the inputs
// have): a hand-written one by name, Parakeet's built-in one, or one derived from a recipe for
// nt. from says where it came from, for messages. With errs the master is nil; a nil master
// without errs means that only the node type is missing to derive one.
func (r *Resolver) Master(job *v1alpha1.ManagedInferenceJob, nt *v1alpha1.NodeType) (m *v1alpha1.ModelMaster, from string, errs field.ErrorList) {
	spec := &job.Spec
	runtime := spec.EffectiveRuntime()
	if hw, ok := r.masters[spec.Model]; ok {
		if errs := recipeOnly(spec, "hand-written master "+hw.Object.Name); len(errs) > 0 {
			return nil, "", errs
		}
		return hw.Object.DeepCopy(), hw.File, nil
	}
	if runtime == v1alpha1.RuntimeParakeet {
		if spec.Model != "" && !recipe.IsParakeetName(spec.Model) {
			return nil, "", field.ErrorList{fielderr.Expected(modelPath,
				fmt.Sprintf("%q (or nothing): the one model the parakeet runtime serves", v1alpha1.ParakeetModel), "is %q", spec.Model)}
		}
		if errs := recipeOnly(spec, "the built-in Parakeet master"); len(errs) > 0 {
			return nil, "", errs
		}
		return recipe.Parakeet(), "built-in", nil
	}
	if recipe.IsParakeetName(spec.Model) {
		return nil, "", field.ErrorList{fielderr.Expected(runtimePath, `"parakeet": `+v1alpha1.ParakeetModel+" is served by the parakeet runtime", "is %q", runtime)}
	}
	expected := "a ModelMaster name (" + fielderr.List(r.masterNames(runtime)) + ") or a recipe model id (" + r.someRecipes() + ")"
	switch {
	case spec.Model == "":
		return nil, "", field.ErrorList{fielderr.Expected(modelPath, expected, "missing: a vllm job names the model it serves")}
	case r.book == nil || !r.book.Has(spec.Model):
		return nil, "", field.ErrorList{fielderr.Expected(modelPath, expected, "unknown model %q%s", spec.Model, r.modelHint(spec.Model))}
	}
	if id := r.book.ID(spec.Model); id != spec.Model {
		// Recipes match ids without regard to case, but the id is committed as written: one
		// spelling per model keeps the tenant's repository from changing with the case.
		return nil, "", field.ErrorList{fielderr.NotFound(modelPath, spec.Model,
			fmt.Sprintf("is spelled %q in the recipes (the id is committed as written)", id), []string{id})}
	}
	if nt == nil {
		return nil, "", nil // the policy's rules report the node type
	}
	return r.derive(job, nt)
}

// recipeOnly refuses what applies only to masters derived from a recipe.
func recipeOnly(spec *v1alpha1.ManagedInferenceJobSpec, what string) field.ErrorList {
	var errs field.ErrorList
	for _, x := range []struct {
		field string
		set   bool
	}{{"variant", spec.Variant != ""}, {"strategy", spec.Strategy != ""}, {"features", len(spec.Features) > 0},
		{"featureModes", len(spec.FeatureModes) > 0}, {"kvOffload", spec.KVOffload != ""}} {
		if x.set {
			errs = append(errs, fielderr.Expected(specPath.Child(x.field), "nothing: it applies only to masters derived from a recipe",
				"is set, but the job runs %s", what))
		}
	}
	return errs
}

// derive is the master of a job that names a recipe model, derived for its node type.
func (r *Resolver) derive(job *v1alpha1.ManagedInferenceJob, nt *v1alpha1.NodeType) (*v1alpha1.ModelMaster, string, field.ErrorList) {
	spec := &job.Spec
	if nt.Spec.HardwareProfile == "" {
		return nil, "", field.ErrorList{fielderr.Expected(nodeTypePath,
			"a node type with spec.hardwareProfile set (h100, h200, ...), which recipe derivation needs",
			"node type %s names no hardware profile", nt.Name)}
	}
	m, err := r.book.Derive(recipe.Request{
		ModelID:      spec.Model,
		Variant:      spec.Variant,
		Strategy:     spec.Strategy,
		Features:     spec.Features,
		FeatureModes: spec.FeatureModes,
		KVOffload:    spec.KVOffload,
		Hardware:     recipe.HardwareOf(&nt.Spec),
	})
	if err != nil {
		path, expected := deriveField(err)
		msg := detail(err)
		if f := recipe.Field(err); f == "hardware" || f == "nodes" {
			msg = fmt.Sprintf("node type %s (profile %s): %s", nt.Name, nt.Spec.HardwareProfile, msg)
		}
		return nil, "", field.ErrorList{fielderr.Expected(path, expected, "%s", msg)}
	}
	return m, "derived from recipe " + spec.Model + " for " + nt.Spec.HardwareProfile, nil
}

// detail is what a derivation error says, without the request field it names.
func detail(err error) string {
	if fe, ok := err.(*field.Error); ok {
		return fe.Detail
	}
	return err.Error()
}

// deriveField maps the request field a derivation error concerns to the job's field.
func deriveField(err error) (path *field.Path, expected string) {
	switch recipe.Field(err) {
	case "variant":
		return specPath.Child("variant"), "a variant of the recipe (see `inferplane recipe show`)"
	case "strategy":
		return specPath.Child("strategy"), "a strategy the recipe is compatible with, or nothing to let the rules pick"
	case "features":
		return specPath.Child("features"), "feature names of the recipe"
	case "featureModes":
		return specPath.Child("featureModes"), "modes of the recipe's pick-one features (see `inferplane recipe show`)"
	case "kvOffload":
		return specPath.Child("kvOffload"), "a KV offload option of the recipes' taxonomy that the recipe, strategy and hardware allow"
	case "hardware":
		return nodeTypePath, "a node type whose hardware profile the recipe supports"
	case "nodes":
		return nodeTypePath, "a node type with enough GPU memory for the model"
	case "model":
		return modelPath, "a recipe model id"
	}
	return modelPath, "a model the recipes can derive a master for"
}

func (r *Resolver) masterNames(rt v1alpha1.Runtime) []string {
	var out []string
	for name, m := range r.masters {
		if m.Object.Spec.Runtime == rt {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (r *Resolver) someRecipes() string {
	if r.book == nil {
		return "no recipes loaded"
	}
	ids := r.book.Models()
	if len(ids) > 5 {
		return fmt.Sprintf("one of the %d recipes `inferplane recipe list` shows", len(ids))
	}
	return fielderr.List(ids)
}

// modelHint points at a hand-written master that serves the model asked for by id, else at
// the closest recipe ids.
func (r *Resolver) modelHint(model string) string {
	var names []string
	for name, m := range r.masters {
		if strings.EqualFold(m.Object.Spec.Model, model) {
			names = append(names, name)
		}
	}
	if len(names) > 0 {
		slices.Sort(names)
		return "; hand-written master " + strings.Join(names, ", ") + " serves it: name the master in spec.model"
	}
	if r.book == nil {
		return " (no recipes are loaded)"
	}
	return suggest.DidYouMean(suggest.Close(model, r.book.Models()))
}
