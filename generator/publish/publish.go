// Package publish commits a tenant's rendered files to its git repository with go-git. The
// repository's tree becomes exactly the rendered files: new and changed files are written,
// stale ones deleted. A commit is made only when the tree changes, with a fixed author and a
// timestamp from an injected clock, so the same inputs always give the same commit.
//
// With no remote URL, the output folder is itself the repository (initialised on first use).
// With a remote URL, the output folder is a clone: publish fetches the branch, commits on top
// of the remote's tip and pushes; if the push fails the local branch is put back, so nothing
// half-published is left behind.
package publish

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/inferplane/inferplane/internal/fileutil"
)

// Author is the author and committer of every commit the generator makes.
var Author = object.Signature{Name: "inferplane", Email: "inferplane@localhost"}

// DefaultBranch is the branch used when a target names none.
const DefaultBranch = "main"

const remoteName = "origin"

// Target is one tenant's repository.
type Target struct {
	// Name is the tenant, for commit messages and errors.
	Name string
	// Dir is the work tree (out/<tenant>).
	Dir string
	// URL is the remote to push to; empty means Dir is the repository.
	URL string
	// Branch defaults to DefaultBranch.
	Branch string
	// Auth is the push and fetch credential; nil for none (ssh URLs then use the ssh agent).
	Auth transport.AuthMethod
}

func (t Target) branch() plumbing.ReferenceName {
	return plumbing.NewBranchReferenceName(cmp.Or(t.Branch, DefaultBranch))
}

func (t Target) remoteBranch() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName(remoteName, cmp.Or(t.Branch, DefaultBranch))
}

// Options are the side inputs of a commit.
type Options struct {
	// Now is the commit time. Nil: time.Now.
	Now func() time.Time
	// Group names the part of the repository a path belongs to (e.g. "job qwen"), so that the
	// commit message lists changes per part. Nil: everything is one group.
	Group func(path string) string
	// Trailers are "Key: value" lines that end the commit message (e.g. the inputs commit a
	// render came from, which the product API's reconcile reads back).
	Trailers []string
	// Skip, when set, is asked about the message of the branch's current commit once it is
	// fetched: true publishes nothing (Result.Skipped). The product API skips a render whose
	// inputs are older than those the repository was rendered from already, so that a slow
	// replica never puts an older state back.
	Skip func(message string) bool
}

// Op is what happened to a file.
type Op string

const (
	Added    Op = "added"
	Modified Op = "modified"
	Deleted  Op = "deleted"
)

// Change is one file that differs between the repository and the rendered files.
type Change struct {
	Path string
	Op   Op
}

// Status is what a publish did to a repository.
type Status string

const (
	// Created: the branch had no commit before; the first one was made.
	Created Status = "created"
	// Updated: a commit was added.
	Updated Status = "updated"
	// Unchanged: the tree already matched; no commit was made.
	Unchanged Status = "unchanged"
)

// Result is the outcome of one publish.
type Result struct {
	Status Status
	// Commit is the new commit's hash; empty when unchanged.
	Commit string
	// Changes are sorted by path.
	Changes []Change
	// Pushed is true when the commit was pushed to the remote.
	Pushed bool
	// Skipped: Options.Skip said so; nothing was compared, committed or pushed.
	Skipped bool
}

// Publish makes the target's branch hold exactly files, committing and (with a URL) pushing
// only when something changed, and leaves the work tree and index matching the branch.
func Publish(ctx context.Context, t Target, files map[string][]byte, opts Options) (Result, error) {
	if err := checkPaths(files); err != nil {
		return Result{}, fmt.Errorf("tenant %s: %w", t.Name, err)
	}
	repo, err := openWorkRepo(ctx, t)
	if err != nil {
		return Result{}, err
	}
	base, err := baseCommit(repo, t)
	if err != nil {
		return Result{}, fmt.Errorf("tenant %s: %s: %w", t.Name, t.Dir, err)
	}
	if opts.Skip != nil && base != nil && opts.Skip(base.Message) {
		return Result{Status: Unchanged, Skipped: true}, nil
	}
	old, err := treeHashes(base)
	if err != nil {
		return Result{}, fmt.Errorf("tenant %s: read %s: %w", t.Name, t.Dir, err)
	}
	hashes := blobHashes(files) // once: the diff and the index both need them
	changes := diffHashes(old, hashes)

	res := Result{Status: Unchanged, Changes: changes}
	head := plumbing.ZeroHash
	if base != nil {
		head = base.Hash
	}
	if len(changes) > 0 {
		head, err = writeCommit(repo, base, files, opts.message(t.Name, base == nil, changes), opts.now())
		if err != nil {
			return Result{}, fmt.Errorf("tenant %s: commit: %w", t.Name, err)
		}
		res.Status, res.Commit = Updated, head.String()
		if base == nil {
			res.Status = Created
		}
	}

	// Move the branch; with a remote, push and undo the move if the push fails.
	prev, _ := repo.Reference(t.branch(), false)
	if err := setBranch(repo, t, head); err != nil {
		return Result{}, fmt.Errorf("tenant %s: %w", t.Name, err)
	}
	if t.URL != "" && len(changes) > 0 {
		pushed, err := push(ctx, repo, t)
		if err != nil {
			restoreBranch(repo, t, prev)
			return Result{}, err
		}
		res.Pushed = pushed
	}
	if err := syncWorkTree(repo, t.Dir, files, hashes, head); err != nil {
		return res, fmt.Errorf("tenant %s: committed %s but could not update the work tree %s: %w", t.Name, short(head), t.Dir, err)
	}
	return res, nil
}

// Current returns the files on the target's branch without writing anything (for dry runs):
// the local repository's branch, or, with a URL, the remote's branch read into memory. exists
// is false when the branch has no commit yet.
func Current(ctx context.Context, t Target) (files map[string][]byte, exists bool, err error) {
	var commit *object.Commit
	if t.URL == "" {
		repo, err := git.PlainOpen(t.Dir)
		if errors.Is(err, git.ErrRepositoryNotExists) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("tenant %s: open %s: %w", t.Name, t.Dir, err)
		}
		commit, err = branchCommit(repo, t.branch())
		if err != nil {
			return nil, false, fmt.Errorf("tenant %s: %s: %w", t.Name, t.Dir, err)
		}
	} else {
		repo, err := git.Init(memory.NewStorage(), nil)
		if err != nil {
			return nil, false, err
		}
		if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{t.URL}}); err != nil {
			return nil, false, err
		}
		if err := fetch(ctx, repo, t); err != nil {
			return nil, false, err
		}
		commit, err = branchCommit(repo, t.remoteBranch())
		if err != nil {
			return nil, false, fmt.Errorf("tenant %s: %s: %w", t.Name, Redact(t.URL), err)
		}
	}
	if commit == nil {
		return nil, false, nil
	}
	files, err = treeFiles(commit)
	if err != nil {
		return nil, false, fmt.Errorf("tenant %s: read branch: %w", t.Name, err)
	}
	return files, true, nil
}

// Diff lists the files that differ between a tree (path to blob hash) and rendered files,
// sorted by path.
func Diff(old map[string]plumbing.Hash, files map[string][]byte) []Change {
	return diffHashes(old, blobHashes(files))
}

// DiffFiles is Diff between two sets of file contents.
func DiffFiles(old, files map[string][]byte) []Change {
	return diffHashes(blobHashes(old), blobHashes(files))
}

// diffHashes lists what differs between two trees given as path to blob hash, sorted by path.
func diffHashes(old, cur map[string]plumbing.Hash) []Change {
	var out []Change
	for p, h := range cur {
		o, ok := old[p]
		switch {
		case !ok:
			out = append(out, Change{p, Added})
		case o != h:
			out = append(out, Change{p, Modified})
		}
	}
	for p := range old {
		if _, ok := cur[p]; !ok {
			out = append(out, Change{p, Deleted})
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// blobHashes is each file's git blob hash.
func blobHashes(files map[string][]byte) map[string]plumbing.Hash {
	out := make(map[string]plumbing.Hash, len(files))
	for p, data := range files {
		out[p] = blobHash(data)
	}
	return out
}

// now is the commit time: opts.Now's, or the clock's.
func (opts Options) now() time.Time {
	if opts.Now != nil {
		return opts.Now()
	}
	return time.Now()
}

// message is the commit message of changes to tenant (Message), with opts.Trailers.
func (opts Options) message(tenant string, first bool, changes []Change) string {
	msg := Message(tenant, first, changes, opts.Group)
	if len(opts.Trailers) > 0 {
		msg += "\n" + strings.Join(opts.Trailers, "\n") + "\n"
	}
	return msg
}

// Message is the commit message for a set of changes: a title, the counts, then every change
// grouped by part of the repository (the ungrouped ones first).
func Message(tenant string, first bool, changes []Change, group func(string) string) string {
	var b strings.Builder
	verb := "update"
	if first {
		verb = "create"
	}
	counts := map[Op]int{}
	for _, c := range changes {
		counts[c.Op]++
	}
	fmt.Fprintf(&b, "inferplane: %s tenant %s\n\n%d added, %d modified, %d deleted\n",
		verb, tenant, counts[Added], counts[Modified], counts[Deleted])
	groups := map[string][]Change{}
	for _, c := range changes {
		g := ""
		if group != nil {
			g = group(c.Path)
		}
		groups[g] = append(groups[g], c)
	}
	keys := slices.Sorted(maps.Keys(groups))
	for _, g := range keys {
		b.WriteString("\n")
		if g != "" {
			b.WriteString(g + ":\n")
		}
		for _, c := range groups[g] {
			fmt.Fprintf(&b, "  %-8s  %s\n", c.Op, c.Path)
		}
	}
	return b.String()
}

// Redact removes the user info from a URL for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(raw, "@") && strings.Contains(raw, "://") {
			return "(a URL that does not parse)"
		}
		return raw
	}
	u.User = nil
	return u.String()
}

func short(h plumbing.Hash) string { return h.String()[:12] }

// checkPaths refuses paths that would leave the work tree or touch .git.
func checkPaths(files map[string][]byte) error {
	if len(files) == 0 {
		return errors.New("no files to publish")
	}
	for p := range files {
		clean := path.Clean(p)
		if p == "" || clean != p || path.IsAbs(p) || strings.HasPrefix(p, "../") || p == ".." || p == "." {
			return fmt.Errorf("refusing file path %q: not a clean relative path", p)
		}
		for _, seg := range strings.Split(p, "/") {
			if strings.EqualFold(seg, ".git") {
				return fmt.Errorf("refusing file path %q: it is inside .git", p)
			}
		}
	}
	// A path may not be both a file and a folder.
	for p := range files {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := files[dir]; ok {
				return fmt.Errorf("refusing file path %q: %q is a file", p, dir)
			}
		}
	}
	return nil
}

func blobHash(data []byte) plumbing.Hash { return plumbing.ComputeHash(plumbing.BlobObject, data) }

// openWorkRepo opens or creates the repository at t.Dir and, with a URL, fetches the branch.
func openWorkRepo(ctx context.Context, t Target) (*git.Repository, error) {
	repo, err := git.PlainOpen(t.Dir)
	switch {
	case errors.Is(err, git.ErrRepositoryNotExists):
		entries, rerr := os.ReadDir(t.Dir)
		if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return nil, fmt.Errorf("tenant %s: %w", t.Name, rerr)
		}
		if len(entries) > 0 {
			return nil, fmt.Errorf("tenant %s: %s exists and is not a git repository; expected a folder inferplane created (move it away to start afresh)", t.Name, t.Dir)
		}
		repo, err = git.PlainInitWithOptions(t.Dir, &git.PlainInitOptions{
			InitOptions: git.InitOptions{DefaultBranch: t.branch()},
		})
		if err != nil {
			return nil, fmt.Errorf("tenant %s: init %s: %w", t.Name, t.Dir, err)
		}
	case err != nil:
		return nil, fmt.Errorf("tenant %s: open %s: %w", t.Name, t.Dir, err)
	}
	if t.URL == "" {
		return repo, nil
	}
	remote, err := repo.Remote(remoteName)
	switch {
	case errors.Is(err, git.ErrRemoteNotFound):
		if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{t.URL}}); err != nil {
			return nil, fmt.Errorf("tenant %s: add remote: %w", t.Name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("tenant %s: %w", t.Name, err)
	default:
		if urls := remote.Config().URLs; len(urls) != 1 || urls[0] != t.URL {
			return nil, fmt.Errorf("tenant %s: %s is a clone of %s, but the tenant's spec.git.url is %s; expected the same URL (move the folder away to clone afresh)",
				t.Name, t.Dir, Redact(strings.Join(urls, ", ")), Redact(t.URL))
		}
	}
	if err := fetch(ctx, repo, t); err != nil {
		return nil, err
	}
	return repo, nil
}

// fetch updates refs/remotes/origin/<branch>. An empty remote, or one without the branch yet,
// is not an error: the first push creates it.
func fetch(ctx context.Context, repo *git.Repository, t Target) error {
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", t.branch(), t.remoteBranch()))
	err := repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{spec},
		Auth:       t.Auth,
		Force:      true,
	})
	var noMatch git.NoMatchingRefSpecError
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate), errors.Is(err, transport.ErrEmptyRemoteRepository), errors.As(err, &noMatch):
		return nil
	}
	return fmt.Errorf("tenant %s: fetch %s from %s: %s", t.Name, cmp.Or(t.Branch, DefaultBranch), Redact(t.URL), redactErr(err, t.URL))
}

// redactErr keeps credentials a transport error might echo out of the message.
func redactErr(err error, rawURL string) string {
	msg := err.Error()
	if u, perr := url.Parse(rawURL); perr == nil && u.User != nil {
		msg = strings.ReplaceAll(msg, u.User.String()+"@", "")
	}
	return msg
}

// baseCommit is the commit the new state builds on: the remote's tip with a URL, else the
// local branch. Nil when there is none yet.
func baseCommit(repo *git.Repository, t Target) (*object.Commit, error) {
	if t.URL != "" {
		return branchCommit(repo, t.remoteBranch())
	}
	return branchCommit(repo, t.branch())
}

func branchCommit(repo *git.Repository, name plumbing.ReferenceName) (*object.Commit, error) {
	ref, err := repo.Reference(name, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("branch %s: %w", name.Short(), err)
	}
	return c, nil
}

// treeHashes maps every file of a commit's tree to its blob hash.
func treeHashes(c *object.Commit) (map[string]plumbing.Hash, error) {
	out := map[string]plumbing.Hash{}
	if c == nil {
		return out, nil
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	err = tree.Files().ForEach(func(f *object.File) error {
		out[f.Name] = f.Hash
		return nil
	})
	return out, err
}

func treeFiles(c *object.Commit) (map[string][]byte, error) {
	out := map[string][]byte{}
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	err = tree.Files().ForEach(func(f *object.File) error {
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		out[f.Name] = data
		return err
	})
	return out, err
}

// writeCommit stores the blobs, trees and commit of files on top of parent.
func writeCommit(repo *git.Repository, parent *object.Commit, files map[string][]byte, msg string, when time.Time) (plumbing.Hash, error) {
	treeHash, err := writeTree(repo, files)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sig := Author
	sig.When = when
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: treeHash}
	if parent != nil {
		c.ParentHashes = []plumbing.Hash{parent.Hash}
	}
	obj := repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return repo.Storer.SetEncodedObject(obj)
}

// dirNode is a folder of the tree being written.
type dirNode struct {
	files map[string]plumbing.Hash
	dirs  map[string]*dirNode
}

func writeTree(repo *git.Repository, files map[string][]byte) (plumbing.Hash, error) {
	root := &dirNode{files: map[string]plumbing.Hash{}, dirs: map[string]*dirNode{}}
	for p, data := range files {
		h, err := storeObject(repo, plumbing.BlobObject, data)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		segs := strings.Split(p, "/")
		n := root
		for _, s := range segs[:len(segs)-1] {
			child, ok := n.dirs[s]
			if !ok {
				child = &dirNode{files: map[string]plumbing.Hash{}, dirs: map[string]*dirNode{}}
				n.dirs[s] = child
			}
			n = child
		}
		n.files[segs[len(segs)-1]] = h
	}
	return storeDir(repo, root)
}

func storeDir(repo *git.Repository, n *dirNode) (plumbing.Hash, error) {
	var entries []object.TreeEntry
	for name, h := range n.files {
		entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	for name, child := range n.dirs {
		h, err := storeDir(repo, child)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
	}
	// Git orders tree entries by name, a folder's name compared as if it ended in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	slices.SortFunc(entries, func(a, b object.TreeEntry) int { return strings.Compare(key(a), key(b)) })
	tree := &object.Tree{Entries: entries}
	obj := &plumbing.MemoryObject{}
	if err := tree.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	if repo.Storer.HasEncodedObject(obj.Hash()) == nil {
		return obj.Hash(), nil
	}
	return repo.Storer.SetEncodedObject(obj)
}

// storeObject stores an object unless the repository has it already: a render writes every
// file of the tenant, and most of them are what the last commit holds (with a work tree on
// disk, each stored object would be a file written again).
func storeObject(repo *git.Repository, t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
	h := plumbing.ComputeHash(t, data)
	if repo.Storer.HasEncodedObject(h) == nil {
		return h, nil
	}
	return writeObject(repo.Storer, t, data)
}

// writeObject stores data as an object of type t, and returns its hash.
func writeObject(s storer.EncodedObjectStorer, t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(t)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// setBranch points the target's branch (and HEAD) at h; a zero h leaves an unborn branch.
func setBranch(repo *git.Repository, t Target, h plumbing.Hash) error {
	if cur, err := repo.Reference(t.branch(), false); err == nil && cur.Hash() == h {
		h = plumbing.ZeroHash // already there: do not rewrite the ref file
	}
	if head, err := repo.Reference(plumbing.HEAD, false); err == nil && head.Type() == plumbing.SymbolicReference && head.Target() == t.branch() && h.IsZero() {
		return nil
	}
	if !h.IsZero() {
		if err := repo.Storer.SetReference(plumbing.NewHashReference(t.branch(), h)); err != nil {
			return fmt.Errorf("update branch: %w", err)
		}
	}
	if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, t.branch())); err != nil {
		return fmt.Errorf("update HEAD: %w", err)
	}
	return nil
}

func restoreBranch(repo *git.Repository, t Target, prev *plumbing.Reference) {
	if prev != nil {
		_ = repo.Storer.SetReference(prev)
		return
	}
	_ = repo.Storer.RemoveReference(t.branch())
}

// push sends the branch to the remote; pushed is false when the remote had it already.
func push(ctx context.Context, repo *git.Repository, t Target) (bool, error) {
	spec := config.RefSpec(fmt.Sprintf("%s:%s", t.branch(), t.branch()))
	err := repo.PushContext(ctx, &git.PushOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{spec},
		Auth:       t.Auth,
	})
	switch {
	case err == nil:
		// Record what the remote now holds, as a fetch would.
		if ref, rerr := repo.Reference(t.branch(), true); rerr == nil {
			_ = repo.Storer.SetReference(plumbing.NewHashReference(t.remoteBranch(), ref.Hash()))
		}
		return true, nil
	case errors.Is(err, git.NoErrAlreadyUpToDate):
		return false, nil
	case errors.Is(err, git.ErrNonFastForwardUpdate) || strings.Contains(err.Error(), "non-fast-forward"):
		return false, fmt.Errorf("tenant %s: push to %s rejected: the branch moved on the remote since the fetch; nothing was committed, run generate again", t.Name, Redact(t.URL))
	}
	return false, fmt.Errorf("tenant %s: push to %s: %s; nothing was committed", t.Name, Redact(t.URL), redactErr(err, t.URL))
}

// syncWorkTree makes the work tree hold exactly files (nothing else but .git) and the index
// match the commit, touching only files whose bytes differ. hashes are the files' blob hashes.
func syncWorkTree(repo *git.Repository, dir string, files map[string][]byte, hashes map[string]plumbing.Hash, head plumbing.Hash) error {
	changed := false
	for _, p := range slices.Sorted(maps.Keys(files)) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if cur, err := os.ReadFile(full); err == nil && string(cur) == string(files[p]) {
			continue
		}
		if err := fileutil.WriteAtomic(full, files[p], 0o644); err != nil {
			return err
		}
		changed = true
	}
	removed, err := removeStrays(dir, files)
	if err != nil {
		return err
	}
	changed = changed || removed
	if head.IsZero() {
		return nil
	}
	return writeIndex(repo, dir, hashes, changed)
}

// removeStrays deletes files and empty folders the rendered set does not have.
func removeStrays(dir string, files map[string][]byte) (bool, error) {
	removed := false
	var dirs []string
	err := filepath.WalkDir(dir, func(full string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			dirs = append(dirs, full)
			return nil
		}
		if _, ok := files[rel]; !ok {
			removed = true
			return os.Remove(full)
		}
		return nil
	})
	if err != nil {
		return removed, err
	}
	// Deepest first, so a folder emptied by its children's removal goes too.
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, d := range dirs {
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			if err := os.Remove(d); err != nil {
				return removed, err
			}
			removed = true
		}
	}
	return removed, nil
}

// writeIndex makes the index list exactly files with their blob hashes and current stat data,
// so `git status` in the folder is clean. It is left alone when it already matches. hashes are
// the files' blob hashes.
func writeIndex(repo *git.Repository, dir string, hashes map[string]plumbing.Hash, force bool) error {
	names := slices.Sorted(maps.Keys(hashes))
	if !force {
		if idx, err := repo.Storer.Index(); err == nil && len(idx.Entries) == len(names) {
			same := true
			for i, e := range idx.Entries {
				if e.Name != names[i] || e.Hash != hashes[names[i]] {
					same = false
					break
				}
			}
			if same {
				return nil
			}
		}
	}
	idx := &index.Index{Version: 2}
	for _, p := range names {
		info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		idx.Entries = append(idx.Entries, &index.Entry{
			Name:       p,
			Hash:       hashes[p],
			Mode:       filemode.Regular,
			Size:       uint32(info.Size()),
			ModifiedAt: info.ModTime(),
			CreatedAt:  info.ModTime(),
		})
	}
	return repo.Storer.SetIndex(idx)
}
