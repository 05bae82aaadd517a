package publish

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/inferplane/inferplane/internal/gitpush"
)

// ErrMoved is a remote publish refused because another writer pushed to the branch after it
// was read: nothing was published; publishing again reads the new head.
var ErrMoved = errors.New("the branch moved on the remote since it was read")

// Remote publishes to targets' remotes with no work tree, for a writer that renders and
// publishes again and again (the product API): each push sends only the objects the branch's
// head does not hold, and the head's files are remembered, so a publish after this publisher's
// own is one advertisement and one push; a head moved by another writer is fetched (that
// commit alone). The commits are the ones Publish makes. Safe for concurrent use on different
// targets.
type Remote struct {
	mu    sync.Mutex
	heads map[string]*seenHead
}

// seenHead is what a remote branch held when this publisher last read or pushed it.
type seenHead struct {
	commit  plumbing.Hash
	message string
	files   map[string]plumbing.Hash // path -> blob
	objects map[plumbing.Hash]bool   // every tree and blob of its tree
}

// maxRemembered bounds the heads kept (a few thousand tenants' file lists); past it the oldest
// is fetched again when next published.
const maxRemembered = 4096

// Publish makes the target's remote branch hold exactly files (t.URL must be set), committing
// and pushing only when something changed. A push refused because the branch moved meanwhile
// is ErrMoved.
func (p *Remote) Publish(ctx context.Context, t Target, files map[string][]byte, opts Options) (Result, error) {
	if t.URL == "" {
		return Result{}, fmt.Errorf("tenant %s: no remote URL to publish to", t.Name)
	}
	if err := checkPaths(files); err != nil {
		return Result{}, fmt.Errorf("tenant %s: %w", t.Name, err)
	}
	sess, err := gitpush.Open(ctx, t.URL, t.Auth)
	if err != nil {
		return Result{}, fmt.Errorf("tenant %s: push to %s: %s", t.Name, Redact(t.URL), redactErr(err, t.URL))
	}
	defer sess.Close()
	head, err := p.head(ctx, t, sess.Ref(t.branch()))
	if err != nil {
		return Result{}, err
	}
	if opts.Skip != nil && head != nil && opts.Skip(head.message) {
		return Result{Status: Unchanged, Skipped: true}, nil
	}
	old := map[string]plumbing.Hash{}
	if head != nil {
		old = head.files
	}
	hashes := blobHashes(files)
	changes := diffHashes(old, hashes)
	if len(changes) == 0 {
		return Result{Status: Unchanged, Changes: changes}, nil
	}
	msg := opts.message(t.Name, head == nil, changes)
	store := memory.NewStorage()
	parent, have := plumbing.ZeroHash, map[plumbing.Hash]bool{}
	if head != nil {
		parent, have = head.commit, head.objects
	}
	commit, objs, all, err := buildCommit(store, files, hashes, have, parent, msg, opts.now())
	if err != nil {
		return Result{}, fmt.Errorf("tenant %s: commit: %w", t.Name, err)
	}
	err = sess.Push(ctx, t.branch(), parent, commit, store, objs, nil)
	switch {
	case errors.Is(err, gitpush.ErrMoved):
		return Result{}, fmt.Errorf("tenant %s: push to %s: %w", t.Name, Redact(t.URL), ErrMoved)
	case err != nil:
		p.forget(t)
		return Result{}, fmt.Errorf("tenant %s: push to %s: %s; nothing was committed", t.Name, Redact(t.URL), redactErr(err, t.URL))
	}
	p.remember(t, &seenHead{commit: commit, message: msg, files: hashes, objects: all})
	res := Result{Status: Updated, Commit: commit.String(), Changes: changes, Pushed: true}
	if head == nil {
		res.Status = Created
	}
	return res, nil
}

func targetKey(t Target) string { return t.URL + "#" + cmp.Or(t.Branch, DefaultBranch) }

func (p *Remote) remember(t Target, h *seenHead) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heads == nil {
		p.heads = map[string]*seenHead{}
	}
	if len(p.heads) >= maxRemembered {
		for k := range p.heads { // any one: it is fetched again when next published
			delete(p.heads, k)
			break
		}
	}
	p.heads[targetKey(t)] = h
}

func (p *Remote) forget(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.heads, targetKey(t))
}

// head is what the branch holds at cur (nil for none): remembered, or that commit fetched.
func (p *Remote) head(ctx context.Context, t Target, cur plumbing.Hash) (*seenHead, error) {
	if cur.IsZero() {
		return nil, nil
	}
	p.mu.Lock()
	h := p.heads[targetKey(t)]
	p.mu.Unlock()
	if h != nil && h.commit == cur {
		return h, nil
	}
	repo, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		return nil, err
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{t.URL}}); err != nil {
		return nil, err
	}
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", t.branch(), t.remoteBranch()))
	err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: remoteName, RefSpecs: []config.RefSpec{spec}, Depth: 1, Auth: t.Auth, Force: true})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil, fmt.Errorf("tenant %s: fetch %s from %s: %s", t.Name, cmp.Or(t.Branch, DefaultBranch), Redact(t.URL), redactErr(err, t.URL))
	}
	c, err := branchCommit(repo, t.remoteBranch())
	if err != nil || c == nil {
		return nil, fmt.Errorf("tenant %s: %s: the branch's head %s was not fetched: %v", t.Name, Redact(t.URL), cur, err)
	}
	h = &seenHead{commit: c.Hash, message: c.Message, files: map[string]plumbing.Hash{}, objects: map[plumbing.Hash]bool{}}
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	h.objects[tree.Hash] = true
	walker := object.NewTreeWalker(tree, true, nil)
	defer walker.Close()
	for {
		name, e, err := walker.Next()
		if err != nil {
			break
		}
		h.objects[e.Hash] = true
		if e.Mode.IsFile() {
			h.files[name] = e.Hash
		}
	}
	p.remember(t, h)
	return h, nil
}

// buildCommit stores the commit of files on parent in store, writing only the blobs and trees
// the remote does not have (have); it returns the commit, the objects to send and every tree
// and blob of the new tree.
func buildCommit(store storer.EncodedObjectStorer, files map[string][]byte, hashes map[string]plumbing.Hash, have map[plumbing.Hash]bool,
	parent plumbing.Hash, msg string, when time.Time) (plumbing.Hash, []plumbing.Hash, map[plumbing.Hash]bool, error) {
	all := map[plumbing.Hash]bool{}
	var send []plumbing.Hash
	put := func(t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
		h, err := writeObject(store, t, data)
		if err == nil && !have[h] && !all[h] {
			send = append(send, h)
		}
		all[h] = true
		return h, err
	}
	// Folders, deepest first, each a tree of its files and of the folders below it.
	dirs := map[string][]object.TreeEntry{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if have[hashes[p]] {
			all[hashes[p]] = true
		} else if _, err := put(plumbing.BlobObject, files[p]); err != nil {
			return plumbing.ZeroHash, nil, nil, err
		}
		dir := path.Dir(p)
		dirs[dir] = append(dirs[dir], object.TreeEntry{Name: path.Base(p), Mode: filemode.Regular, Hash: hashes[p]})
		for d := dir; d != "."; d = path.Dir(d) {
			if _, ok := dirs[path.Dir(d)]; !ok {
				dirs[path.Dir(d)] = nil
			}
		}
	}
	order := slices.Collect(maps.Keys(dirs))
	slices.SortFunc(order, func(a, b string) int { return cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/")) })
	for _, d := range order {
		if d == "." {
			continue
		}
		h, err := storeTree(put, dirs[d])
		if err != nil {
			return plumbing.ZeroHash, nil, nil, err
		}
		dirs[path.Dir(d)] = append(dirs[path.Dir(d)], object.TreeEntry{Name: path.Base(d), Mode: filemode.Dir, Hash: h})
	}
	root, err := storeTree(put, dirs["."])
	if err != nil {
		return plumbing.ZeroHash, nil, nil, err
	}
	sig := Author
	sig.When = when
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: root}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	obj := store.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, nil, nil, err
	}
	commit, err := store.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, nil, nil, err
	}
	return commit, append(send, commit), all, nil
}

// storeTree stores a folder's entries in git's order through put.
func storeTree(put func(plumbing.ObjectType, []byte) (plumbing.Hash, error), entries []object.TreeEntry) (plumbing.Hash, error) {
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	slices.SortFunc(entries, func(a, b object.TreeEntry) int { return strings.Compare(key(a), key(b)) })
	obj := &plumbing.MemoryObject{}
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	data, err := readAllObj(obj)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return put(plumbing.TreeObject, data)
}

func readAllObj(obj plumbing.EncodedObject) ([]byte, error) {
	r, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
