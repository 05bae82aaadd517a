package inputsrepo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// Handing a write to another replica's writer. Replicas that all push to one branch race for
// it: every refused push costs the remote a whole push and the loser a fetch. A replica can
// instead prepare a change (apply it and run its check, the costly part, on the head it last
// fetched) and hand what it made to the replica that pushed last (Submit there), whose writer
// puts it in its next chain after checking that none of the change's Reads differ at its head:
// then the change and its check would decide the same there. So the checks stay spread over the
// replicas while one of them pushes for all, and none of them holds a lock: the remote's
// compare-and-swap of the branch stays what makes a write safe, whoever pushes it.

// TrailerWriter is the commit trailer naming the writer that pushed a commit
// (Options.WriterID), for replicas that hand their writes to the last one.
const TrailerWriter = "Inferplane-Writer"

// Prepared is a change applied and checked on a head, ready for any replica's writer (Submit).
// It carries the change's result, never its functions: its edits and the hashes of what it read.
type Prepared struct {
	// Base is the head it was prepared on.
	Base    string `json:"base"`
	Author  Author `json:"author"`
	Message string `json:"message"`
	// Key and Request are the idempotency key's and the request's hashes (never their text).
	Key     string `json:"key,omitempty"`
	Request string `json:"request,omitempty"`
	// Reads are the change's Reads; Deps their hashes at Base ("" for a path that is absent).
	Reads []string `json:"reads"`
	Deps  []string `json:"deps"`
	// Edits are its changes: path to new content, nil for a removed file.
	Edits map[string][]byte `json:"edits"`
}

// ReadsMovedError is a prepared change whose Reads differ at the writer's head: another write
// changed what it read. Prepare it again on a newer head.
type ReadsMovedError struct{ Path string }

func (e *ReadsMovedError) Error() string {
	return "the inputs it was prepared on changed at " + e.Path + " since: prepare it again on the new head"
}

// Prepare applies a change and runs its check on the head this replica last fetched (fresh:
// fetch first), as Write would, and commits nothing. Its refusals are Write's (a
// *ConflictError, a *CheckError, the change's own error); decided on a head that may be behind,
// they are worth confirming with fresh. A key found in the history returns that commit as the
// Result (Replayed), and no Prepared.
func (r *Repo) Prepare(ctx context.Context, ch Change, fresh bool) (Prepared, *Result, error) {
	if err := checkChange(ch); err != nil {
		return Prepared{}, nil, err
	}
	if ch.Reads == nil {
		return Prepared{}, nil, errors.New("inputsrepo: a change prepared for another writer needs its Reads")
	}
	key, request := hashKeys(ch)
	r.mu.Lock()
	head, _, err := r.knownHead(ctx)
	if err == nil && fresh {
		head, err = r.fetch(ctx)
	}
	trees := r.trees
	var found *keyed
	if err == nil && key != "" {
		found = r.replayOf(&pending{key: key})
	}
	r.mu.Unlock()
	if err != nil {
		return Prepared{}, nil, err
	}
	if found != nil {
		if found.request != "" && request != "" && found.request != request {
			return Prepared{}, nil, &KeyReusedError{Commit: found.commit.String()}
		}
		return Prepared{}, &Result{Commit: found.commit.String(), Replayed: true, Attempts: 1}, nil
	}
	root, base := plumbing.ZeroHash, ""
	if head != nil {
		root, base = head.TreeHash, head.Hash.String()
	}
	t, err := applyChecked(ctx, ch, trees, root)
	var ce *CheckError
	if errors.As(err, &ce) && ctx.Err() != nil {
		return Prepared{}, nil, ctx.Err() // the check stopped because the caller gave up
	}
	if err != nil {
		return Prepared{}, nil, err
	}
	p := Prepared{Base: base, Author: ch.Author, Message: cmp.Or(t.message, ch.Message), Key: key, Request: request, Reads: ch.Reads,
		Edits: maps.Clone(t.changes)}
	for _, path := range ch.Reads {
		p.Deps = append(p.Deps, t.Hash(path))
	}
	return p, nil, nil
}

// Submit puts a change prepared by any replica on the branch through this replica's writer,
// with its own writes (group commit): as it is, when its Reads have the hashes they had where it
// was prepared; otherwise it is a *ReadsMovedError and nothing of it is written. Its other
// results and errors are Write's.
func (r *Repo) Submit(ctx context.Context, p Prepared) (Result, error) {
	if len(p.Deps) != len(p.Reads) || p.Reads == nil {
		return Result{}, errors.New("inputsrepo: a prepared change needs the hash of each of its Reads")
	}
	for path := range p.Edits {
		if err := checkPath(path); err != nil {
			return Result{}, fmt.Errorf("inputsrepo: a prepared change's edit: %w", err)
		}
	}
	ch := Change{Author: p.Author, Message: p.Message, Reads: p.Reads, Apply: func(t *Tree) error {
		for i, path := range p.Reads {
			if t.Hash(path) != p.Deps[i] {
				return &ReadsMovedError{Path: path}
			}
		}
		return replay(t, p.Edits)
	}}
	if err := checkChange(ch); err != nil {
		return Result{}, err
	}
	return r.wait(ctx, &pending{ctx: ctx, ch: ch, key: p.Key, request: p.Request, done: make(chan outcome, 1)})
}

// Holds says whether inputs commit (fetched) has p's Reads as p leaves them: then what p's
// check decided and rendered where it was prepared is what the commit holds there. A writer puts
// p only where its Reads are as prepared, so the commit it made of p always holds it; a commit
// found by p's key that does not is an earlier write of the same request on another head.
func (r *Repo) Holds(commit string, p Prepared) (bool, error) {
	trees, err := r.fetched()
	if err != nil {
		return false, err
	}
	at, err := commitTree(trees, commit)
	if err != nil {
		return false, err
	}
	base := plumbing.ZeroHash
	if p.Base != "" {
		if base, err = commitTree(trees, p.Base); err != nil {
			return false, err
		}
	}
	t := newTree(trees, base)
	if err := replay(t, p.Edits); err != nil {
		return false, fmt.Errorf("inputsrepo: a prepared change's edit: %w", err)
	}
	prepared, _, err := t.write()
	if err != nil {
		return false, fmt.Errorf("inputsrepo: %w", err)
	}
	for _, path := range p.Reads {
		if entryHash(trees, at, path) != entryHash(trees, prepared, path) {
			return false, nil
		}
	}
	return true, nil
}

// SetWriterID sets Options.WriterID (the product API sets it from its peer settings).
func (r *Repo) SetWriterID(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opts.WriterID = id
}

// Writers are the writers (TrailerWriter) of the commits this replica fetched or pushed since
// `since`, each with the time of its last commit: the replicas pushing lately.
func (r *Repo) Writers(since time.Time) map[string]time.Time {
	r.objMu.RLock()
	defer r.objMu.RUnlock()
	out := map[string]time.Time{}
	for id, at := range r.writers {
		if !at.Before(since) {
			out[id] = at
		}
	}
	return out
}

// noteWriter records that writer id made a commit at `at`.
func (r *Repo) noteWriter(id string, at time.Time) {
	if id == "" {
		return
	}
	r.objMu.Lock()
	defer r.objMu.Unlock()
	if r.writers == nil {
		r.writers = map[string]time.Time{}
	}
	if at.After(r.writers[id]) {
		r.writers[id] = at
	}
}

// checkChange refuses a change Write cannot make.
func checkChange(ch Change) error {
	if ch.Apply == nil || strings.TrimSpace(ch.Message) == "" || ch.Author.Name == "" || ch.Author.Email == "" {
		return errors.New("inputsrepo: a change needs Apply, a Message and an Author with a name and an email")
	}
	return nil
}

// hashKeys are what the trailer records of a change's idempotency key and request.
func hashKeys(ch Change) (key, request string) {
	if ch.IdempotencyKey == "" {
		return "", ""
	}
	key = hashKey(ch.IdempotencyKey)
	if ch.Request != "" {
		request = hashKey(ch.Request)
	}
	return key, request
}
