package inputsrepo

import (
	"context"
	"errors"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/inferplane/inferplane/internal/gitpush"
)

// push sends exactly the objects the write made and asks the remote to move the branch from
// old to commit. The remote makes that move only if the branch is still at old (git's
// receive-pack compares under its ref lock), so two writers that built on the same head can
// never both land: the second is refused, as errStale. Large trees go as deltas against the
// ones they replace (bases).
func (r *Repo) push(ctx context.Context, old, commit plumbing.Hash, objs []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) (err error) {
	sess, err := gitpush.Open(ctx, r.opts.URL, r.auth)
	if err != nil {
		return r.remoteErr(ctx, "push", err)
	}
	defer func() {
		if cerr := sess.Close(); cerr != nil && err == nil {
			err = r.remoteErr(ctx, "push", cerr)
		}
	}()
	switch err := sess.Push(ctx, r.branch, old, commit, r.objects(), objs, bases); {
	case errors.Is(err, gitpush.ErrMoved):
		return errStale
	case err != nil:
		return r.remoteErr(ctx, "push", err)
	}
	// Record what the remote now holds, as a fetch would.
	r.objMu.Lock()
	defer r.objMu.Unlock()
	return r.repo.Storer.SetReference(plumbing.NewHashReference(r.remote, commit))
}
