package recipe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/generator/problem"
)

// Paths of the upstream layout, relative to the recipes root.
const (
	ModelsDir     = "models"
	StrategiesDir = "strategies"
	KVStoreDir    = "kv_store"
	TaxonomyFile  = "taxonomy.yaml"
)

// maxGPUsPerNode bounds a node's GPU count, so that sizes stay far from overflowing.
const maxGPUsPerNode = 1024

// maxFileSize bounds what one recipe file may hold; upstream's largest is well under 100 KB.
const maxFileSize = 4 << 20

// load reads the tree and reports every problem it finds at once; only, when set, names the
// one recipe to parse (the others are only listed: their ids name master slugs).
func load(fsys fs.FS, only string) (*Book, error) {
	b := &Book{
		recipes:    map[string]*Recipe{},
		byLower:    map[string]string{},
		aliases:    map[string]alias{},
		strategies: map[string]*Strategy{},
		kvStores:   map[string]*KVStore{},
	}
	var probs problem.List

	if tax, ok := readTaxonomy(fsys, &probs); ok {
		b.taxonomy = tax
	}
	b.readStrategies(fsys, &probs)
	b.readKVStores(fsys, &probs)
	b.readModels(fsys, only, &probs)
	if err := probs.Err(); err != nil {
		return nil, err
	}
	b.index()
	return b, nil
}

func readFile(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("is a directory, expected a file")
	}
	if st.Size() > maxFileSize {
		return nil, fmt.Errorf("file is %d bytes, more than the %d a recipe file may hold", st.Size(), maxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("file is more than the %d bytes a recipe file may hold", maxFileSize)
	}
	return data, nil
}

// decodeFile parses one YAML file into out, recording any problem against file.
func decodeFile(fsys fs.FS, file string, out any, probs *problem.List) bool {
	data, err := readFile(fsys, file)
	if err != nil {
		probs.Add(file, nil, "", "cannot read: %v", unwrapPathError(err))
		return false
	}
	root, err := parseDocument(skipUnread(data, out))
	if err != nil {
		// A skipped block may have held something the rest refers to (an anchor): parse
		// the file as written, so that what is reported is about the file.
		root, err = parseDocument(data)
	}
	if err != nil {
		probs.Add(file, nil, "", "%v", err)
		return false
	}
	if root == nil {
		probs.Add(file, nil, "a YAML mapping", "file is empty")
		return false
	}
	if err := decodeInto(root, out); err != nil {
		var p problem.Problem
		if errors.As(err, &p) {
			p.File = file
			*probs = append(*probs, p)
		} else {
			probs.Add(file, nil, "", "%v", err)
		}
		return false
	}
	return true
}

// skipUnread blanks, in a recipe file, the top-level blocks whose keys out's type does not
// declare: the decoder would read past them, and the parser need not see them at all (the
// `guide:` prose is most of the upstream corpus: docs/recipes.md). Each block is replaced by
// its newlines, so line numbers in messages stay right. Other files are returned as they are.
func skipUnread(data []byte, out any) []byte {
	t := reflect.TypeOf(out)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || (t.Elem() != reflect.TypeFor[Recipe]() && t.Elem() != reflect.TypeFor[listedRecipe]()) {
		return data
	}
	keep := structInfoOf(t.Elem()).fields
	var out2 []byte
	blanking, copied := false, 0
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n') + off + 1
		if end == off {
			end = len(data)
		}
		if key, ok := topLevelKey(data[off:end]); ok {
			_, read := keep[key]
			switch {
			case !read && !blanking:
				out2 = append(out2, data[copied:off]...)
				blanking = true
			case read && blanking:
				copied = off
				blanking = false
			}
		}
		if blanking && end > off && data[end-1] == '\n' {
			out2 = append(out2, '\n')
		}
		off = end
	}
	if out2 == nil {
		return data
	}
	if !blanking {
		out2 = append(out2, data[copied:]...)
	}
	return out2
}

// topLevelKey reads a line that starts a top-level mapping entry (`key:` in the first column)
// and returns the key. Document markers, comments and indented lines are not keys.
func topLevelKey(line []byte) (string, bool) {
	if len(line) == 0 || line[0] == ' ' || line[0] == '\t' || line[0] == '#' || line[0] == '-' || line[0] == '.' || line[0] == '\n' || line[0] == '\r' {
		return "", false
	}
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return "", false
	}
	key := line[:i]
	for _, c := range key {
		if !(c == '_' || c == '-' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return "", false
		}
	}
	return string(key), true
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func readTaxonomy(fsys fs.FS, probs *problem.List) (*Taxonomy, bool) {
	if _, err := fs.Stat(fsys, TaxonomyFile); errors.Is(err, fs.ErrNotExist) {
		probs.Add(TaxonomyFile, nil, "the upstream vllm-project/recipes layout: models/<org>/<repo>.yaml, strategies/*.yaml, taxonomy.yaml",
			"missing: the recipes tree has no taxonomy")
		return nil, false
	}
	var tax Taxonomy
	if !decodeFile(fsys, TaxonomyFile, &tax, probs) {
		return nil, false
	}
	ok := true
	for _, id := range tax.HardwareProfiles.Keys {
		p := tax.HardwareProfiles.Values[id]
		at := field.NewPath("hardware_profiles", id)
		if p.GPUCount < 1 || p.GPUCount > maxGPUsPerNode {
			probs.Add(TaxonomyFile, at.Child("gpu_count"), fmt.Sprintf("a whole number from 1 to %d", maxGPUsPerNode), "is %d", p.GPUCount)
			ok = false
		}
		if p.VRAMGB <= 0 {
			probs.Add(TaxonomyFile, at.Child("vram_gb"), "a positive number of GB", "is %g", p.VRAMGB)
			ok = false
		}
	}
	if tax.HardwareProfiles.Len() == 0 {
		probs.Add(TaxonomyFile, field.NewPath("hardware_profiles"), "at least one profile", "is empty")
		ok = false
	}
	return &tax, ok
}

func (b *Book) readStrategies(fsys fs.FS, probs *problem.List) {
	yamlFiles(fsys, StrategiesDir, true, probs, func(file, base string) {
		var s Strategy
		if !decodeFile(fsys, file, &s, probs) {
			return
		}
		s.File = file
		if s.Name != base {
			probs.Add(file, field.NewPath("name"), fmt.Sprintf("%q, the file's name", base), "is %q", s.Name)
			return
		}
		if prev, dup := b.strategies[s.Name]; dup {
			probs.Add(file, field.NewPath("name"), "", "strategy %q is also defined in %s", s.Name, prev.File)
			return
		}
		b.strategies[s.Name] = &s
	})
}

// readKVStores reads kv_store/*.yaml, the Mooncake deployments upstream offers as KV offload
// options. The folder is optional: older trees do not have it.
func (b *Book) readKVStores(fsys fs.FS, probs *problem.List) {
	yamlFiles(fsys, KVStoreDir, false, probs, func(file, _ string) {
		var s KVStore
		if !decodeFile(fsys, file, &s, probs) {
			return
		}
		s.File = file
		if _, dup := b.kvStores[s.Name]; dup {
			probs.Add(file, field.NewPath("name"), "", "KV store %q is defined twice", s.Name)
			return
		}
		b.kvStores[s.Name] = &s
	})
}

// yamlFiles calls fn with each YAML file of dir (its path and its name without the
// extension); a missing dir is a problem when required.
func yamlFiles(fsys fs.FS, dir string, required bool, probs *problem.List, fn func(file, base string)) {
	entries, err := fs.ReadDir(fsys, dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && required:
		probs.Add(dir+"/", nil, "the upstream vllm-project/recipes layout: models/<org>/<repo>.yaml, strategies/*.yaml, taxonomy.yaml",
			"missing: the recipes tree has no %s", dir)
		return
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		probs.Add(dir+"/", nil, "", "cannot read: %v", unwrapPathError(err))
		return
	}
	for _, e := range entries {
		if !e.IsDir() && isYAML(e.Name()) {
			fn(path.Join(dir, e.Name()), strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".yaml"), ".yml"))
		}
	}
}

func isYAML(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// readModels reads models/<org>/<repo>.yaml. The files are parsed in parallel (YAML parsing
// is most of a load) and registered in path order, so the result and the problems do not
// depend on scheduling.
func (b *Book) readModels(fsys fs.FS, only string, probs *problem.List) {
	if _, err := fs.Stat(fsys, ModelsDir); errors.Is(err, fs.ErrNotExist) {
		probs.Add(ModelsDir+"/", nil, "the upstream vllm-project/recipes layout: models/<org>/<repo>.yaml, strategies/*.yaml, taxonomy.yaml",
			"missing: the recipes tree has no models")
		return
	}
	var files []string
	err := fs.WalkDir(fsys, ModelsDir, func(file string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			probs.Add(file, nil, "", "cannot read: %v", unwrapPathError(err))
		case d.IsDir() || !isYAML(d.Name()):
		case strings.Count(file, "/") != 2:
			probs.Add(file, nil, "models/<org>/<repo>.yaml", "is not where a recipe file goes")
		default:
			id := recipeID(file)
			b.fileIDs = append(b.fileIDs, id)
			if only == "" || strings.EqualFold(id, only) {
				files = append(files, file)
			}
		}
		return nil
	})
	if err != nil {
		probs.Add(ModelsDir+"/", nil, "", "cannot read: %v", err)
	}
	type parsed struct {
		recipe *Recipe
		probs  problem.List
	}
	results := make([]parsed, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := &Recipe{}
				if decodeFile(fsys, files[i], r, &results[i].probs) {
					results[i].recipe = r
				}
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, file := range files {
		*probs = append(*probs, results[i].probs...)
		if r := results[i].recipe; r != nil {
			b.addRecipe(r, file, recipeID(file), probs)
		}
	}
}

// recipeID is the id a recipe file's path gives: models/<org>/<repo>.yaml is <org>/<repo>.
func recipeID(file string) string {
	repo := strings.TrimSuffix(strings.TrimSuffix(path.Base(file), ".yaml"), ".yml")
	return path.Base(path.Dir(file)) + "/" + repo
}

// addRecipe registers a parsed recipe under id, after the checks between fields and files.
func (b *Book) addRecipe(r *Recipe, file, id string, probs *problem.List) {
	r.ID, r.File = id, file
	if !b.checkRecipe(r, probs) {
		return
	}
	if prev, dup := b.byLower[strings.ToLower(id)]; dup {
		probs.Add(file, nil, "one file per model id", "model %q is also defined in %s (ids are case-insensitive)", id, b.recipes[prev].File)
		return
	}
	b.recipes[id] = r
	b.byLower[strings.ToLower(id)] = id
}

// checkRecipe checks what decoding alone cannot: references between fields and files.
func (b *Book) checkRecipe(r *Recipe, probs *problem.List) bool {
	ok := true
	bad := func(at *field.Path, expected, format string, args ...any) {
		probs.Add(r.File, at, expected, format, args...)
		ok = false
	}
	if r.Variants.Len() == 0 {
		bad(field.NewPath("variants"), "at least one variant (e.g. default)", "is empty")
	}
	for _, k := range r.Variants.Keys {
		v := r.Variants.Values[k]
		at := field.NewPath("variants", k)
		if v.VRAMMinimumGB < 0 {
			bad(at.Child("vram_minimum_gb"), "a number of GB, 0 or more", "is %g", v.VRAMMinimumGB)
		}
		checkTP(at.Child("tp"), v.TP, bad)
	}
	for s, so := range r.StrategyOverrides {
		checkTP(field.NewPath("strategy_overrides", s, "tp"), so.TP, bad)
	}
	for i, f := range r.OptInFeatures {
		if _, known := r.Features.Get(f); !known {
			bad(field.NewPath("opt_in_features").Index(i), "one of the recipe's features ("+strings.Join(r.Features.Keys, ", ")+")", "names unknown feature %q", f)
		}
	}
	if b.taxonomy != nil {
		known := b.knownStrategies()
		for i, s := range r.CompatibleStrategies {
			if !known[s] {
				bad(field.NewPath("compatible_strategies").Index(i), "a strategy of taxonomy.yaml ("+strings.Join(slices.Sorted(maps.Keys(known)), ", ")+")", "names unknown strategy %q", s)
			}
		}
	}
	if !strings.EqualFold(r.Model.ModelID, r.ID) {
		// Upstream keys a recipe by its path and serves model.model_id, and a few upstream
		// files differ on purpose (a recipe whose only checkpoint is quantised), so this is
		// a warning rather than an error.
		b.warnings = append(b.warnings, fmt.Sprintf("%s: model.model_id %q differs from the id its path gives (%q): the recipe is known as %q and serves %q",
			r.File, r.Model.ModelID, r.ID, r.ID, r.Model.ModelID))
	}
	return ok
}

// checkTP checks a tensor-parallel size: a number or a hardware-keyed map of numbers, >= 1.
func checkTP(at *field.Path, tp *HardwareInt, bad func(at *field.Path, expected, format string, args ...any)) {
	if tp == nil {
		return
	}
	if tp.ByHardware == nil && tp.Value < 1 {
		bad(at, "a whole number of at least 1", "is %d", tp.Value)
	}
	for _, hk := range slices.Sorted(maps.Keys(tp.ByHardware)) {
		if n := tp.ByHardware[hk]; n < 1 {
			bad(at.Child(hk), "a whole number of at least 1", "is %d", n)
		}
	}
}

// knownStrategies is the strategy vocabulary: the taxonomy's list and every strategy file.
func (b *Book) knownStrategies() map[string]bool {
	known := map[string]bool{}
	if b.taxonomy != nil {
		for _, s := range b.taxonomy.Strategies {
			known[s] = true
		}
	}
	for s := range b.strategies {
		known[s] = true
	}
	return known
}

// index builds the lookups Derive uses: served checkpoints (model.model_id when it differs
// from the path, and each variant's model_id) resolve to their recipe and variant, as the
// upstream site redirects them; names for masters get a stable slug per recipe.
func (b *Book) index() {
	ids := b.Models()
	claims := map[string][]alias{}
	for _, id := range ids {
		r := b.recipes[id]
		if !strings.EqualFold(r.Model.ModelID, id) {
			claims[strings.ToLower(r.Model.ModelID)] = append(claims[strings.ToLower(r.Model.ModelID)], alias{recipe: id})
		}
		for _, k := range r.Variants.Keys {
			mid := r.Variants.Values[k].ModelID
			if mid == "" || strings.EqualFold(mid, id) {
				continue
			}
			claims[strings.ToLower(mid)] = append(claims[strings.ToLower(mid)], alias{recipe: id, variant: k})
		}
	}
	for key, cs := range claims {
		if _, isRecipe := b.byLower[key]; isRecipe {
			continue // a recipe of that id exists: it wins
		}
		// Only an unambiguous claim resolves: one recipe (a recipe whose model_id and one of
		// its variants name the same checkpoint counts once, preferring the variant).
		cs = slices.CompactFunc(cs, func(a, b alias) bool { return a == b })
		recipes := map[string]bool{}
		for _, c := range cs {
			recipes[c.recipe] = true
		}
		if len(recipes) != 1 {
			continue
		}
		best := cs[0]
		for _, c := range cs {
			if c.variant != "" {
				best = c
				break
			}
		}
		b.aliases[key] = best
	}

	// Slugs: the repo part of the id, lowercased; the org is added where two recipes of the
	// tree (parsed or not) share it.
	byRepo := map[string][]string{}
	for _, id := range b.fileIDs {
		_, repo, _ := strings.Cut(id, "/")
		byRepo[strings.ToLower(repo)] = append(byRepo[strings.ToLower(repo)], id)
	}
	b.slugs = map[string]string{}
	for repo, owners := range byRepo {
		for _, id := range owners {
			if _, parsed := b.recipes[id]; !parsed {
				continue
			}
			if len(owners) == 1 {
				b.slugs[id] = repo
			} else {
				b.slugs[id] = strings.ToLower(strings.ReplaceAll(id, "/", "-"))
			}
		}
	}
	sort.Strings(b.warnings)
}
