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

// write commits one change to the inputs as the caller, checked by the generator for that
// tenant alone, then renders and pushes the tenant's repository. The render is not undone by
// the caller giving up: it runs to its end (bounded), and what it could not do the reconcile
// loop does.
func (s *Server) write(ctx context.Context, ch change) (apiv1.Write, error) {
	id := identity(ctx)
	name, email := id.Author()
	var (
		mu       sync.Mutex
		rendered *generator.Rendered
	)
	c := inputsrepo.Change{
		Author:  inputsrepo.Author{Name: name, Email: email},
		Message: ch.message,
		Apply:   func(t *inputsrepo.Tree) error { return ch.apply(ctx, t) },
		Check: func(ctx context.Context, t *inputsrepo.Tree) error {
			r, err := s.render(ctx, t, ch.tenant)
			mu.Lock()
			rendered = r
			mu.Unlock()
			return err
		},
	}
	if ch.idemKey != "" {
		// Scoped to the caller and the tenant: another caller's key never replays this one.
		c.IdempotencyKey = id.Issuer + "\x00" + id.Subject + "\x00" + ch.tenant + "\x00" + ch.idemKey
		c.Request = ch.request
	}
	start := time.Now()
	res, err := s.opts.Inputs.Write(ctx, c)
	s.metrics.writeAttempts.Observe(float64(res.Attempts))
	if err != nil {
		s.metrics.writes.WithLabelValues(writeResult(err)).Inc()
		s.log.Info("write refused or failed", "tenant", ch.tenant, "by", id.Subject, "message", ch.message, "attempts", res.Attempts, "error", err)
		return apiv1.Write{}, s.writeProblem(err)
	}
	w := apiv1.Write{InputsCommit: res.Commit, Replayed: res.Replayed, Unchanged: res.Unchanged}
	s.metrics.writes.WithLabelValues(map[bool]string{true: "replayed", false: "committed"}[res.Replayed]).Inc()
	s.log.Info("inputs committed", "tenant", ch.tenant, "by", id.Subject, "message", ch.message, "commit", short(res.Commit),
		"attempts", res.Attempts, "replayed", res.Replayed, "unchanged", res.Unchanged)
	if err := s.advance(ctx, res.Snapshot); err != nil {
		s.log.Warn("inputs: fetch after a write failed", "error", err)
	}
	if res.Replayed || res.Unchanged {
		// The first request's replica rendered it (or the reconcile loop does).
		w.Rendered = true
		return w, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	mu.Lock()
	r := rendered
	mu.Unlock()
	w.TenantCommit, err = s.publish.push(rctx, *r, res.Commit)
	s.metrics.writeSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		w.RenderError = fmt.Sprintf("the inputs are committed (%s), but pushing tenant %s's repository failed; the reconcile loop retries it: %v", short(res.Commit), ch.tenant, err)
		s.log.Warn("render after a write failed; the reconcile loop retries", "tenant", ch.tenant, "inputs", short(res.Commit), "error", err)
		return w, nil
	}
	w.Rendered = true
	return w, nil
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

// render renders and checks one tenant from a tree of the inputs, as generate would.
func (s *Server) render(ctx context.Context, tree *inputsrepo.Tree, tenant string) (*generator.Rendered, error) {
	book, err := s.bookOf(tree)
	if err != nil {
		return nil, err
	}
	opts, err := s.genOptions(ctx, tree, tenant, book)
	if err != nil {
		return nil, err
	}
	out, err := generator.Render(opts)
	if err != nil {
		return nil, err
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("rendering tenant %s gave %d tenants", tenant, len(out))
	}
	return &out[0], nil
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

// publisher pushes rendered tenants, one at a time per tenant in this replica (its work tree
// is one folder).
type publisher struct {
	s     *Server
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (p *publisher) lock(tenant string) func() {
	p.mu.Lock()
	if p.locks == nil {
		p.locks = map[string]*sync.Mutex{}
	}
	l := p.locks[tenant]
	if l == nil {
		l = &sync.Mutex{}
		p.locks[tenant] = l
	}
	p.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// push publishes a tenant rendered from inputs commit `inputs`, recording it as the commit's
// trailer. When another replica pushed first, the repository is read again: if it was
// rendered from these inputs or newer ones there is nothing left to do; otherwise the push is
// tried again on the new head (publish fetches before committing).
func (p *publisher) push(ctx context.Context, r generator.Rendered, inputs string) (string, error) {
	defer p.lock(r.Tenant)()
	opts := generator.PublishOptions(generator.Options{Now: p.s.opts.Now, Trailers: []string{inputsrepo.InputsTrailer(inputs)}})
	var last error
	for attempt := 1; attempt <= 5; attempt++ {
		start := time.Now()
		res, err := publish.Publish(ctx, r.Target, r.Files, opts)
		p.s.metrics.pushSeconds.Observe(time.Since(start).Seconds())
		if err == nil {
			return res.Commit, nil
		}
		last = err
		_, from, rerr := inputsrepo.RenderedFrom(ctx, r.Target)
		if rerr == nil && from != "" {
			if newer, aerr := p.s.opts.Inputs.IsAncestor(inputs, from); aerr == nil && newer {
				return "", nil
			}
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt*attempt) * 20 * time.Millisecond)
	}
	return "", last
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
	r, err := s.render(ctx, snap.Files, t.Tenant)
	if err != nil {
		return false, err
	}
	commit, err := s.publish.push(ctx, *r, snap.Commit)
	return commit != "", err
}
