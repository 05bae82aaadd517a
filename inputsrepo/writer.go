package inputsrepo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/inferplane/inferplane/internal/sleep"
)

// Group commit. A replica's writes go to one writer goroutine. It takes every write that
// waits (up to Options.MaxBatch), puts them on the branch's head one after the other, each as
// a commit of its own (its author, its message, its idempotency trailer) on top of the one
// before, and pushes the chain in one push: writes that arrive while a push is in flight go
// into the next one together. A write refused on its own (a conflict, its check, a key sent
// with another request) makes no commit and leaves the others in the chain; a caller that gave
// up before the push is left out of it.
//
// The chain is built on the head this replica last saw, without asking the remote first. The
// push moves the branch only if it is still at that head (the remote compares under its ref
// lock), so a push that lands proves every decision of the chain was made on the real head. A
// refused push means another writer moved the branch: the writer fetches and builds the chain
// again on the new head. There a change whose Reads did not change carries its edits (or its
// refusal) over as they are: only a change to the same tenant by another replica makes the
// check run again, so the time between the fetch and the push is a tree rebuild, not a render,
// and replicas racing for the branch rarely lose twice.
//
// Every answer is given once the chain's push landed (or, when nothing is left to push, on a
// head fetched for it), so a refusal is decided on the history it is answered against.

// pending is one write in the writer's hands.
type pending struct {
	ctx          context.Context
	ch           Change
	key, request string // hashed
	done         chan outcome

	// What its last build made of it, kept for a head where its Reads did not change.
	built bool
	root  plumbing.Hash     // the tree it was applied to
	deps  []plumbing.Hash   // the Reads' hashes there
	edits map[string][]byte // its changes to that tree
	msg   string            // and its message there, when the change described itself (Tree.Describe)
	err   error             // or its refusal there (a conflict, its check's)
	heads int               // how many heads it was put on
	last  plumbing.Hash     // the last of them
}

type outcome struct {
	res Result
	err error
}

func (p *pending) answer(res Result, err error) {
	select {
	case p.done <- outcome{res, err}:
	default: // answered already
	}
}

// link is what one build made of one write.
type link struct {
	p       *pending
	parent  plumbing.Hash // the commit it sits on (zero: none)
	commit  plumbing.Hash // its commit; zero when it made none
	tree    plumbing.Hash
	objs    []plumbing.Hash
	bases   map[plumbing.Hash]plumbing.Hash
	changed []string
	// Outcomes without a commit.
	unchanged bool
	replay    *keyed // the key was found in the history
	dupOf     int    // >= 0: the same key as an earlier write of this chain
	err       error
}

// Stats count what the writer did, since the Repo was opened.
type Stats struct {
	// Batches is how many chains were built and pushed (or found to have nothing to push).
	Batches int64
	// Pushes were tried; Refused of them were refused because another writer pushed first.
	Pushes, Refused int64
	// Commits landed.
	Commits int64
}

type stats struct{ batches, pushes, refused, commits atomic.Int64 }

// Stats returns the writer's counts.
func (r *Repo) Stats() Stats {
	return Stats{Batches: r.stats.batches.Load(), Pushes: r.stats.pushes.Load(), Refused: r.stats.refused.Load(), Commits: r.stats.commits.Load()}
}

func (r *Repo) enqueue(p *pending) {
	r.qmu.Lock()
	r.queue = append(r.queue, p)
	start := !r.writing
	r.writing = true
	r.qmu.Unlock()
	if start {
		go r.writer()
	}
}

// writer runs batches until nothing waits.
func (r *Repo) writer() {
	for {
		r.qmu.Lock()
		n := min(len(r.queue), r.opts.MaxBatch)
		if n == 0 {
			r.writing = false
			r.qmu.Unlock()
			return
		}
		batch := slices.Clone(r.queue[:n])
		r.queue = slices.Clone(r.queue[n:])
		r.qmu.Unlock()
		r.runBatch(batch)
	}
}

// batchContext ends when every write of the batch gave up: the fetches and the push serve
// them all, so no single caller's cancellation stops them.
func batchContext(batch []*pending) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, 0, len(batch))
	for _, p := range batch {
		stops = append(stops, context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// runBatch writes a batch (see the comment at the top).
func (r *Repo) runBatch(batch []*pending) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.batches.Add(1)
	ctx, done := batchContext(batch)
	defer done()
	if r.writes >= r.opts.RecloneAfter {
		// Snapshots handed out before keep reading the old storage, which they hold.
		r.setRepo(nil)
		r.writes = 0
	}
	r.writes += len(batch)
	live := batch
	fail := func(err error) {
		for _, p := range live {
			p.answer(Result{Attempts: p.heads}, err)
		}
	}
	head, fresh, err := r.knownHead(ctx)
	if err != nil {
		fail(err)
		return
	}
	for attempt := 1; ; attempt++ {
		built := time.Now()
		chain := r.build(head, live)
		r.opts.Logger.Debug("inputs: writes put on the head", "writes", len(live), "took", time.Since(built), "attempt", attempt)
		for {
			// What needs no push is answered; a caller that gave up meanwhile (the checks take
			// time) is left out, and the chain built again without it (its edits carried over).
			left := r.answerEarly(chain)
			if len(left) == 0 {
				return
			}
			if len(left) == len(live) {
				break
			}
			live = left
			chain = r.build(head, live)
		}
		tip, objs, bases, count := pushable(chain)
		if count == 0 && !fresh {
			// Nothing to push proves nothing: decide again on the remote's head.
			if head, err = r.fetch(ctx); err != nil {
				fail(err)
				return
			}
			fresh = true
			continue
		}
		if count == 0 {
			r.answerAll(chain, head, 0)
			return
		}
		old := plumbing.ZeroHash
		if head != nil {
			old = head.Hash
		}
		r.stats.pushes.Add(1)
		err := r.pushChain(ctx, old, tip, objs, bases)
		switch {
		case err == nil:
			r.stats.commits.Add(int64(count))
			if r.opts.WriterID != "" {
				r.noteWriter(r.opts.WriterID, r.opts.Now())
			}
			r.answerAll(chain, head, count)
			return
		case !errors.Is(err, errStale):
			fail(err)
			return
		}
		r.stats.refused.Add(1)
		if attempt >= r.opts.Attempts {
			fail(ErrBusy)
			return
		}
		r.opts.Logger.Info("inputs push refused: another writer pushed first; building the writes again on the new head",
			"attempt", attempt, "writes", len(live), "branch", r.opts.Branch)
		if err := sleep.For(ctx, r.backoff(attempt)); err != nil {
			fail(err)
			return
		}
		if head, err = r.fetch(ctx); err != nil {
			fail(err)
			return
		}
		fresh = true
	}
}

// knownHead is the head this replica last fetched or pushed; the first time, it fetches
// (fresh: the head was just read from the remote).
func (r *Repo) knownHead(ctx context.Context) (head *object.Commit, fresh bool, err error) {
	if r.repo != nil {
		ref, err := r.repo.Reference(r.remote, true)
		if err == nil {
			c, err := r.repo.CommitObject(ref.Hash())
			return c, false, err
		}
	}
	head, err = r.fetch(ctx)
	return head, true, err
}

// pushChain pushes the chain, and when the push failed without saying how, reads the remote
// to learn whether it landed all the same (the connection broke after the remote took it).
func (r *Repo) pushChain(ctx context.Context, old, tip plumbing.Hash, objs []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	start := time.Now()
	err := r.push(ctx, old, tip, objs, bases)
	r.opts.Logger.Debug("inputs: pushed", "objects", len(objs), "took", time.Since(start), "error", err)
	if d := int64(time.Since(start)); err == nil || errors.Is(err, errStale) {
		prev := r.pushTime.Load()
		r.pushTime.Store(prev + (d-prev)/4)
	}
	if err == nil || errors.Is(err, errStale) {
		return err
	}
	if landed, lerr := r.landed(context.WithoutCancel(ctx), old, tip); lerr == nil {
		switch {
		case landed:
			return nil
		case ctx.Err() == nil && r.movedFrom(old):
			return errStale
		}
	}
	return err
}

// answerEarly answers what needs no push (a replay, a caller that gave up) and returns the
// writes still to write.
func (r *Repo) answerEarly(chain []link) []*pending {
	var live []*pending
	for _, l := range chain {
		switch {
		case l.p.ctx.Err() != nil:
			l.p.answer(Result{Attempts: l.p.heads}, l.p.ctx.Err())
		case l.replay != nil && l.replay.request != "" && l.p.request != "" && l.replay.request != l.p.request:
			l.p.answer(Result{Attempts: l.p.heads}, &KeyReusedError{Commit: l.replay.commit.String()})
		case l.replay != nil:
			// With the inputs at the commit found: a write handed to a peer whose answer was lost
			// finds its own commit here, and its caller reads it without a fetch.
			l.p.answer(r.withSnapshot(Result{Commit: l.replay.commit.String(), Replayed: true, Attempts: max(l.p.heads, 1)}), nil)
		default:
			live = append(live, l.p)
		}
	}
	return live
}

// answerAll answers every write of a chain that landed (or had nothing to push) on head;
// count is how many commits the push carried.
func (r *Repo) answerAll(chain []link, head *object.Commit, count int) {
	for _, l := range chain {
		res := Result{Attempts: max(l.p.heads, 1), Batch: len(chain)}
		if count == 0 {
			res.Batch = 0
		}
		switch {
		case l.dupOf >= 0:
			orig := chain[l.dupOf]
			if orig.err != nil || orig.commit.IsZero() {
				l.p.answer(res, orig.err)
				continue
			}
			if orig.p.request != "" && l.p.request != "" && orig.p.request != l.p.request {
				l.p.answer(res, &KeyReusedError{Commit: orig.commit.String()})
				continue
			}
			res.Commit, res.Replayed = orig.commit.String(), true
		case l.err != nil:
			l.p.answer(res, l.err)
			continue
		case l.unchanged:
			res.Commit, res.Unchanged, res.Changed = hashString(l.parent), true, l.changed
		default:
			res.Commit, res.Changed = l.commit.String(), l.changed
		}
		l.p.answer(r.withSnapshot(res), nil)
	}
}

// withSnapshot adds the inputs at res.Commit (a commit this replica holds) to a write's answer.
// The change is written whatever this says: without a snapshot the caller fetches.
func (r *Repo) withSnapshot(res Result) Result {
	if res.Commit == "" {
		return res
	}
	snap, err := r.snapshotAt(res.Commit)
	if err != nil {
		r.opts.Logger.Warn("inputs: reading the write's commit failed", "commit", res.Commit, "error", err)
	}
	res.Snapshot = snap
	return res
}

func hashString(h plumbing.Hash) string {
	if h.IsZero() {
		return ""
	}
	return h.String()
}

// pushable is what the chain's push carries: its last commit, every object its commits made
// (once each) and the delta bases of the large trees; count is how many commits it holds.
func pushable(chain []link) (tip plumbing.Hash, objs []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash, count int) {
	seen := map[plumbing.Hash]bool{}
	bases = map[plumbing.Hash]plumbing.Hash{}
	for _, l := range chain {
		if l.commit.IsZero() {
			continue
		}
		count++
		tip = l.commit
		for _, h := range append(slices.Clone(l.objs), l.commit) {
			if !seen[h] {
				seen[h] = true
				objs = append(objs, h)
			}
		}
		maps.Copy(bases, l.bases)
	}
	return tip, objs, bases, count
}

// build puts the writes on head one after the other. A write whose Reads have the same hashes
// as when it was last applied carries its edits (or its refusal) over; any other is applied
// and checked again.
func (r *Repo) build(head *object.Commit, writes []*pending) []link {
	parent, root := plumbing.ZeroHash, plumbing.ZeroHash
	if head != nil {
		parent, root = head.Hash, head.TreeHash
	}
	base := parent
	keys := map[string]int{}
	chain := make([]link, 0, len(writes))
	for i, p := range writes {
		l := link{p: p, parent: parent, dupOf: -1}
		if p.heads == 0 || p.last != base {
			p.heads++
			p.last = base
		}
		switch {
		case p.ctx.Err() != nil:
		case p.key != "" && r.replayOf(p) != nil:
			l.replay = r.replayOf(p)
		case p.key != "" && keys[p.key] > 0:
			l.dupOf = keys[p.key] - 1
		default:
			if p.key != "" {
				keys[p.key] = i + 1
			}
			r.put(&l, root)
			if !l.commit.IsZero() {
				parent, root = l.commit, l.tree
			}
		}
		chain = append(chain, l)
	}
	return chain
}

// replayOf is the commit that recorded the write's idempotency key, if any.
func (r *Repo) replayOf(p *pending) *keyed {
	k, ok := r.keys.find(p.key, r.opts.Now().Add(-r.opts.IdempotencyWindow))
	if !ok {
		return nil
	}
	return &k
}

// put makes one write's commit on root (the tree of l.parent), or says why it makes none.
func (r *Repo) put(l *link, root plumbing.Hash) {
	p := l.p
	deps := make([]plumbing.Hash, len(p.ch.Reads))
	for i, path := range p.ch.Reads {
		deps[i] = entryHash(r.trees, root, path)
	}
	t := newTree(r.trees, root)
	same := p.root == root || p.ch.Reads != nil && !r.opts.CheckAgain && slices.Equal(deps, p.deps)
	carried := p.built && same && (p.err != nil || replay(t, p.edits) == nil)
	if carried && p.err != nil {
		l.err = p.err
		return
	}
	if !carried {
		t = newTree(r.trees, root)
		err := guard("apply", func() error { return p.ch.Apply(t) })
		if p.ctx.Err() != nil {
			l.err = p.ctx.Err()
			return
		}
		p.built, p.root, p.deps, p.edits, p.msg, p.err = true, root, deps, maps.Clone(t.changes), t.message, err
		if err != nil {
			l.err = err
			return
		}
	}
	l.changed = t.Changed()
	if len(t.changes) == 0 {
		l.unchanged = true
		return
	}
	tree, objs, err := t.write()
	if err != nil {
		l.err = fmt.Errorf("inputsrepo: %w", err)
		p.err = l.err
		return
	}
	if tree == root {
		l.unchanged = true
		return
	}
	if !carried && p.ch.Check != nil {
		err := guard("check", func() error { return p.ch.Check(p.ctx, t) })
		if p.ctx.Err() != nil {
			p.built = false
			l.err = p.ctx.Err()
			return
		}
		if err != nil {
			l.err = &CheckError{Err: err}
			p.err = l.err
			return
		}
	}
	key := p.key
	if key != "" && p.request != "" {
		key += " " + p.request
	}
	ch := p.ch
	ch.Message = cmp.Or(p.msg, ch.Message)
	commit, err := r.commit(ch, key, l.parent, tree)
	if err != nil {
		l.err = err
		return
	}
	l.commit, l.tree, l.objs, l.bases = commit, tree, objs, t.bases
}

// replay puts recorded edits on a tree, through the same checks a change's own calls meet.
func replay(t *Tree, edits map[string][]byte) error {
	for _, p := range slices.Sorted(maps.Keys(edits)) {
		if edits[p] == nil {
			if err := t.Remove(p); err != nil {
				return err
			}
			continue
		}
		if err := t.WriteFile(p, edits[p]); err != nil {
			return err
		}
	}
	return nil
}

// guard runs a caller's function and turns its panic into an error: the writer serves every
// write of the replica and must outlive a bad one.
func guard(what string, fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("inputsrepo: the change's %s panicked: %v", what, v)
		}
	}()
	return fn()
}
