package plan

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/suggest"
	"github.com/inferplane/inferplane/policy"
)

// DefaultModelCacheSize is the model-cache volume of a job that names no size.
const DefaultModelCacheSize = "200Gi"

// Build resolves every job of in to its master, node type and replica layout, applies the
// defaults and checks the rules between objects. book holds the recipes; nil means none were
// loaded, so only hand-written masters and Parakeet resolve. Every problem of the run is
// returned at once (a problem.Errors, sorted); on any problem the plan is nil.
func Build(in *inputs.Inputs, book *recipe.Book) (*Plan, error) {
	b := &builder{
		book:      book,
		nodeTypes: map[string]*inputs.NodeType{},
		masters:   map[string]*inputs.Master{},
		unfit:     map[string]bool{},
	}
	for i := range in.NodeTypes {
		nt := &in.NodeTypes[i]
		b.nodeTypes[nt.Object.Name] = nt
	}
	for i := range in.Masters {
		m := &in.Masters[i]
		b.masters[m.Object.Name] = m
		b.checkMaster(m)
	}

	p := &Plan{}
	for i := range in.Tenants {
		p.Tenants = append(p.Tenants, b.tenant(&in.Tenants[i]))
	}
	if err := b.problems.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(p.Tenants, func(a, b TenantPlan) int { return strings.Compare(a.Tenant.Name, b.Tenant.Name) })
	return p, nil
}

type builder struct {
	book      *recipe.Book
	nodeTypes map[string]*inputs.NodeType
	masters   map[string]*inputs.Master
	// unfit are the hand-written masters that break the policy rules (reported at their files).
	unfit    map[string]bool
	problems problem.List
}

func (b *builder) tenant(t *inputs.Tenant) TenantPlan {
	tp := TenantPlan{Tenant: t.Object}
	used := map[string]v1alpha1.NodeType{}
	var gpus int64
	for i := range t.Jobs {
		j := &t.Jobs[i]
		gpus += int64(j.Object.Spec.Replicas) * int64(j.Object.Spec.GPUCount)
		jp, ok := b.job(t, j)
		if !ok {
			continue
		}
		used[jp.NodeType.Name] = jp.NodeType
		tp.Jobs = append(tp.Jobs, jp)
	}
	if q := t.Object.Spec.GPUQuota; q > 0 && gpus > int64(q) {
		var parts []string
		for _, j := range t.Jobs {
			parts = append(parts, fmt.Sprintf("%s %dx%d", j.Object.Name, j.Object.Spec.Replicas, j.Object.Spec.GPUCount))
		}
		b.problems.Add(t.File, "spec.gpuQuota", fmt.Sprintf("at least %d, or fewer GPUs in the jobs", gpus),
			"is %d, but the tenant's jobs request %d GPUs (replicas x gpuCount: %s)", q, gpus, strings.Join(parts, ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(used)) {
		tp.NodeTypes = append(tp.NodeTypes, used[name])
	}
	return tp
}

// job resolves one job; ok is false when it has a problem (already recorded).
func (b *builder) job(t *inputs.Tenant, j *inputs.Job) (JobPlan, bool) {
	before := len(b.problems)
	f := j.File
	spec := &j.Object.Spec
	add := func(field, expected, format string, args ...any) {
		b.problems.Add(f, field, expected, format, args...)
	}

	nt, ok := b.nodeTypes[spec.NodeType]
	if !ok {
		add("spec.nodeType", "one of: "+listOrNone(slices.Sorted(maps.Keys(b.nodeTypes))),
			"unknown node type %q (no NodeType of that name in nodetypes/)", spec.NodeType)
	} else if !policy.NodeTypeAllowed(t.Object.Spec.AllowedNodeTypes, spec.NodeType) { // the webhook's own rule
		add("spec.nodeType", "a node type the tenant's allowedNodeTypes permits: "+describeAllowed(t.Object.Spec.AllowedNodeTypes),
			"node type %q is not allowed for tenant %s (%s)", spec.NodeType, t.Object.Name, t.File)
	}

	master, masterFile, ok := b.master(t, j, nt)
	if !ok || nt == nil {
		return JobPlan{}, false
	}
	ms := &master.Spec

	perNode := nt.Object.Spec.GPU.Count
	switch {
	case ms.Runtime == v1alpha1.RuntimeParakeet && spec.GPUCount > perNode && ms.PerReplicaGPUCount <= perNode:
		add("spec.gpuCount", fmt.Sprintf("%d (the perReplicaGPUCount of master %s): a Parakeet replica runs on one node", ms.PerReplicaGPUCount, master.Name),
			"is %d, which spans %d nodes of %s (%d GPUs each)", spec.GPUCount, (spec.GPUCount+perNode-1)/perNode, nt.Object.Name, perNode)
	case spec.GPUCount != ms.PerReplicaGPUCount:
		add("spec.gpuCount", fmt.Sprintf("%d, the perReplicaGPUCount of master %s (%s)", ms.PerReplicaGPUCount, master.Name, masterFile),
			"is %d", spec.GPUCount)
	}
	layout, err := policy.ReplicaLayout(master, &nt.Object)
	if err != nil {
		field, expected := "spec.gpuCount", fmt.Sprintf("at most %d GPUs (one node of %s) or a multiple of %d (whole nodes)", perNode, nt.Object.Name, perNode)
		if ms.Runtime == v1alpha1.RuntimeParakeet {
			field, expected = "spec.runtime", fmt.Sprintf("a Parakeet replica on one node: at most %d GPUs on %s", perNode, nt.Object.Name)
		}
		add(field, expected, "%v", err)
	} else if src := ms.Source; src != nil && src.Nodes > 0 && src.Nodes != layout.Nodes {
		add("spec.nodeType", fmt.Sprintf("a node type with %d GPUs per node, as master %s was derived for", ms.PerReplicaGPUCount/src.Nodes, master.Name),
			"master %s was derived for %d node(s) per replica, but %d GPUs over nodes of %s (%d GPUs each) make %d",
			master.Name, src.Nodes, ms.PerReplicaGPUCount, nt.Object.Name, nt.Object.Spec.GPU.Count, layout.Nodes)
	}

	b.checkExtraArgs(f, spec.ExtraArgs)
	if len(b.problems) > before {
		return JobPlan{}, false
	}

	return newJobPlan(t, j, master, nt, layout), true
}

// newJobPlan is a checked job with its master, node type and layout, defaults applied: the
// tenant label, the model cache size, the image and the server's arguments (the master's,
// then the job's extra ones, last one winning per flag).
func newJobPlan(t *inputs.Tenant, j *inputs.Job, master *v1alpha1.ModelMaster, nt *inputs.NodeType, layout policy.Layout) JobPlan {
	ms, spec := &master.Spec, &j.Object.Spec
	jp := JobPlan{
		Job:               *j.Object.DeepCopy(),
		Master:            *master,
		NodeType:          *nt.Object.DeepCopy(),
		NodesPerReplica:   layout.Nodes,
		GPUsPerNode:       layout.GPUsPerNode,
		DataParallelLocal: layout.DataParallelLocal,
		Image:             ms.Image,
		Env:               slices.Clone(ms.Env),
		ModelCacheSize:    spec.ModelCacheSize,
		SourceFile:        j.File,
	}
	if jp.Job.Labels == nil {
		jp.Job.Labels = map[string]string{}
	}
	jp.Job.Labels[v1alpha1.LabelTenant] = t.Object.Name
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
			jp.Args = recipe.MergeArgs(ms.Args, spec.ExtraArgs)
		}
	default:
		if jp.Image == "" {
			jp.Image = v1alpha1.DefaultVLLMImage
		}
		jp.Args = recipe.MergeArgs(ms.Args, parallelArgs(ms), spec.ExtraArgs)
	}
	if ms.ImageDigest != "" {
		jp.Image += "@" + ms.ImageDigest // the pin: a tag moved later changes nothing
	}
	return jp
}

// master resolves the job's master: a hand-written one by name, Parakeet's built-in one, or
// one derived from a recipe for the job's node type.
func (b *builder) master(t *inputs.Tenant, j *inputs.Job, nt *inputs.NodeType) (*v1alpha1.ModelMaster, string, bool) {
	f := j.File
	spec := &j.Object.Spec
	runtime := spec.EffectiveRuntime()
	add := func(field, expected, format string, args ...any) {
		b.problems.Add(f, field, expected, format, args...)
	}
	recipeOnly := func(what string) bool {
		ok := true
		for _, x := range []struct {
			field string
			set   bool
		}{{"spec.variant", spec.Variant != ""}, {"spec.strategy", spec.Strategy != ""}, {"spec.features", len(spec.Features) > 0},
			{"spec.featureModes", len(spec.FeatureModes) > 0}, {"spec.kvOffload", spec.KVOffload != ""}} {
			if x.set {
				add(x.field, "nothing: it applies only to masters derived from a recipe", "is set, but the job runs %s", what)
				ok = false
			}
		}
		return ok
	}

	if hw, ok := b.masters[spec.Model]; ok {
		m := hw.Object.DeepCopy()
		good := recipeOnly("hand-written master " + m.Name)
		if m.Spec.Runtime != runtime {
			add("spec.runtime", fmt.Sprintf("%q, the runtime of master %s (%s)", m.Spec.Runtime, m.Name, hw.File), "is %q", runtime)
			good = false
		}
		if nt != nil && m.Spec.HardwareProfile != "" && m.Spec.HardwareProfile != nt.Object.Spec.HardwareProfile {
			add("spec.nodeType", fmt.Sprintf("a node type with hardwareProfile %q, as master %s (%s) requires", m.Spec.HardwareProfile, m.Name, hw.File),
				"node type %s has hardware profile %q", nt.Object.Name, nt.Object.Spec.HardwareProfile)
			good = false
		}
		if b.unfit[m.Name] {
			good = false // reported once, at the master's file
		}
		return m, hw.File, good
	}

	if runtime == v1alpha1.RuntimeParakeet {
		if spec.Model != "" && !recipe.IsParakeetName(spec.Model) {
			add("spec.model", fmt.Sprintf("%q (or nothing): the one model the parakeet runtime serves", v1alpha1.ParakeetModel),
				"is %q", spec.Model)
			return nil, "", false
		}
		if !recipeOnly("the built-in Parakeet master") {
			return nil, "", false
		}
		return recipe.Parakeet(), "built-in", true
	}

	if recipe.IsParakeetName(spec.Model) {
		add("spec.runtime", `"parakeet": `+v1alpha1.ParakeetModel+" is served by the parakeet runtime", "is %q", runtime)
		return nil, "", false
	}
	if spec.Model == "" {
		add("spec.model", "a ModelMaster name ("+listOrNone(b.masterNames(runtime))+") or a recipe model id ("+b.someRecipes()+")",
			"missing: a vllm job names the model it serves")
		return nil, "", false
	}
	if b.book == nil || !b.book.Has(spec.Model) {
		add("spec.model", "a ModelMaster name ("+listOrNone(b.masterNames(runtime))+") or a recipe model id ("+b.someRecipes()+")",
			"unknown model %q%s", spec.Model, b.modelHint(spec.Model))
		return nil, "", false
	}
	if id := b.book.ID(spec.Model); id != spec.Model {
		// Recipes match ids without regard to case, but the id is committed as written: one
		// spelling per model keeps the tenant's repository from changing with the case.
		b.problems.AddNotFound(f, "spec.model", spec.Model, strconv.Quote(id)+", as the recipes spell it", []string{id},
			"model %q is spelled %q in the recipes%s", spec.Model, id, suggest.DidYouMean([]string{id}))
		return nil, "", false
	}
	return b.derive(j, nt)
}

// derive is the master of a job that names a recipe model, derived for its node type.
func (b *builder) derive(j *inputs.Job, nt *inputs.NodeType) (*v1alpha1.ModelMaster, string, bool) {
	f := j.File
	spec := &j.Object.Spec
	add := func(field, expected, format string, args ...any) {
		b.problems.Add(f, field, expected, format, args...)
	}
	if nt == nil {
		return nil, "", false // the unknown node type is already reported
	}
	if nt.Object.Spec.HardwareProfile == "" {
		add("spec.nodeType", "a node type with spec.hardwareProfile set (h100, h200, ...), which recipe derivation needs",
			"node type %s (%s) names no hardware profile", nt.Object.Name, nt.File)
		return nil, "", false
	}
	m, err := b.book.Derive(recipe.Request{
		ModelID:      spec.Model,
		Variant:      spec.Variant,
		Strategy:     spec.Strategy,
		Features:     spec.Features,
		FeatureModes: spec.FeatureModes,
		KVOffload:    spec.KVOffload,
		Hardware:     recipe.HardwareOf(&nt.Object.Spec),
	})
	if err != nil {
		field, expected := deriveField(err)
		add(field, expected, "%s", deriveMessage(err, nt))
		return nil, "", false
	}
	if errs := policy.CheckMaster(m); len(errs) > 0 {
		for _, e := range errs {
			add("spec.model", "a master that passes the policy rules", "derived master %s: %s", m.Name, policy.Describe(e))
		}
		return nil, "", false
	}
	return m, "derived from recipe " + spec.Model + " for " + nt.Object.Spec.HardwareProfile, true
}

// deriveField maps the request field a derivation error concerns to the job's field.
func deriveField(err error) (field, expected string) {
	var re *recipe.Error
	if !errors.As(err, &re) {
		return "spec.model", "a model the recipes can derive a master for"
	}
	switch re.Field() {
	case "variant":
		return "spec.variant", "a variant of the recipe (see `inferplane recipe show`)"
	case "strategy":
		return "spec.strategy", "a strategy the recipe is compatible with, or nothing to let the rules pick"
	case "features":
		return "spec.features", "feature names of the recipe"
	case "featureModes":
		return "spec.featureModes", "modes of the recipe's pick-one features (see `inferplane recipe show`)"
	case "kvOffload":
		return "spec.kvOffload", "a KV offload option of the recipes' taxonomy that the recipe, strategy and hardware allow"
	case "hardware":
		return "spec.nodeType", "a node type whose hardware profile the recipe supports"
	case "nodes":
		return "spec.nodeType", "a node type with enough GPU memory for the model"
	default:
		return "spec.model", "a recipe model id"
	}
}

func deriveMessage(err error, nt *inputs.NodeType) string {
	var re *recipe.Error
	if errors.As(err, &re) && (re.Field() == "hardware" || re.Field() == "nodes") {
		return fmt.Sprintf("node type %s (profile %s): %s", nt.Object.Name, nt.Object.Spec.HardwareProfile, err)
	}
	return err.Error()
}

// parallelArgs adds the parallel-size flags a hand-written master sets only in its fields, so
// that vLLM uses the GPUs the master claims. Derived masters carry the flags already; a size
// of 1 is vLLM's default and needs no flag.
func parallelArgs(ms *v1alpha1.ModelMasterSpec) []string {
	var out []string
	for _, p := range []struct {
		long, short string
		v           int32
	}{{"--tensor-parallel-size", "-tp", ms.TensorParallelSize}, {"--pipeline-parallel-size", "-pp", ms.PipelineParallelSize}} {
		if p.v <= 1 {
			continue
		}
		_, long := recipe.ArgValue(ms.Args, p.long)
		_, short := recipe.ArgValue(ms.Args, p.short)
		if !long && !short {
			out = append(out, p.long, strconv.Itoa(int(p.v)))
		}
	}
	return out
}

// reservedFlags are model server flags a job may not set: the renderer owns them (launcher,
// listen address) or they would put a secret in git.
var reservedFlags = map[string]string{
	"--tensor-parallel-size":     "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	"-tp":                        "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	"--pipeline-parallel-size":   "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	"-pp":                        "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	"--data-parallel-size":       "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	"-dp":                        "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	"--nnodes":                   "the renderer sets the multi-node launcher flags per node",
	"--node-rank":                "the renderer sets the multi-node launcher flags per node",
	"--master-addr":              "the renderer sets the multi-node launcher flags per node",
	"--master-port":              "the renderer sets the multi-node launcher flags per node",
	"--headless":                 "the renderer sets the multi-node launcher flags per node",
	"--data-parallel-size-local": "the master's parallelism decides the GPUs of each node; pick another master or variant",
	"-dpl":                       "the master's parallelism decides the GPUs of each node; pick another master or variant",
	"--data-parallel-address":    "the renderer sets the multi-node launcher flags per node",
	"--data-parallel-start-rank": "the renderer sets the multi-node launcher flags per node",
	"--data-parallel-rpc-port":   "the renderer sets the multi-node launcher flags per node",
	"--host":                     "the server listens where Envoy and the readiness probe expect it",
	"--port":                     "the server listens on port " + strconv.Itoa(v1alpha1.ServingPort) + ", where Envoy and the readiness probe expect it",
	"--api-key":                  "API keys are checked by Envoy (requireAPIKey), and a key in a job file would be committed to git",
}

func (b *builder) checkExtraArgs(f string, args []string) {
	for i, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if why, ok := reservedFlags[name]; ok {
			b.problems.Add(f, fmt.Sprintf("spec.extraArgs[%d]", i), "no "+name+": "+why, "sets %s", name)
		}
	}
}

// checkMaster reports a hand-written master that breaks the policy rules, at its own file.
func (b *builder) checkMaster(m *inputs.Master) {
	for _, e := range policy.CheckMaster(&m.Object) {
		if v := policy.Value(e); v != "" {
			b.problems.Add(m.File, e.Field, e.Detail, "is %s", v)
		} else {
			b.problems.Add(m.File, e.Field, "", "%s", e.Detail)
		}
		b.unfit[m.Object.Name] = true
	}
	s := &m.Object.Spec
	if s.Runtime != v1alpha1.RuntimeVLLM || s.PerReplicaGPUCount <= 1 || s.TensorParallelSize > 0 || s.PipelineParallelSize > 0 {
		return
	}
	for _, flag := range []string{"--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp"} {
		if _, ok := recipe.ArgValue(s.Args, flag); ok {
			return
		}
	}
	b.problems.Add(m.File, "spec.tensorParallelSize", fmt.Sprintf("parallel sizes that use all %d GPUs, e.g. tensorParallelSize: %d", s.PerReplicaGPUCount, s.PerReplicaGPUCount),
		"is not set, and spec.args set no parallelism either: vLLM would use 1 of the %d GPUs the master claims", s.PerReplicaGPUCount)
}

func (b *builder) masterNames(rt v1alpha1.Runtime) []string {
	var out []string
	for name, m := range b.masters {
		if m.Object.Spec.Runtime == rt {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (b *builder) someRecipes() string {
	if b.book == nil {
		return "no recipes loaded"
	}
	ids := b.book.Models()
	if len(ids) > 5 {
		return fmt.Sprintf("one of the %d recipes `inferplane recipe list` shows", len(ids))
	}
	return listOrNone(ids)
}

// modelHint points at a hand-written master that serves the model asked for by id.
func (b *builder) modelHint(model string) string {
	var names []string
	for name, m := range b.masters {
		if strings.EqualFold(m.Object.Spec.Model, model) {
			names = append(names, name)
		}
	}
	if len(names) > 0 {
		slices.Sort(names)
		return "; hand-written master " + strings.Join(names, ", ") + " serves it: name the master in spec.model"
	}
	if b.book == nil {
		return " (no recipes are loaded)"
	}
	// The recipe package's error carries its close-id suggestions as data.
	var re *recipe.Error
	if _, err := b.book.Derive(recipe.Request{ModelID: model}); errors.As(err, &re) {
		return suggest.DidYouMean(re.Suggestions)
	}
	return ""
}

func describeAllowed(allowed []string) string {
	switch {
	case allowed == nil:
		return "every node type"
	case len(allowed) == 0:
		return "none ([])"
	}
	return strings.Join(allowed, ", ")
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
