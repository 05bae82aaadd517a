package inputsrepo

import (
	"context"
	"fmt"
	"maps"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// prebuild applies a write and runs its check on the head this replica last fetched or pushed,
// in the caller's goroutine, before the writer has it. The writer puts the waiting writes on
// its head one after the other, and carries a write's edits (or its refusal) over when its
// Reads did not change since they were made (put): so the checks of writes that arrive together
// run side by side, not one after the other in the writer while the branch waits. A write the
// head moved under (its Reads differ at the writer's head) is applied and checked again there,
// as any write carried to a new head is. A write without Reads is left to the writer.
func (r *Repo) prebuild(p *pending) {
	if p.ch.Reads == nil || r.opts.CheckAgain {
		return
	}
	root, trees, ok := r.lastRoot()
	if !ok {
		return
	}
	t, err := applyChecked(p.ctx, p.ch, trees, root)
	if p.ctx.Err() != nil {
		return
	}
	deps := make([]plumbing.Hash, len(p.ch.Reads))
	for i, path := range p.ch.Reads {
		deps[i] = entryHash(trees, root, path)
	}
	p.built, p.root, p.deps, p.edits, p.msg, p.err = true, root, deps, maps.Clone(t.changes), t.message, err
}

// applyChecked applies a change to the tree root and, when that changed the tree, runs the
// change's check on it: how a write is first decided, in its caller's goroutine (prebuild) or
// for another replica's writer (Prepare). The error is the change's refusal there (a
// *CheckError for its check's) or the failure to build the new tree, which the writer's own
// build (put) would meet the same way.
func applyChecked(ctx context.Context, ch Change, trees *trees, root plumbing.Hash) (*Tree, error) {
	t := newTree(trees, root)
	if err := guard("apply", func() error { return ch.Apply(t) }); err != nil || len(t.changes) == 0 {
		return t, err
	}
	tree, _, err := t.write()
	if err != nil {
		return t, fmt.Errorf("inputsrepo: %w", err)
	}
	if tree != root && ch.Check != nil {
		if err := guard("check", func() error { return ch.Check(ctx, t) }); err != nil {
			return t, &CheckError{Err: err}
		}
	}
	return t, nil
}

// lastRoot is the tree of the branch's head as this replica last fetched or pushed it, and the
// decoded trees of the storage it is in, read without waiting for the writer (which holds mu
// through its push).
func (r *Repo) lastRoot() (plumbing.Hash, *trees, bool) {
	r.objMu.RLock()
	defer r.objMu.RUnlock()
	if r.repo == nil || r.trees == nil {
		return plumbing.ZeroHash, nil, false
	}
	ref, err := r.repo.Storer.Reference(r.remote)
	if err != nil {
		return plumbing.ZeroHash, nil, false
	}
	c, err := object.GetCommit(r.repo.Storer, ref.Hash())
	if err != nil {
		return plumbing.ZeroHash, nil, false
	}
	return c.TreeHash, r.trees, true
}
