package inputsrepo

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Author is who a commit is made for: the signed-in caller.
type Author struct {
	Name, Email string
}

// Change is one write.
type Change struct {
	// Apply changes the tree (the branch's head as fetched). It runs again on a newer head
	// when another replica pushed first, so it must decide from what it reads, not from what it
	// read before. It returns a *ConflictError (Conflictf) when the change does not apply to
	// this head (the job was deleted meanwhile); any other error is returned as it is. Nothing
	// written: the write does nothing and says Unchanged.
	Apply func(t *Tree) error
	// Check runs on the changed tree before anything is committed (e.g. the generator for the
	// tenant); its error comes back as a *CheckError. Nil: no check.
	Check func(ctx context.Context, t *Tree) error
	// Author of the commit (the committer is Options.Committer).
	Author Author
	// Message is what changed: a subject line, then optionally a blank line and a body.
	Message string
	// IdempotencyKey, when set, makes the write happen once: a key already recorded in the
	// history (within Options.IdempotencyWindow) returns that commit, Replayed, and writes
	// nothing. Scope it to the caller and the tenant (e.g. issuer, subject, tenant and the
	// client's Idempotency-Key): it is hashed, so its text never reaches git.
	IdempotencyKey string
	// Request, with a key, is what the request asked (e.g. its method, path and body): a key
	// found with another request is a *KeyReusedError, not a replay. It is hashed too.
	Request string
	// Reads are the paths (files or folders) Apply and Check read, e.g. the tenant's folder and
	// what its render reads. When set, a change whose push was refused because another writer
	// pushed first is not applied and checked again on the new head when none of them differ
	// there: its edits (or its refusal) carry over as they are, so a race costs a fetch and a
	// push, not a check. Nil: applied and checked again on every new head.
	Reads []string
}

// Result is what a write did.
type Result struct {
	// Commit is the commit that holds the change (the head when Unchanged).
	Commit string
	// Replayed: the idempotency key was found; Commit is the earlier write's commit.
	Replayed bool
	// Unchanged: the change left the tree as it was; nothing was committed.
	Unchanged bool
	// Changed lists the paths written or removed.
	Changed []string
	// Attempts is how many heads the change was put on: 1 unless another writer pushed while it
	// was being written.
	Attempts int
	// Batch is how many writes the push that carried this one held (group commit: 1 when it
	// went alone; 0 when nothing was pushed).
	Batch int
	// Snapshot is the inputs at Commit, to read the write's result without a fetch (empty
	// when the write failed, or when reading the commit back did).
	Snapshot Snapshot
}

// ConflictError is a change that does not apply to the current inputs (an HTTP 409).
type ConflictError struct{ Reason string }

func (e *ConflictError) Error() string { return "conflict: " + e.Reason }

// Conflictf makes a *ConflictError, for change functions.
func Conflictf(format string, args ...any) error {
	return &ConflictError{Reason: fmt.Sprintf(format, args...)}
}

// CheckError is a change the caller's check refused (an HTTP 422 carrying the check's own
// problems); nothing was committed.
type CheckError struct{ Err error }

func (e *CheckError) Error() string { return "refused by the check: " + e.Err.Error() }
func (e *CheckError) Unwrap() error { return e.Err }

// KeyReusedError is an idempotency key sent again with another request (an HTTP 422): the
// key's first request was written in Commit, and this one is not.
type KeyReusedError struct{ Commit string }

func (e *KeyReusedError) Error() string {
	return "the idempotency key was used for another request (commit " + e.Commit + "): send a new key with a new request"
}

// ErrBusy is a write that lost the race to other writers Options.Attempts times in a row (an
// HTTP 503 with Retry-After): nothing of it was pushed.
var ErrBusy = errors.New("the inputs branch kept moving: other writers pushed first on every attempt")

// Write applies one change as one commit on the branch (see the package comment and
// writer.go). Errors: the change's own, *ConflictError, *CheckError, *KeyReusedError, ErrBusy,
// or a fetch or push failure (the remote named without credentials). When the context ends
// while the push is under way the change may have landed: a retry with the same
// IdempotencyKey says which.
func (r *Repo) Write(ctx context.Context, ch Change) (Result, error) {
	if err := checkChange(ch); err != nil {
		return Result{}, err
	}
	key, request := hashKeys(ch)
	p := &pending{ctx: ctx, ch: ch, key: key, request: request, done: make(chan outcome, 1)}
	r.prebuild(p)
	return r.wait(ctx, p)
}

// wait hands a write to the writer and waits for its answer.
func (r *Repo) wait(ctx context.Context, p *pending) (Result, error) {
	r.enqueue(p)
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		// The writer drops the change unless its push is under way; then it may land.
		return Result{}, ctx.Err()
	}
}

// errStale: the branch moved since the head a chain was built on; it is built again.
var errStale = errors.New("the branch moved")

// TrailerWrite is the commit trailer that makes a commit its write's own: a random value drawn
// for each commit. Without it, two replicas making the same change on the same head in the same
// second (two deletes of one job by one caller, a create sent again with its key) make the same
// commit, byte for byte, and a writer whose push failed without saying how (landed) would find
// the other's commit on the remote and answer it as its own: two answers, one commit.
const TrailerWrite = "Inferplane-Write"

// commit stores the commit object of a change; request is the TrailerRequest value ("" none).
func (r *Repo) commit(ch Change, request string, parent, tree plumbing.Hash) (plumbing.Hash, error) {
	now := r.opts.Now()
	author := object.Signature{Name: ch.Author.Name, Email: ch.Author.Email, When: now}
	committer := r.opts.Committer
	committer.When = now
	msg := strings.TrimRight(ch.Message, "\n") + "\n"
	var trailers []string
	if request != "" {
		trailers = append(trailers, TrailerRequest+": "+request)
	}
	if r.opts.WriterID != "" {
		trailers = append(trailers, TrailerWriter+": "+r.opts.WriterID)
	}
	trailers = append(trailers, TrailerWrite+": "+strings.ToLower(crand.Text()))
	if Trailers(msg) == nil {
		msg += "\n" // a paragraph of their own; else they join the message's own trailers
	}
	msg += strings.Join(trailers, "\n") + "\n"
	c := &object.Commit{Author: author, Committer: committer, Message: msg, TreeHash: tree}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	obj := r.objects().NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.objects().SetEncodedObject(obj)
}

// landed says whether commit is on the remote branch: fetched anew, the head is it or has it
// among the commits since old.
func (r *Repo) landed(ctx context.Context, old, commit plumbing.Hash) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	head, err := r.fetch(ctx)
	if err != nil || head == nil {
		return false, err
	}
	for c, n := head, 0; c != nil && n < maxScan; n++ {
		if c.Hash == commit {
			return true, nil
		}
		if c.Hash == old || len(c.ParentHashes) == 0 {
			return false, nil
		}
		if c, err = c.Parent(0); err != nil {
			return false, err
		}
	}
	return false, nil
}

// movedFrom says whether the fetched remote head is no longer old.
func (r *Repo) movedFrom(old plumbing.Hash) bool {
	ref, err := r.repo.Reference(r.remote, true)
	if err != nil {
		return !old.IsZero()
	}
	return ref.Hash() != old
}

// backoff is the pause after a refused push: doubling from Options.Backoff, and at least as
// long as a push takes (another writer's push that is under way when ours is refused lands only
// at its end: retrying sooner loses again, and costs the remote a whole push each time), up to
// 2 s; drawn between half and all of one and a half of it so that writers that collided do not
// collide again in step.
func (r *Repo) backoff(attempt int) time.Duration {
	d := r.opts.Backoff << min(attempt-1, 10)
	d = min(max(d, time.Duration(r.pushTime.Load())), 2*time.Second)
	return d/2 + rand.N(d+1)
}
