package recipe

import (
	"io/fs"
	"runtime"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/inferplane/inferplane/generator/problem"
)

// Listing is one recipe as `recipe list` shows it.
type Listing struct {
	ID       string
	Variants []string
	// Omni marks a vllm-omni recipe, refused whole.
	Omni bool
	// Rendered and Refused split the recipe's strategies (RecipeStrategies).
	Rendered, Refused []string
}

// listedRecipe is the part of a recipe a listing reads; skipUnread leaves the rest unparsed.
type listedRecipe struct {
	Meta struct {
		Tasks []string `yaml:"tasks"`
	} `yaml:"meta"`
	Variants             Ordered[unread]              `yaml:"variants"`
	CompatibleStrategies []string                     `yaml:"compatible_strategies"`
	StrategyHardware     map[string]map[string]string `yaml:"strategy_hardware"`
}

// unread is a value whose content a listing does not need.
type unread struct{}

func (*unread) decodeNode(*decoder, *yaml.Node, string) error { return nil }

// List reads what `recipe list` shows of every recipe of the tree: its variants and the
// strategies inferplane renders or refuses. It parses only those keys of each recipe (a third
// of the corpus), so it does not check the rest: Load does, and generate and validate use it.
func List(fsys fs.FS) ([]Listing, error) {
	b := &Book{strategies: map[string]*Strategy{}, kvStores: map[string]*KVStore{}}
	var probs problem.List
	if tax, ok := readTaxonomy(fsys, &probs); ok {
		b.taxonomy = tax
	}
	b.readStrategies(fsys, &probs)
	files, err := fs.Glob(fsys, ModelsDir+"/*/*")
	if err != nil {
		return nil, err
	}
	files = slices.DeleteFunc(files, func(f string) bool { return !isYAML(f) })
	out := make([]Listing, len(files))
	fileProbs := make([]problem.List, len(files))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var lr listedRecipe
				if decodeFile(fsys, files[i], &lr, &fileProbs[i]) {
					out[i] = b.listing(recipeID(files[i]), &lr)
				}
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, p := range fileProbs {
		probs = append(probs, p...)
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Listing) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (b *Book) listing(id string, lr *listedRecipe) Listing {
	r := &Recipe{ID: id, CompatibleStrategies: lr.CompatibleStrategies, StrategyHardware: lr.StrategyHardware}
	r.Meta.Tasks = lr.Meta.Tasks
	l := Listing{ID: id, Variants: lr.Variants.Keys, Omni: slices.Contains(lr.Meta.Tasks, "omni")}
	l.Rendered, l.Refused = b.strategiesOf(r)
	return l
}
