// Package recipe reads vLLM recipes in the upstream vllm-project/recipes layout and derives
// model masters from them with the upstream synthesis rules (variant x hardware x strategy x
// features). It is pure: it reads through an fs.FS and touches nothing else.
package recipe

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Book is a parsed recipes tree: models/<org>/<repo>.yaml, strategies/*.yaml, taxonomy.yaml.
// It is read-only once loaded and safe for concurrent use.
type Book struct {
	taxonomy   *Taxonomy
	strategies map[string]*Strategy
	// kvStores are the Mooncake KV-store deployments (kv_store/*.yaml), by name.
	kvStores map[string]*KVStore
	// recipes by id (the path's <org>/<repo>); byLower maps the lowercased id to the id.
	recipes map[string]*Recipe
	byLower map[string]string
	// aliases maps a lowercased served checkpoint (a variant's model_id) to its recipe.
	aliases map[string]alias
	// slugs are the recipe part of master names; fileIDs are the ids of every recipe file of
	// the tree, parsed or not (LoadFor parses one).
	slugs    map[string]string
	fileIDs  []string
	warnings []string
	// masters memoises Derive by request: a run asks for the same few masters thousands of
	// times (one per job). Values are never handed out, only deep copies.
	masters sync.Map // string -> *v1alpha1.ModelMaster
}

// alias is a checkpoint id that names a recipe, and the variant serving it.
type alias struct {
	recipe  string
	variant string
}

// Load parses a recipes tree rooted at fsys. Errors name the file and the field; every problem
// of the tree is reported at once (a problem.Errors).
func Load(fsys fs.FS) (*Book, error) {
	return load(fsys, "")
}

// LoadFor parses what deriving modelID needs: the taxonomy, the strategies and, when modelID
// is a recipe id (case-insensitive), that recipe's file alone; other ids (a variant's
// checkpoint) need the whole tree. The Book holds only what was parsed: `recipe show` uses it
// to answer without parsing the whole corpus (docs/recipes.md, "Speed").
func LoadFor(fsys fs.FS, modelID string) (*Book, error) {
	files, err := fs.Glob(fsys, ModelsDir+"/*/*.y*ml")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if isYAML(f) && strings.EqualFold(recipeID(f), strings.TrimSpace(modelID)) {
			return load(fsys, recipeID(f))
		}
	}
	return load(fsys, "")
}

// Hardware is what the derivation needs to know of the node type a job runs on.
type Hardware struct {
	// Profile is the taxonomy hardware profile (h100, h200, ...).
	Profile string
	// GPUsPerNode and GPUMemoryGB come from the NodeType; zero means "take the taxonomy's".
	GPUsPerNode int32
	GPUMemoryGB int32
}

// HardwareOf is the hardware a node type offers recipe derivation.
func HardwareOf(nt *v1alpha1.NodeTypeSpec) Hardware {
	return Hardware{Profile: nt.HardwareProfile, GPUsPerNode: nt.GPU.Count, GPUMemoryGB: nt.GPU.MemoryGB}
}

// Request asks for the master of one model on one kind of hardware.
type Request struct {
	// ModelID is the recipe's model id, e.g. "Qwen/Qwen3-32B".
	ModelID string
	// Variant defaults to "default".
	Variant string
	// Strategy defaults to the one the rules pick (single node when the model fits one node).
	Strategy string
	// Features turns recipe features on or off over their defaults.
	Features map[string]bool
	// FeatureModes picks the mode of pick-one features (spec_decoding: mtp); naming a mode
	// turns its feature on.
	FeatureModes map[string]string
	// KVOffload names a KV-cache offload option of the taxonomy (simple, offloading_cpu, ...).
	KVOffload string
	Hardware  Hardware
	// Nodes forces the number of nodes per replica; 0 lets the rules decide.
	Nodes int32
}

// Has reports whether the book holds a recipe for modelID: a recipe id (case-insensitive, as
// upstream routes them) or the checkpoint a recipe's variant serves.
func (b *Book) Has(modelID string) bool {
	_, _, ok := b.lookup(modelID)
	return ok
}

// Derive returns the master for req. Errors name what is unknown, list what exists and offer
// the closest names; they are field errors whose Field is the request field and whose
// Origin says why (Reason: ReasonUnknownModel, ReasonUnknownVariant, ...).
func (b *Book) Derive(req Request) (*v1alpha1.ModelMaster, error) {
	key := req.key()
	if m, ok := b.masters.Load(key); ok {
		return m.(*v1alpha1.ModelMaster).DeepCopy(), nil
	}
	d, err := b.derive(req)
	if err != nil {
		return nil, err
	}
	m := d.master()
	m.Name = b.masterName(d)
	b.masters.Store(key, m)
	return m.DeepCopy(), nil
}

// key is a canonical form of the request, for the memo.
func (r Request) key() string {
	var k strings.Builder
	fmt.Fprintf(&k, "%q %q %q %q %d %d %d %q", r.ModelID, r.Variant, r.Strategy, r.Hardware.Profile, r.Hardware.GPUsPerNode, r.Hardware.GPUMemoryGB, r.Nodes, r.KVOffload)
	for _, f := range slices.Sorted(maps.Keys(r.Features)) {
		fmt.Fprintf(&k, " %q=%t", f, r.Features[f])
	}
	for _, f := range slices.Sorted(maps.Keys(r.FeatureModes)) {
		fmt.Fprintf(&k, " %q:%q", f, r.FeatureModes[f])
	}
	return k.String()
}

// ParakeetMasterName is the name of the built-in Parakeet master.
const ParakeetMasterName = "parakeet-tdt-0.6b-v3"

// IsParakeetName says whether a job's model names the built-in Parakeet master (by its model
// id or its master name).
func IsParakeetName(model string) bool {
	return model == v1alpha1.ParakeetModel || model == ParakeetMasterName
}

// Parakeet returns the built-in master of the Parakeet speech-to-text runtime: one model on
// one GPU of one node, no parallelism, no parsers. Its image is empty: the job type supplies
// v1alpha1.DefaultParakeetImage.
func Parakeet() *v1alpha1.ModelMaster {
	m := &v1alpha1.ModelMaster{
		TypeMeta: typeMeta(),
		Spec: v1alpha1.ModelMasterSpec{
			Runtime:              v1alpha1.RuntimeParakeet,
			Model:                v1alpha1.ParakeetModel,
			TensorParallelSize:   1,
			PipelineParallelSize: 1,
			PerReplicaGPUCount:   1,
		},
	}
	m.Name = ParakeetMasterName
	return m
}

// Models returns the ids of every recipe, sorted.
func (b *Book) Models() []string {
	ids := make([]string, 0, len(b.recipes))
	for id := range b.recipes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Model returns the recipe modelID names (see Has) and the variant a checkpoint id implies
// ("" for a recipe id).
func (b *Book) Model(modelID string) (r *Recipe, variant string, ok bool) {
	return b.lookup(modelID)
}

// Strategies returns the names of the strategies this tree has a file for, sorted.
func (b *Book) Strategies() []string { return slices.Sorted(maps.Keys(b.strategies)) }

// Strategy returns a strategy by name.
func (b *Book) Strategy(name string) (*Strategy, bool) {
	s, ok := b.strategies[name]
	return s, ok
}

// Taxonomy returns the tree's taxonomy.
func (b *Book) Taxonomy() *Taxonomy { return b.taxonomy }

// Warnings are things in the tree that load but look wrong (a recipe whose model.model_id
// differs from its path), sorted.
func (b *Book) Warnings() []string { return slices.Clone(b.warnings) }

// WarningsFor are the warnings about the recipe modelID names, for a caller that uses some
// recipes only (generate, for its jobs' models): none when the book has no such recipe.
func (b *Book) WarningsFor(modelID string) []string {
	r, _, ok := b.lookup(modelID)
	if !ok {
		return nil
	}
	var out []string
	for _, w := range b.warnings {
		if strings.HasPrefix(w, r.File+": ") {
			out = append(out, w)
		}
	}
	return out
}

// ID is how the recipes spell modelID, which Has and Derive match without regard to case: the
// recipe's id, or the checkpoint a recipe or its variant serves, as its file writes it; "" when
// the book does not know it. A job that names a model in another case is asked to use this.
func (b *Book) ID(modelID string) string {
	r, variant, ok := b.lookup(modelID)
	switch {
	case !ok:
		return ""
	case strings.EqualFold(r.ID, strings.TrimSpace(modelID)):
		return r.ID
	case variant != "":
		if mid := r.Variants.Values[variant].ModelID; mid != "" {
			return mid
		}
	}
	return r.Model.ModelID
}

func (b *Book) lookup(modelID string) (*Recipe, string, bool) {
	if r, ok := b.recipes[modelID]; ok {
		return r, "", true
	}
	key := strings.ToLower(strings.TrimSpace(modelID))
	if id, ok := b.byLower[key]; ok {
		return b.recipes[id], "", true
	}
	if a, ok := b.aliases[key]; ok {
		return b.recipes[a.recipe], a.variant, true
	}
	return nil, "", false
}
