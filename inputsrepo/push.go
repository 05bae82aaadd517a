package inputsrepo

import (
	"context"
	"errors"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// push sends exactly the objects the write made and asks the remote to move the branch from
// old to commit. The remote makes that move only if the branch is still at old (git's
// receive-pack compares under its ref lock), so two writers that built on the same head can
// never both land: the second is refused, as errStale.
//
// go-git's Push is not used: it works out what to send by walking every object reachable from
// the remote's head, so each push would cost the size of the repository's history; here the
// write knows what it made. Large trees go as deltas against the ones they replace (bases).
func (r *Repo) push(ctx context.Context, old, commit plumbing.Hash, objs []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) (err error) {
	ep, err := transport.NewEndpoint(r.opts.URL)
	if err != nil {
		return r.remoteErr(ctx, "push", err)
	}
	cl, err := client.NewClient(ep)
	if err != nil {
		return r.remoteErr(ctx, "push", err)
	}
	sess, err := cl.NewReceivePackSession(ep, r.auth)
	if err != nil {
		return r.remoteErr(ctx, "push", err)
	}
	defer func() {
		if cerr := sess.Close(); cerr != nil && err == nil {
			err = r.remoteErr(ctx, "push", cerr)
		}
	}()
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return r.remoteErr(ctx, "push", err)
	}
	refs, err := adv.AllReferences()
	if err != nil {
		return r.remoteErr(ctx, "push", err)
	}
	cur := plumbing.ZeroHash
	if ref, ok := refs[r.branch]; ok {
		cur = ref.Hash()
	}
	if cur != old {
		return errStale // moved since the fetch: no need to send anything
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(adv.Capabilities)
	req.Commands = []*packp.Command{{Name: r.branch, Old: old, New: commit}}
	rd, wr := io.Pipe()
	req.Packfile = rd
	done := make(chan error, 1)
	go func() { done <- wr.CloseWithError(writePack(wr, r.objects(), objs, bases)) }()
	status, err := sess.ReceivePack(ctx, req)
	if err != nil {
		_ = rd.CloseWithError(err)
		<-done
		return r.remoteErr(ctx, "push", err)
	}
	if err := <-done; err != nil {
		return r.remoteErr(ctx, "push", err)
	}
	if status != nil {
		if err := status.Error(); err != nil {
			return r.refused(ctx, old, err)
		}
	}
	// Record what the remote now holds, as a fetch would.
	r.objMu.Lock()
	defer r.objMu.Unlock()
	return r.repo.Storer.SetReference(plumbing.NewHashReference(r.remote, commit))
}

// refused turns a remote's refusal into errStale when the branch moved (another writer's
// push won the ref lock), else into an error with the remote's reason (a hook, permissions).
func (r *Repo) refused(ctx context.Context, old plumbing.Hash, err error) error {
	if _, ferr := r.fetch(ctx); ferr == nil && r.movedFrom(old) {
		return errStale
	}
	return r.remoteErr(ctx, "push", errors.Join(errors.New("the remote refused the update"), err))
}
