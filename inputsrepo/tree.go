package inputsrepo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Tree is the inputs at one commit with a change applied on top, as a change function sees
// it: read it as an fs.FS (what the check gets too), change it with WriteFile, Remove and
// RemoveAll. Nothing touches a disk: the commit's objects are read from memory and the changes
// are kept beside them until the write turns them into a commit. Reads are safe for concurrent
// use (the generator reads files in parallel); changes are not, nor reads beside them.
type Tree struct {
	s storer.EncodedObjectStorer
	// lookups guards root: go-git's trees cache their lookups in a map of their own.
	lookups sync.Mutex
	root    *object.Tree // nil for a repository without a commit yet
	// changes: path -> new content, or nil for a deleted file.
	changes map[string][]byte
}

func newTree(s storer.EncodedObjectStorer, root *object.Tree) *Tree {
	return &Tree{s: s, root: root, changes: map[string][]byte{}}
}

// checkPath refuses what is not a clean relative path of a file in the repository.
func checkPath(p string) error {
	if p == "" || p == "." || !fs.ValidPath(p) {
		return fmt.Errorf("%q is not a clean relative path", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if strings.EqualFold(seg, ".git") {
			return fmt.Errorf("%q is inside .git", p)
		}
	}
	return nil
}

// WriteFile sets a file's content (creating the folders it is in).
func (t *Tree) WriteFile(name string, data []byte) error {
	if err := checkPath(name); err != nil {
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	if isDir, _ := t.isDir(name); isDir {
		return &fs.PathError{Op: "write", Path: name, Err: errors.New("is a folder")}
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if _, err := t.ReadFile(dir); err == nil {
			return &fs.PathError{Op: "write", Path: name, Err: fmt.Errorf("%s is a file", dir)}
		}
	}
	t.changes[name] = bytes.Clone(data)
	return nil
}

// Remove deletes a file; a file that does not exist is fs.ErrNotExist.
func (t *Tree) Remove(name string) error {
	if _, err := t.ReadFile(name); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	t.changes[name] = nil
	return nil
}

// RemoveAll deletes a folder and everything in it (nothing when it does not exist).
func (t *Tree) RemoveAll(dir string) error {
	if err := checkPath(dir); err != nil {
		return &fs.PathError{Op: "remove", Path: dir, Err: err}
	}
	return fs.WalkDir(t, dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		t.changes[p] = nil
		return nil
	})
}

// Changed lists the paths written or removed, sorted.
func (t *Tree) Changed() []string { return slices.Sorted(maps.Keys(t.changes)) }

// ReadFile reads a file as changed so far.
func (t *Tree) ReadFile(name string) ([]byte, error) {
	if data, ok := t.changes[name]; ok {
		if data == nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
		}
		return bytes.Clone(data), nil
	}
	f, err := t.baseFile(name)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	r, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// baseFile finds a regular file of the commit's tree.
func (t *Tree) baseFile(name string) (*object.File, error) {
	if t.root == nil || !fs.ValidPath(name) || name == "." {
		return nil, fs.ErrNotExist
	}
	t.lookups.Lock()
	defer t.lookups.Unlock()
	f, err := t.root.File(name)
	if err != nil {
		return nil, fs.ErrNotExist
	}
	return f, nil
}

// baseDir finds a folder of the commit's tree (the root for ".").
func (t *Tree) baseDir(name string) *object.Tree {
	if t.root == nil {
		return nil
	}
	if name == "." {
		return t.root
	}
	t.lookups.Lock()
	defer t.lookups.Unlock()
	sub, err := t.root.Tree(name)
	if err != nil {
		return nil
	}
	return sub
}

// ReadDir lists a folder as changed so far, sorted by name; a folder whose every file was
// removed no longer exists, as in git.
func (t *Tree) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." && !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	entries := map[string]fs.DirEntry{}
	if base := t.baseDir(name); base != nil {
		for _, e := range base.Entries {
			if e.Mode == filemode.Dir {
				entries[e.Name] = dirEntry{name: e.Name, dir: true}
			} else if e.Mode.IsFile() {
				entries[e.Name] = dirEntry{name: e.Name, t: t, path: path.Join(name, e.Name)}
			}
		}
	}
	prefix := name + "/"
	if name == "." {
		prefix = ""
	}
	touched := map[string]bool{} // children whose content the changes touch
	for p, data := range t.changes {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		child, _, isDeeper := strings.Cut(rest, "/")
		touched[child] = true
		if !isDeeper && data != nil {
			entries[child] = dirEntry{name: child, t: t, path: p}
		} else if isDeeper && data != nil {
			entries[child] = dirEntry{name: child, dir: true}
		}
	}
	// A touched child may have lost everything it held.
	for child := range touched {
		p := path.Join(name, child)
		if e, ok := entries[child]; ok && e.IsDir() {
			if isDir, _ := t.isDir(p); !isDir {
				delete(entries, child)
			}
		} else if ok {
			if _, err := t.ReadFile(p); err != nil {
				delete(entries, child)
			}
		}
	}
	if len(entries) == 0 {
		if isDir, _ := t.isDir(name); !isDir {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
		}
	}
	out := make([]fs.DirEntry, 0, len(entries))
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		out = append(out, entries[k])
	}
	return out, nil
}

// isDir says whether name is a folder holding at least one file, as changed so far.
func (t *Tree) isDir(name string) (bool, error) {
	if name == "." {
		return true, nil
	}
	prefix := name + "/"
	// A file written below it makes it a folder.
	for p, data := range t.changes {
		if data != nil && strings.HasPrefix(p, prefix) {
			return true, nil
		}
	}
	base := t.baseDir(name)
	if base == nil {
		return false, nil
	}
	// A folder of the commit is still one while a file in it was not removed.
	found := false
	err := base.Files().ForEach(func(f *object.File) error {
		if data, ok := t.changes[prefix+f.Name]; !ok || data != nil {
			found = true
			return storer.ErrStop
		}
		return nil
	})
	return found, err
}

// Open implements fs.FS.
func (t *Tree) Open(name string) (fs.File, error) {
	if name != "." && !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if data, err := t.ReadFile(name); err == nil {
		return &file{r: bytes.NewReader(data), info: fileInfo{name: path.Base(name), size: int64(len(data))}}, nil
	}
	entries, err := t.ReadDir(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &dir{info: fileInfo{name: path.Base(name), dir: true}, entries: entries}, nil
}

// Stat implements fs.StatFS.
func (t *Tree) Stat(name string) (fs.FileInfo, error) {
	f, err := t.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

type fileInfo struct {
	name string
	size int64
	dir  bool
}

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return i.size }
func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }

type dirEntry struct {
	name string
	dir  bool
	t    *Tree
	path string
}

func (e dirEntry) Name() string { return e.name }
func (e dirEntry) IsDir() bool  { return e.dir }
func (e dirEntry) Type() fs.FileMode {
	if e.dir {
		return fs.ModeDir
	}
	return 0
}

func (e dirEntry) Info() (fs.FileInfo, error) {
	if e.dir {
		return fileInfo{name: e.name, dir: true}, nil
	}
	data, err := e.t.ReadFile(e.path)
	if err != nil {
		return nil, err
	}
	return fileInfo{name: e.name, size: int64(len(data))}, nil
}

type file struct {
	r    *bytes.Reader
	info fileInfo
}

func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *file) Read(b []byte) (int, error) { return f.r.Read(b) }
func (f *file) Close() error               { return nil }

type dir struct {
	info    fileInfo
	entries []fs.DirEntry
	off     int
}

func (d *dir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errors.New("is a directory")}
}
func (d *dir) Close() error { return nil }

func (d *dir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.off += n
	return rest[:n], nil
}

// write stores the changed tree's objects and returns its hash: only the folders on a changed
// path are written again, the others keep their hashes, so a change costs the depth of what
// it touches, not the size of the repository. An empty result (every file removed) is an
// error: a commit of nothing is never what a change meant.
func (t *Tree) write() (plumbing.Hash, []plumbing.Hash, error) {
	t.lookups.Lock()
	defer t.lookups.Unlock()
	w := &treeWriter{s: t.s}
	h, empty, err := w.dir(t.root, "", t.changes)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	if empty {
		return plumbing.ZeroHash, nil, errors.New("the change removes every file of the repository")
	}
	return h, w.written, nil
}

type treeWriter struct {
	s       storer.EncodedObjectStorer
	written []plumbing.Hash // every object stored, for the push
}

// dir rebuilds one folder (base may be nil) with the changes under prefix.
func (w *treeWriter) dir(base *object.Tree, prefix string, changes map[string][]byte) (plumbing.Hash, bool, error) {
	entries := map[string]object.TreeEntry{}
	if base != nil {
		for _, e := range base.Entries {
			entries[e.Name] = e
		}
	}
	// Group the changes by the child of this folder they fall in.
	files := map[string][]byte{}
	deleted := map[string]bool{}
	sub := map[string]map[string][]byte{}
	for p, data := range changes {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		child, deeper, isDeeper := strings.Cut(rest, "/")
		if !isDeeper {
			if data == nil {
				deleted[child] = true
			} else {
				files[child] = data
			}
			continue
		}
		if sub[child] == nil {
			sub[child] = map[string][]byte{}
		}
		sub[child][prefix+child+"/"+deeper] = data
	}
	for name := range deleted {
		delete(entries, name)
	}
	for name, data := range files {
		h, err := w.blob(data)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		entries[name] = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h}
	}
	for name, ch := range sub {
		var childBase *object.Tree
		if e, ok := entries[name]; ok && e.Mode == filemode.Dir && base != nil {
			var err error
			if childBase, err = base.Tree(name); err != nil {
				return plumbing.ZeroHash, false, err
			}
		}
		h, empty, err := w.dir(childBase, prefix+name+"/", ch)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if empty {
			delete(entries, name)
		} else {
			entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}
		}
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, true, nil
	}
	h, err := w.tree(entries)
	return h, false, err
}

func (w *treeWriter) blob(data []byte) (plumbing.Hash, error) {
	obj := w.s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	wr, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := wr.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := wr.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return w.store(obj)
}

func (w *treeWriter) tree(entries map[string]object.TreeEntry) (plumbing.Hash, error) {
	list := slices.Collect(maps.Values(entries))
	// Git orders tree entries by name, a folder's name compared as if it ended in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	slices.SortFunc(list, func(a, b object.TreeEntry) int { return strings.Compare(key(a), key(b)) })
	obj := w.s.NewEncodedObject()
	if err := (&object.Tree{Entries: list}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return w.store(obj)
}

func (w *treeWriter) store(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	h, err := w.s.SetEncodedObject(obj)
	if err == nil {
		w.written = append(w.written, h)
	}
	return h, err
}

// Hash is the git hash of the file or folder at name in the commit the tree was read from
// ("" when absent): a key for what a reader derives from that part of the inputs (the API
// caches a tenant's parsed inputs by the hashes of the paths it reads). Changes made to this
// Tree are not reflected: a snapshot's Tree has none.
func (t *Tree) Hash(name string) string {
	if t.root == nil || !fs.ValidPath(name) {
		return ""
	}
	if name == "." {
		return t.root.Hash.String()
	}
	t.lookups.Lock()
	defer t.lookups.Unlock()
	e, err := t.root.FindEntry(name)
	if err != nil {
		return ""
	}
	return e.Hash.String()
}
