package inputsrepo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/inferplane/inferplane/generator/publish"
)

// TrailerInputs is the trailer of a tenant repository's commit that names the inputs commit it
// was rendered from (publish.Options.Trailers).
const TrailerInputs = "Inferplane-Inputs"

// InputsTrailer is the trailer line for a render of inputs commit c.
func InputsTrailer(c string) string { return TrailerInputs + ": " + c }

// DefaultDeps are the input paths a tenant's rendering reads: its own folder, the node types,
// the hand-written masters, the tiers and the recipes.
func DefaultDeps(tenant string) []string {
	return []string{"tenants/" + tenant, "tenants/nodetypes", "tenants/masters", "tenants/tiers", "recipes"}
}

// TenantRepo is one tenant's rendered repository, as reconcile sees it.
type TenantRepo struct {
	Tenant string
	// Target is where the rendered repository lives (its URL, or its folder without one).
	Target publish.Target
	// Deps are the input paths its rendering reads; nil: DefaultDeps.
	Deps []string
}

// Reconciler renders the tenants whose repository is behind the inputs: one per replica, run
// in a loop. A tenant's repository records the inputs commit it was rendered from (a trailer of
// its head commit); the tenant is behind when a path its rendering reads differs between that
// commit and the inputs head. That is the case after a crash between the inputs push and the
// tenant's push, or a change pushed to the inputs by hand.
//
// A render that changes nothing makes no commit, so the repository keeps naming the older
// inputs commit; the Reconciler remembers (in memory: a restarted replica checks once more)
// that it found the tenant up to date at the newer one, and does not render it again until
// the tenant's own inputs or repository move.
type Reconciler struct {
	Inputs *Repo
	// Tenants lists the tenants of an inputs snapshot (read from its tenants/*/tenant.yaml).
	Tenants func(snap Snapshot) ([]TenantRepo, error)
	// Render renders one tenant from the snapshot and publishes it with
	// InputsTrailer(snap.Commit) among its trailers; it says whether it made a commit.
	Render func(ctx context.Context, tenant TenantRepo, snap Snapshot) (committed bool, err error)

	mu       sync.Mutex
	verified map[string]verified // tenant -> up to date at this inputs commit, for this head
	heads    map[string]headInfo // target -> its head and trailer, read once per head
}

type verified struct{ tenantHead, inputs string }

type headInfo struct{ head, inputs string }

// Status of a tenant after a reconcile.
type Status string

const (
	Fresh    Status = "fresh"    // its repository reflects the inputs head
	Rendered Status = "rendered" // it was behind and was rendered
	Failed   Status = "failed"
)

// Outcome is one tenant's reconcile.
type Outcome struct {
	Tenant string
	Status Status
	// From is the inputs commit the repository was rendered from before ("" unknown).
	From string
	// Committed: the render made a commit (false when it found nothing to change).
	Committed bool
	Err       error
}

// Run fetches the inputs head and renders every tenant that is behind it. It returns every
// tenant's outcome; its error joins the failed tenants' errors.
func (rc *Reconciler) Run(ctx context.Context) (string, []Outcome, error) {
	snap, err := rc.Inputs.Head(ctx)
	if err != nil {
		return "", nil, err
	}
	if snap.Commit == "" {
		return "", nil, nil
	}
	tenants, err := rc.Tenants(snap)
	if err != nil {
		return snap.Commit, nil, fmt.Errorf("inputs %s: %w", snap.Commit[:12], err)
	}
	var out []Outcome
	var errs []error
	for _, t := range tenants {
		o := rc.one(ctx, t, snap)
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", t.Tenant, o.Err))
		}
		out = append(out, o)
	}
	return snap.Commit, out, errors.Join(errs...)
}

func (rc *Reconciler) one(ctx context.Context, t TenantRepo, snap Snapshot) Outcome {
	o := Outcome{Tenant: t.Tenant}
	head, from, err := rc.renderedFrom(ctx, t.Target)
	if err != nil {
		o.Status, o.Err = Failed, err
		return o
	}
	o.From = from
	rc.mu.Lock()
	if v, ok := rc.verified[t.Tenant]; ok && v.tenantHead == head {
		from = v.inputs
	}
	rc.mu.Unlock()
	behind := from != snap.Commit
	if behind && from != "" {
		deps := t.Deps
		if deps == nil {
			deps = DefaultDeps(t.Tenant)
		}
		changed, err := rc.Inputs.Changed(from, snap.Commit, deps)
		behind = err != nil || changed // an inputs commit it cannot read counts as behind
	}
	if !behind {
		rc.remember(t.Tenant, head, snap.Commit)
		o.Status = Fresh
		return o
	}
	o.Committed, o.Err = rc.Render(ctx, t, snap)
	if o.Err != nil {
		o.Status = Failed
		return o
	}
	o.Status = Rendered
	if !o.Committed {
		rc.remember(t.Tenant, head, snap.Commit)
	}
	return o
}

func (rc *Reconciler) remember(tenant, head, inputs string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.verified == nil {
		rc.verified = map[string]verified{}
	}
	rc.verified[tenant] = verified{tenantHead: head, inputs: inputs}
}

// renderedFrom reads a tenant repository's head commit and the inputs commit its trailer
// names ("" for none, or for a repository without a commit).
func (rc *Reconciler) renderedFrom(ctx context.Context, t publish.Target) (head, inputs string, err error) {
	if t.URL == "" {
		return renderedFromDir(t)
	}
	h, err := remoteHead(ctx, t)
	if err != nil || h.IsZero() {
		return "", "", err
	}
	key := t.URL + "#" + cmp.Or(t.Branch, publish.DefaultBranch)
	rc.mu.Lock()
	cached, ok := rc.heads[key]
	rc.mu.Unlock()
	if ok && cached.head == h.String() {
		return cached.head, cached.inputs, nil
	}
	c, err := fetchCommit(ctx, t)
	if err != nil {
		return "", "", err
	}
	info := headInfo{head: c.Hash.String(), inputs: Trailers(c.Message)[TrailerInputs]}
	rc.mu.Lock()
	if rc.heads == nil {
		rc.heads = map[string]headInfo{}
	}
	rc.heads[key] = info
	rc.mu.Unlock()
	return info.head, info.inputs, nil
}

func renderedFromDir(t publish.Target) (string, string, error) {
	repo, err := git.PlainOpen(t.Dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(cmp.Or(t.Branch, publish.DefaultBranch)), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	c, err := repo.CommitObject(ref.Hash())
	if err != nil {
		return "", "", err
	}
	return c.Hash.String(), Trailers(c.Message)[TrailerInputs], nil
}

// remoteHead asks the remote for its branch's head, without fetching (zero when none).
func remoteHead(ctx context.Context, t publish.Target) (plumbing.Hash, error) {
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: remoteName, URLs: []string{t.URL}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: t.Auth})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("list %s: %v", publish.Redact(t.URL), err)
	}
	branch := plumbing.NewBranchReferenceName(cmp.Or(t.Branch, publish.DefaultBranch))
	for _, ref := range refs {
		if ref.Name() == branch {
			return ref.Hash(), nil
		}
	}
	return plumbing.ZeroHash, nil
}

// fetchCommit fetches the branch's head commit alone (depth 1) into memory.
func fetchCommit(ctx context.Context, t publish.Target) (*object.Commit, error) {
	repo, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		return nil, err
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{t.URL}}); err != nil {
		return nil, err
	}
	branch := plumbing.NewBranchReferenceName(cmp.Or(t.Branch, publish.DefaultBranch))
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", branch, branch))
	if err := repo.FetchContext(ctx, &git.FetchOptions{RemoteName: remoteName, RefSpecs: []config.RefSpec{spec}, Depth: 1, Auth: t.Auth}); err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, fmt.Errorf("fetch %s: %v", publish.Redact(t.URL), err)
	}
	ref, err := repo.Reference(branch, true)
	if err != nil {
		return nil, err
	}
	return repo.CommitObject(ref.Hash())
}

// Changed says whether any of paths (files or folders) differs between two inputs commits
// already fetched: each path's tree entry is compared by hash, so the cost is the paths' depth,
// not the size of the inputs.
func (r *Repo) Changed(from, to string, paths []string) (bool, error) {
	objs, err := r.fetched()
	if err != nil {
		return true, err
	}
	a, err := commitTree(objs, from)
	if err != nil {
		return true, err
	}
	b, err := commitTree(objs, to)
	if err != nil {
		return true, err
	}
	for _, p := range paths {
		if entryHash(a, p) != entryHash(b, p) {
			return true, nil
		}
	}
	return false, nil
}

func commitTree(objs guarded, h string) (*object.Tree, error) {
	c, err := object.GetCommit(objs, plumbing.NewHash(h))
	if err != nil {
		return nil, fmt.Errorf("inputs commit %s: %w", h, err)
	}
	return object.GetTree(objs, c.TreeHash)
}

// entryHash is the hash of the file or folder at p (zero when absent).
func entryHash(t *object.Tree, p string) plumbing.Hash {
	e, err := t.FindEntry(p)
	if err != nil {
		return plumbing.ZeroHash
	}
	return e.Hash
}

// IsAncestor says whether inputs commit a is b or one of b's ancestors (both fetched): for a
// render that finds its tenant's repository already rendered from a newer inputs commit than
// its own, and so has nothing to do. The walk is bounded like every walk of the history.
func (r *Repo) IsAncestor(a, b string) (bool, error) {
	objs, err := r.fetched()
	if err != nil {
		return false, err
	}
	want := plumbing.NewHash(a)
	c, err := object.GetCommit(objs, plumbing.NewHash(b))
	if err != nil {
		return false, fmt.Errorf("inputs commit %s: %w", b, err)
	}
	for n := 0; n < maxScan; n++ {
		if c.Hash == want {
			return true, nil
		}
		if len(c.ParentHashes) == 0 {
			return false, nil
		}
		if c, err = object.GetCommit(objs, c.ParentHashes[0]); err != nil {
			return false, err
		}
	}
	return false, nil
}

// RenderedFrom reads a tenant repository's head commit and the inputs commit its trailer names
// ("" for none), uncached: for a render whose push was refused, to see whether another replica
// already rendered newer inputs (IsAncestor).
func RenderedFrom(ctx context.Context, t publish.Target) (head, inputs string, err error) {
	if t.URL == "" {
		return renderedFromDir(t)
	}
	h, err := remoteHead(ctx, t)
	if err != nil || h.IsZero() {
		return "", "", err
	}
	c, err := fetchCommit(ctx, t)
	if err != nil {
		return "", "", err
	}
	return c.Hash.String(), Trailers(c.Message)[TrailerInputs], nil
}
