package inputsrepo

import (
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
	t := newTree(trees, root)
	err := guard("apply", func() error { return p.ch.Apply(t) })
	if err == nil && len(t.changes) > 0 {
		tree, _, werr := t.write()
		if werr != nil {
			return // the writer meets it again, and says so
		}
		if tree != root && p.ch.Check != nil {
			if err = guard("check", func() error { return p.ch.Check(p.ctx, t) }); err != nil {
				err = &CheckError{Err: err}
			}
		}
	}
	if p.ctx.Err() != nil {
		return
	}
	deps := make([]plumbing.Hash, len(p.ch.Reads))
	for i, path := range p.ch.Reads {
		deps[i] = entryHash(trees, root, path)
	}
	p.built, p.root, p.deps, p.edits, p.msg, p.err = true, root, deps, maps.Clone(t.changes), t.message, err
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
