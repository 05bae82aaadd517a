package productapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/inputsrepo"
)

// The inputs' folders, as generate names them in its messages.
const (
	recipesDir = "recipes"
	tenantsDir = "tenants"
)

// view is the inputs at one commit, as reads see them.
type view struct {
	commit string
	tree   *inputsrepo.Tree
}

// Refresh fetches the inputs' head for reads. Writes advance the view to their own commit
// at once (advance); Run refreshes every RefreshInterval.
func (s *Server) Refresh(ctx context.Context) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	snap, err := s.opts.Inputs.Head(ctx)
	if err != nil {
		return err
	}
	if cur := s.view.Load(); cur == nil || cur.commit != snap.Commit {
		s.view.Store(&view{commit: snap.Commit, tree: snap.Files})
	}
	s.ready.Store(true)
	return nil
}

// advance makes reads see a commit this replica's write made (or found, replayed), without a
// fetch; a view already at a later commit stays (another write or fetch got there first).
// When the order of the two cannot be told (the clone was renewed), it fetches the head.
func (s *Server) advance(ctx context.Context, snap inputsrepo.Snapshot) error {
	if snap.Files == nil || snap.Commit == "" {
		return s.Refresh(ctx)
	}
	s.refreshMu.Lock()
	cur := s.view.Load()
	switch {
	case cur != nil && cur.commit == snap.Commit:
	case cur == nil || cur.commit == "" || s.follows(cur.commit, snap.Commit):
		s.view.Store(&view{commit: snap.Commit, tree: snap.Files})
	case s.follows(snap.Commit, cur.commit):
		// Reads are already further.
	default:
		s.refreshMu.Unlock()
		return s.Refresh(ctx)
	}
	s.refreshMu.Unlock()
	return nil
}

// follows says whether inputs commit b is a (the write's commit is usually the view's child:
// a short walk) or comes after it.
func (s *Server) follows(a, b string) bool {
	ok, err := s.opts.Inputs.IsAncestor(a, b)
	return err == nil && ok
}

// current is the last fetched view; nil before the first fetch.
func (s *Server) current() *view { return s.view.Load() }

// onlyTenant is the tenants tree as one tenant's render reads it: the node types, the
// hand-written masters, the tiers and that tenant's folder. What the generator loads for one tenant then
// costs the same at 20 tenants as at 2,000: the other tenants' folders are not there. (The API
// writes a tenant's jobs only; the checks across tenants, of tenant.yaml files, are generate's.)
type onlyTenant struct {
	fsys   fs.FS // the tenants folder
	tenant string
}

func (o onlyTenant) allowed(name string) bool {
	if name == "." {
		return true
	}
	first, _, _ := strings.Cut(name, "/")
	return first == inputs.NodeTypesDir || first == inputs.MastersDir || first == inputs.TiersDir || first == o.tenant
}

func (o onlyTenant) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) || !o.allowed(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if name == "." {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("read the root with ReadDir")}
	}
	return o.fsys.Open(name)
}

func (o onlyTenant) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) || !o.allowed(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	entries, err := fs.ReadDir(o.fsys, name)
	if err != nil || name != "." {
		return entries, err
	}
	var out []fs.DirEntry
	for _, e := range entries {
		if o.allowed(e.Name()) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (o onlyTenant) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) || !o.allowed(name) || name == "." {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return fs.ReadFile(o.fsys, name)
}

func (o onlyTenant) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) || !o.allowed(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return fs.Stat(o.fsys, name)
}

// genOptions are generate's options for one tenant over a tree of the inputs.
func (s *Server) genOptions(ctx context.Context, tree fs.FS, tenant string, book *recipe.Book) (generator.Options, error) {
	tenants, err := fs.Sub(tree, tenantsDir)
	if err != nil {
		return generator.Options{}, err
	}
	recipes, err := fs.Sub(tree, recipesDir)
	if err != nil {
		return generator.Options{}, err
	}
	return generator.Options{
		Recipes: recipes, Tenants: onlyTenant{fsys: tenants, tenant: tenant}, Book: book,
		RecipesDir: recipesDir, TenantsDir: tenantsDir, OutDir: s.opts.WorkDir, Tenant: tenant,
		Check: generator.AdmissionCheck(ctx), Render: s.opts.Render, RepoURL: s.opts.RepoURL,
		Getenv: s.opts.Getenv, Now: s.opts.Now,
		// What the inputs hold is what runs: the render of a write never refuses a job for
		// quota (a quota lowered below what runs keeps it); the writes that grow a job are held
		// to the quota before they commit (checkQuota).
		Running: plan.AsRunning,
	}, nil
}

// tenantCache keeps what was parsed from the inputs, keyed by the git hashes of what it was
// parsed from: unchanged inputs are never parsed twice, and a new commit costs only what it
// changed.
type tenantCache struct {
	mu      sync.Mutex
	books   map[string]*memo[*recipe.Book]       // recipes tree hash
	objects map[string]*memo[*v1alpha1.Tenant]   // tenant.yaml blob hash
	plans   map[string]*memo[*generator.Planned] // tenant, its folder, node types, masters, recipes
	models  map[string]*memo[[]modelEntry]       // as plans, plus nothing: derived per plan key
}

type memo[T any] struct {
	once sync.Once
	val  T
	err  error
}

// maxMemos bounds each map: past it the map starts afresh (entries of old commits go).
const maxMemos = 8192

func newTenantCache() *tenantCache {
	return &tenantCache{books: map[string]*memo[*recipe.Book]{}, objects: map[string]*memo[*v1alpha1.Tenant]{},
		plans: map[string]*memo[*generator.Planned]{}, models: map[string]*memo[[]modelEntry]{}}
}

func get[T any](mu *sync.Mutex, m *map[string]*memo[T], key string, load func() (T, error)) (T, error) {
	mu.Lock()
	e, ok := (*m)[key]
	if !ok {
		if len(*m) >= maxMemos {
			*m = map[string]*memo[T]{}
		}
		e = &memo[T]{}
		(*m)[key] = e
	}
	mu.Unlock()
	e.once.Do(func() { e.val, e.err = load() })
	return e.val, e.err
}

// book is the recipes of a view, loaded once per recipes tree.
func (s *Server) book(v *view) (*recipe.Book, error) {
	h := v.tree.Hash(recipesDir)
	if h == "" {
		return nil, nil
	}
	return get(&s.cache.mu, &s.cache.books, h, func() (*recipe.Book, error) {
		sub, err := fs.Sub(v.tree, recipesDir)
		if err != nil {
			return nil, err
		}
		return recipe.Load(sub)
	})
}

// tenantObject is the tenant's tenant.yaml, read for access decisions (nil: no such tenant).
func (s *Server) tenantObject(v *view, tenant string) (*v1alpha1.Tenant, error) {
	if v == nil || !validName(tenant) {
		return nil, nil
	}
	p := path.Join(tenantsDir, tenant, inputs.TenantFile)
	h := v.tree.Hash(p)
	if h == "" {
		return nil, nil
	}
	return get(&s.cache.mu, &s.cache.objects, h, func() (*v1alpha1.Tenant, error) {
		data, err := v.tree.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var t v1alpha1.Tenant
		if err := yaml.Unmarshal(data, &t); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		t.Name = tenant
		return &t, nil
	})
}

// tenants lists the tenant folders of a view that have a tenant.yaml.
func (s *Server) tenants(v *view) ([]*v1alpha1.Tenant, error) {
	entries, err := v.tree.ReadDir(tenantsDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []*v1alpha1.Tenant
	for _, e := range entries {
		if !e.IsDir() || e.Name() == inputs.NodeTypesDir || e.Name() == inputs.MastersDir || e.Name() == inputs.TiersDir {
			continue
		}
		t, err := s.tenantObject(v, e.Name())
		if err != nil {
			return nil, err
		}
		if t != nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// planKey names what a tenant's plan is computed from.
func planKey(v *view, tenant string) string {
	return strings.Join([]string{tenant, v.tree.Hash(path.Join(tenantsDir, tenant)), v.tree.Hash(path.Join(tenantsDir, inputs.NodeTypesDir)),
		v.tree.Hash(path.Join(tenantsDir, inputs.MastersDir)), v.tree.Hash(path.Join(tenantsDir, inputs.TiersDir)), v.tree.Hash(recipesDir)}, "/")
}

// plan is the tenant's inputs loaded and planned exactly as generate plans them, once per
// version of what it reads.
func (s *Server) plan(ctx context.Context, v *view, tenant string) (*generator.Planned, error) {
	return get(&s.cache.mu, &s.cache.plans, planKey(v, tenant), func() (*generator.Planned, error) {
		book, err := s.book(v)
		if err != nil {
			return nil, err
		}
		opts, err := s.genOptions(ctx, v.tree, tenant, book)
		if err != nil {
			return nil, err
		}
		return generator.Plan(opts)
	})
}

// tenantPlan is the plan's one tenant.
func tenantPlan(p *generator.Planned) *plan.TenantPlan {
	if p == nil || len(p.Plan.Tenants) == 0 {
		return nil
	}
	return &p.Plan.Tenants[0]
}
