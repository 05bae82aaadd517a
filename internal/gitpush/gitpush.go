// Package gitpush pushes commits a program made in memory to a git remote, sending exactly the
// objects it names and moving a branch only from the value the caller built on: the send-pack
// side of git's protocol over go-git's transports, for writers that know what they made (the
// product API's inputs and tenant repositories). go-git's own Push is not used: it works out
// what to send by walking every object the remote's head reaches, so each push would cost the
// size of the repository's history.
package gitpush

import (
	"context"
	"errors"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// ErrMoved is a push refused because the branch was no longer at the value the caller built on
// (another writer pushed first). Nothing of the push was applied.
var ErrMoved = errors.New("the branch moved")

// RefusedError is a push the remote refused for another reason (a hook, permissions).
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return "the remote refused the update: " + e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Session is one receive-pack conversation: the remote's references as it advertised them,
// then at most one push.
type Session struct {
	url  string
	auth transport.AuthMethod
	sess transport.ReceivePackSession
	adv  *packp.AdvRefs
	refs map[plumbing.ReferenceName]*plumbing.Reference
}

// Open starts a receive-pack session with the repository at url and reads its references.
func Open(ctx context.Context, url string, auth transport.AuthMethod) (*Session, error) {
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return nil, err
	}
	cl, err := client.NewClient(ep)
	if err != nil {
		return nil, err
	}
	sess, err := cl.NewReceivePackSession(ep, auth)
	if err != nil {
		return nil, err
	}
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		_ = sess.Close()
		return nil, err
	}
	s := &Session{url: url, auth: auth, sess: sess, adv: adv, refs: map[plumbing.ReferenceName]*plumbing.Reference{}}
	if adv != nil {
		if s.refs, err = adv.AllReferences(); err != nil {
			_ = sess.Close()
			return nil, err
		}
	}
	return s, nil
}

// Ref is a reference's value as advertised (zero when the remote has no such reference).
func (s *Session) Ref(name plumbing.ReferenceName) plumbing.Hash {
	if ref, ok := s.refs[name]; ok {
		return ref.Hash()
	}
	return plumbing.ZeroHash
}

// Push sends objs (read from store; those with an entry in bases as deltas against it, a base
// the remote has or one sent before it) and asks the remote to move ref from old to new, which
// it does only if ref is still at old. ErrMoved when it was not (before anything was sent, or
// at the remote's ref lock: the remote's refusal is then read against its references again); a
// *RefusedError when the remote refused for another reason.
func (s *Session) Push(ctx context.Context, ref plumbing.ReferenceName, old, new plumbing.Hash, store storer.EncodedObjectStorer,
	objs []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	if s.Ref(ref) != old {
		return ErrMoved // moved since the caller read it: no need to send anything
	}
	req := packp.NewReferenceUpdateRequest()
	if s.adv != nil {
		req = packp.NewReferenceUpdateRequestFromCapabilities(s.adv.Capabilities)
	}
	req.Commands = []*packp.Command{{Name: ref, Old: old, New: new}}
	rd, wr := io.Pipe()
	req.Packfile = rd
	done := make(chan error, 1)
	go func() { done <- wr.CloseWithError(WritePack(wr, store, objs, bases)) }()
	status, err := s.sess.ReceivePack(ctx, req)
	if err != nil {
		_ = rd.CloseWithError(err)
	}
	perr := <-done
	switch {
	case status != nil && status.Error() != nil:
		err = &RefusedError{Err: status.Error()} // the remote's report: it refused
	case err == nil:
		err = perr
	}
	var refused *RefusedError
	if err == nil || !errors.As(err, &refused) {
		return err // nil, or a broken connection: the push may have landed, the caller looks
	}
	// Refused: whether another writer's push won the ref lock, the remote's references say.
	if again, oerr := Open(context.WithoutCancel(ctx), s.url, s.auth); oerr == nil {
		moved := again.Ref(ref) != old
		_ = again.Close()
		if moved {
			return ErrMoved
		}
	}
	return err
}

// Close ends the session.
func (s *Session) Close() error { return s.sess.Close() }
