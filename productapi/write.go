package productapi

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"io/fs"

	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/publish"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// change is one write of a tenant's inputs, as a handler asks for it.
type change struct {
	tenant  string
	message string
	// apply changes the tree; it runs again on a newer head when another replica pushed first.
	apply func(ctx context.Context, t *inputsrepo.Tree) error
	// idemKey is the client's Idempotency-Key ("" none); request what it asked.
	idemKey, request string
}

// written is what a write did: its answer, and the tenant's plan as the write left it (the
// precommit check's, for the handler's answer; nil when the write was replayed or unchanged).
type written struct {
	w  apiv1.Write
	tp *plan.TenantPlan
}

// write commits one change to the inputs as the caller, checked by the generator for that
// tenant alone (precommit), then renders and pushes the tenant's repository. The commit is
// pushed by this replica's writer, or handed to the replica that pushed last (peers.go). The
// render is not undone by the caller giving up: it runs to its end (bounded), and what it could
// not do the reconcile loop does.
func (s *Server) write(ctx context.Context, ch change) (written, error) {
	id := identity(ctx)
	name, email := id.Author()
	var (
		mu      sync.Mutex
		checked *checkedTenant
	)
	c := inputsrepo.Change{
		Author:  inputsrepo.Author{Name: name, Email: email},
		Message: ch.message,
		Apply:   func(t *inputsrepo.Tree) error { return ch.apply(ctx, t) },
		Check: func(ctx context.Context, t *inputsrepo.Tree) error {
			c, err := s.precommit(ctx, t, ch.tenant)
			mu.Lock()
			checked = c
			mu.Unlock()
			return err
		},
		// A race with another replica's write to another tenant carries this one over as it is:
		// neither its change nor its check read anything but these.
		Reads: tenantReads(ch.tenant),
	}
	if ch.idemKey != "" {
		// Scoped to the caller and the tenant: another caller's key never replays this one.
		c.IdempotencyKey = id.Issuer + "\x00" + id.Subject + "\x00" + ch.tenant + "\x00" + ch.idemKey
		c.Request = ch.request
	}
	start := time.Now()
	var (
		res   inputsrepo.Result
		err   error
		known string // the newest inputs commit this replica has that the write's commit follows
	)
	if peer := s.writerPeer(); peer != "" {
		res, known, err = s.writeVia(ctx, peer, c)
	} else {
		res, err = s.opts.Inputs.Write(ctx, c)
		known = res.Commit
	}
	s.metrics.writeAttempts.Observe(float64(res.Attempts))
	if err != nil {
		s.metrics.writes.WithLabelValues(writeResult(err)).Inc()
		s.log.Info("write refused or failed", "tenant", ch.tenant, "by", id.Subject, "message", ch.message, "attempts", res.Attempts, "error", err)
		return written{}, s.writeProblem(err)
	}
	w := apiv1.Write{InputsCommit: res.Commit, Replayed: res.Replayed, Unchanged: res.Unchanged}
	s.metrics.writes.WithLabelValues(map[bool]string{true: "replayed", false: "committed"}[res.Replayed]).Inc()
	if res.Batch > 0 {
		s.metrics.writeBatch.Observe(float64(res.Batch))
	}
	s.log.Info("inputs committed", "tenant", ch.tenant, "by", id.Subject, "message", ch.message, "commit", short(res.Commit),
		"attempts", res.Attempts, "batch", res.Batch, "replayed", res.Replayed, "unchanged", res.Unchanged)
	// Reads see a commit this replica pushed at once; one another replica pushed, with the next
	// refresh (a read of a job not found yet fetches first).
	if res.Snapshot.Files != nil {
		if err := s.advance(ctx, res.Snapshot); err != nil {
			s.log.Warn("inputs: fetch after a write failed", "error", err)
		}
	}
	if res.Replayed || res.Unchanged {
		// The first request's replica rendered it (or the reconcile loop does).
		w.Rendered = true
		return written{w: w}, nil
	}
	mu.Lock()
	r := checked
	mu.Unlock()
	w.TenantCommit, err = s.publish.push(ctx, r.rendered, res.Commit, known)
	s.metrics.writeSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		w.RenderError = fmt.Sprintf("the inputs are committed (%s), but pushing tenant %s's repository failed; the reconcile loop retries it: %v", short(res.Commit), ch.tenant, err)
		s.log.Warn("render after a write failed; the reconcile loop retries", "tenant", ch.tenant, "inputs", short(res.Commit), "error", err)
		return written{w: w, tp: tenantPlan(r.planned)}, nil
	}
	w.Rendered = true
	return written{w: w, tp: tenantPlan(r.planned)}, nil
}

// tenantReads are the paths of the inputs a write to tenant reads: its change and its
// precommit check read nothing else. A check that reads more (a tier or quota kept outside the
// tenant's folder) must be named here, or a race with another replica's write to that path
// would carry a stale decision over.
func tenantReads(tenant string) []string { return inputsrepo.DefaultDeps(tenant) }

// checkedTenant is a tenant as its precommit check found it: planned and rendered.
type checkedTenant struct {
	planned  *generator.Planned
	rendered generator.Rendered
}

// precommit is the check of a tenant's inputs as a write would leave them, before anything is
// committed: the generator for that tenant alone (load, plan with the policy's rules and the
// tenant's GPU quota, render, and the admission policy generate applies), over the tenant's
// whole folder. Its refusal is the write's 422, with generate's file, field and words; what it
// renders is what the write publishes. Checks of the whole tenant's inputs (quota, tiers) go
// here.
func (s *Server) precommit(ctx context.Context, t *inputsrepo.Tree, tenant string) (*checkedTenant, error) {
	return s.render(ctx, t, tenant)
}

func writeResult(err error) string {
	var (
		ce *inputsrepo.ConflictError
		ck *inputsrepo.CheckError
	)
	switch {
	case errors.As(err, &ce):
		return "conflict"
	case errors.As(err, &ck):
		return "refused"
	case errors.Is(err, inputsrepo.ErrBusy):
		return "busy"
	}
	return "error"
}

// render plans, renders and checks one tenant from a tree of the inputs, as generate would.
func (s *Server) render(ctx context.Context, tree *inputsrepo.Tree, tenant string) (*checkedTenant, error) {
	book, err := s.bookOf(tree)
	if err != nil {
		return nil, err
	}
	opts, err := s.genOptions(ctx, tree, tenant, book)
	if err != nil {
		return nil, err
	}
	planned, out, err := generator.RenderPlanned(opts)
	if err != nil {
		return nil, err
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("rendering tenant %s gave %d tenants", tenant, len(out))
	}
	return &checkedTenant{planned: planned, rendered: out[0]}, nil
}

// bookOf is the recipes of a tree being changed: cached by the recipes folder's hash when the
// change left them alone (the API never writes recipes).
func (s *Server) bookOf(t *inputsrepo.Tree) (*recipe.Book, error) {
	for _, p := range t.Changed() {
		if p == recipesDir || len(p) > len(recipesDir) && p[:len(recipesDir)+1] == recipesDir+"/" {
			sub, err := fs.Sub(t, recipesDir)
			if err != nil {
				return nil, err
			}
			return recipe.Load(sub)
		}
	}
	return s.book(&view{tree: t})
}

// publisher pushes rendered tenants. Writes to one tenant publish one at a time (the work tree
// is one folder), and those that queue behind a publish go together: the newest render waiting
// is published once for all of them, since its inputs commit holds every older one's change
// (the inputs branch is one line of commits).
type publisher struct {
	s       *Server
	remote  publish.Remote
	mu      sync.Mutex
	tenants map[string]*tenantQueue
}

type tenantQueue struct {
	running bool
	waiting []*pubRequest
}

type pubRequest struct {
	r      generator.Rendered
	inputs string
	known  string // the newest inputs commit this replica has that inputs follows (or is)
	done   chan pubResult
}

type pubResult struct {
	commit string
	err    error
}

// publishTimeout bounds one publish: it runs to its end even when the caller hangs up.
const publishTimeout = 2 * time.Minute

// push publishes a tenant rendered from inputs commit `inputs` (or a newer render that holds
// it), and returns the tenant repository's commit ("" when there was nothing to commit). known
// is inputs, or for a commit another replica pushed and this one has not fetched, the commit
// it was prepared on.
func (p *publisher) push(ctx context.Context, r generator.Rendered, inputs, known string) (string, error) {
	req := &pubRequest{r: r, inputs: inputs, known: known, done: make(chan pubResult, 1)}
	p.mu.Lock()
	if p.tenants == nil {
		p.tenants = map[string]*tenantQueue{}
	}
	q := p.tenants[r.Tenant]
	if q == nil {
		q = &tenantQueue{}
		p.tenants[r.Tenant] = q
	}
	q.waiting = append(q.waiting, req)
	if !q.running {
		q.running = true
		go p.run(r.Tenant, q)
	}
	p.mu.Unlock()
	res := <-req.done
	return res.commit, res.err
}

// run publishes a tenant's queue until it is empty.
func (p *publisher) run(tenant string, q *tenantQueue) {
	for {
		p.mu.Lock()
		batch := q.waiting
		q.waiting = nil
		if len(batch) == 0 {
			q.running = false
			delete(p.tenants, tenant)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		newest := batch[0]
		for _, req := range batch[1:] {
			if p.s.follows(newest.inputs, req.inputs) || p.s.follows(newest.inputs, req.known) {
				newest = req
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		commit, err := p.publish(ctx, newest.r, newest.inputs, newest.known)
		cancel()
		for _, req := range batch {
			req.done <- pubResult{commit, err}
		}
	}
}

// publish publishes one render, recording its inputs commit as the commit's trailer. A
// repository already rendered from these inputs or newer ones is left as it is (another
// replica got there first). When another replica's push wins the race, the repository is read
// again and the push tried again on it.
func (p *publisher) publish(ctx context.Context, r generator.Rendered, inputs, known string) (string, error) {
	opts := generator.PublishOptions(generator.Options{Now: p.s.opts.Now, Trailers: []string{inputsrepo.InputsTrailer(inputs)}})
	opts.Skip = func(message string) bool { return p.s.renderedFromNewer(inputs, known, message) }
	var last error
	for attempt := 1; attempt <= 5; attempt++ {
		start := time.Now()
		publishTo := publish.Publish
		if r.Target.URL != "" {
			publishTo = p.remote.Publish // no work tree: only what the remote lacks is sent
		}
		res, err := publishTo(ctx, r.Target, r.Files, opts)
		p.s.metrics.pushSeconds.Observe(time.Since(start).Seconds())
		if err == nil {
			return res.Commit, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt*attempt) * 20 * time.Millisecond)
	}
	return "", last
}

// renderedFromNewer says whether a tenant repository's commit (its message) was rendered from
// inputs commit `inputs` or a newer one. known is inputs, or the newest commit this replica has
// that inputs follows. A commit that is not known's ancestor is newer: every older one is known
// (the inputs branch is one line of commits), and none between known and inputs rendered this
// tenant (a write to it there would have moved what this one read). A commit without the
// trailer (generate run by hand) is not newer.
func (s *Server) renderedFromNewer(inputs, known, message string) bool {
	from := inputsrepo.Trailers(message)[inputsrepo.TrailerInputs]
	switch {
	case from == "":
		return false
	case from == inputs:
		return true
	}
	older, err := s.opts.Inputs.IsAncestor(from, known)
	return err != nil || !older
}

// reconcileTenants lists a snapshot's tenants with where each is published.
func (s *Server) reconcileTenants(snap inputsrepo.Snapshot) ([]inputsrepo.TenantRepo, error) {
	v := &view{commit: snap.Commit, tree: snap.Files}
	ts, err := s.tenants(v)
	if err != nil {
		return nil, err
	}
	out := make([]inputsrepo.TenantRepo, 0, len(ts))
	for _, t := range ts {
		target, probs := generator.TargetOf(t, path.Join(tenantsDir, t.Name, "tenant.yaml"), s.opts.WorkDir, s.opts.Getenv)
		if err := probs.Err(); err != nil {
			s.log.Warn("reconcile: tenant skipped", "tenant", t.Name, "error", err)
			continue
		}
		out = append(out, inputsrepo.TenantRepo{Tenant: t.Name, Target: target})
	}
	return out, nil
}

// reconcileRender renders one tenant from a snapshot and pushes it.
func (s *Server) reconcileRender(ctx context.Context, t inputsrepo.TenantRepo, snap inputsrepo.Snapshot) (bool, error) {
	c, err := s.render(ctx, snap.Files, t.Tenant)
	if err != nil {
		return false, err
	}
	commit, err := s.publish.push(ctx, c.rendered, snap.Commit, snap.Commit)
	return commit != "", err
}
