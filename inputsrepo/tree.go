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
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Tree is the inputs at one commit with a change applied on top, as a change function sees
// it: read it as an fs.FS (what the check gets too), change it with WriteFile, Remove and
// RemoveAll. Nothing touches a disk: the commit's objects are read from memory and the changes
// are kept beside them until the write turns them into a commit. Reads are safe for concurrent
// use (the generator reads files in parallel); changes are not, nor reads beside them.
type Tree struct {
	c    *trees
	root plumbing.Hash // zero for a repository without a commit yet
	// changes: path -> new content, or nil for a deleted file.
	changes map[string][]byte
	// bases maps each large tree the write made to the tree it replaced, for the push
	// (a delta against the remote's copy instead of the whole tree).
	bases map[plumbing.Hash]plumbing.Hash
	// message, when Describe set it, replaces the change's Message.
	message string
}

// Describe sets the commit message of the change being applied, for a change whose words
// depend on what it found there (e.g. the value it replaced): it replaces Change.Message.
// Said on the tree the change is applied to, it stays true when the change is applied again
// on a newer head, and a change carried over keeps it (its Reads did not change).
func (t *Tree) Describe(message string) { t.message = message }

func newTree(c *trees, root plumbing.Hash) *Tree {
	return &Tree{c: c, root: root, changes: map[string][]byte{}}
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
	if !fs.ValidPath(name) || name == "." {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	e, ok := t.c.entry(t.root, name)
	if !ok || !e.Mode.IsFile() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	obj, err := t.c.s.EncodedObject(plumbing.BlobObject, e.Hash)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	r, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// baseDir finds a folder of the commit's tree (the root for ".").
func (t *Tree) baseDir(name string) *dtree { return t.c.dir(t.root, name) }

// ReadDir lists a folder as changed so far, sorted by name; a folder whose every file was
// removed no longer exists, as in git.
func (t *Tree) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." && !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	entries := map[string]fs.DirEntry{}
	if base := t.baseDir(name); base != nil {
		for _, e := range base.entries {
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
	return t.c.hasFile(base.hash, prefix, func(p string) bool {
		data, ok := t.changes[p]
		return !ok || data != nil
	}), nil
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
	w := &treeWriter{c: t.c, bases: map[plumbing.Hash]plumbing.Hash{}}
	h, empty, err := w.dir(t.c.dir(t.root, "."), "", t.changes)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	if empty {
		return plumbing.ZeroHash, nil, errors.New("the change removes every file of the repository")
	}
	t.bases = w.bases
	return h, w.written, nil
}

type treeWriter struct {
	c       *trees
	written []plumbing.Hash // every object stored, for the push
	bases   map[plumbing.Hash]plumbing.Hash
}

// deltaMin is the size from which a tree a write makes is pushed as a delta against the one it
// replaces (the remote has it): the tenants/ folder of a large fleet, where the whole tree
// would cost its 38 bytes per tenant on every write.
const deltaMin = 4 << 10

// dir rebuilds one folder (base may be nil) with the changes under prefix. The base's entries
// are in git's order already: the few that change are replaced, removed or inserted in place,
// so a folder of 20,000 entries is copied once, never sorted.
func (w *treeWriter) dir(base *dtree, prefix string, changes map[string][]byte) (plumbing.Hash, bool, error) {
	// Group the changes by the child of this folder they fall in.
	files := map[string][]byte{} // nil: removed
	sub := map[string]map[string][]byte{}
	for p, data := range changes {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		child, _, isDeeper := strings.Cut(rest, "/")
		if !isDeeper {
			files[child] = data
			continue
		}
		if sub[child] == nil {
			sub[child] = map[string][]byte{}
		}
		sub[child][p] = data
	}
	var entries []object.TreeEntry
	if base != nil {
		entries = slices.Clone(base.entries)
	}
	set := func(e object.TreeEntry, remove bool) {
		i := findEntry(entries, e.Name)
		if i >= 0 && (remove || compareEntry(entries[i], e) != 0) {
			entries = slices.Delete(entries, i, i+1)
			i = -1
		}
		if remove {
			return
		}
		if i >= 0 {
			entries[i] = e
			return
		}
		j, _ := slices.BinarySearchFunc(entries, e, compareEntry)
		entries = slices.Insert(entries, j, e)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data := files[name]
		if data == nil {
			set(object.TreeEntry{Name: name}, true)
			continue
		}
		h, err := w.blob(data)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		set(object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h}, false)
	}
	for _, name := range slices.Sorted(maps.Keys(sub)) {
		var childBase *dtree
		if base != nil {
			if i := base.find(name); i >= 0 && base.entries[i].Mode == filemode.Dir {
				var err error
				if childBase, err = w.c.get(base.entries[i].Hash); err != nil {
					return plumbing.ZeroHash, false, err
				}
			}
		}
		h, empty, err := w.dir(childBase, prefix+name+"/", sub[name])
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		set(object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}, empty)
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, true, nil
	}
	if base != nil && slices.Equal(entries, base.entries) {
		return base.hash, false, nil
	}
	h, err := w.c.store(entries)
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	w.written = append(w.written, h)
	if base != nil && len(entries)*28 >= deltaMin {
		w.bases[h] = base.hash
	}
	return h, false, nil
}

func (w *treeWriter) blob(data []byte) (plumbing.Hash, error) {
	obj := w.c.s.NewEncodedObject()
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
	h, err := w.c.s.SetEncodedObject(obj)
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
	if t.root.IsZero() || !fs.ValidPath(name) {
		return ""
	}
	if name == "." {
		return t.root.String()
	}
	e, ok := t.c.entry(t.root, name)
	if !ok {
		return ""
	}
	return e.Hash.String()
}
