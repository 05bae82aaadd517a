package inputsrepo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// trees decodes each tree object once. A tree never changes, so one decoded copy serves every
// snapshot and write that reads it, and a tree a write makes is entered as it was built, never
// decoded: with 20,000 tenants the tenants/ folder is one tree of 20,000 entries (760 KB), which
// go-git would decode again for every snapshot and look up entry by entry in a map it builds.
// Here a lookup is a binary search over the entries in git's order.
type trees struct {
	s storer.EncodedObjectStorer

	mu      sync.Mutex
	m       map[plumbing.Hash]*dtree
	order   []plumbing.Hash // oldest first, for eviction
	entries int             // held in total
}

// maxCachedEntries bounds the decoded trees kept (about 50 MB): the newest versions of the
// inputs' folders stay, older ones are decoded again when read.
const maxCachedEntries = 1 << 19

// dtree is a decoded tree: its entries in git's order (by name, a folder's name compared as if
// it ended in "/").
type dtree struct {
	hash    plumbing.Hash
	entries []object.TreeEntry
}

func newTrees(s storer.EncodedObjectStorer) *trees {
	return &trees{s: s, m: map[plumbing.Hash]*dtree{}}
}

// get returns the decoded tree of hash.
func (c *trees) get(h plumbing.Hash) (*dtree, error) {
	c.mu.Lock()
	d, ok := c.m[h]
	c.mu.Unlock()
	if ok {
		return d, nil
	}
	obj, err := c.s.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	entries, err := decodeTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	d = &dtree{hash: h, entries: entries}
	c.add(d)
	return d, nil
}

func (c *trees) add(d *dtree) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[d.hash]; ok {
		return
	}
	c.m[d.hash] = d
	c.order = append(c.order, d.hash)
	c.entries += len(d.entries)
	for c.entries > maxCachedEntries && len(c.order) > 1 {
		old := c.order[0]
		c.order = c.order[1:]
		c.entries -= len(c.m[old].entries)
		delete(c.m, old)
	}
}

// decodeTree parses a tree object's content: entries of "<octal mode> <name>\0<20-byte hash>".
func decodeTree(data []byte) ([]object.TreeEntry, error) {
	var out []object.TreeEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp < 0 {
			return nil, errors.New("malformed tree: no mode")
		}
		mode, err := strconv.ParseUint(string(data[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("malformed tree: mode %q", data[:sp])
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 0 || len(data) < nul+1+20 {
			return nil, errors.New("malformed tree: truncated entry")
		}
		var h plumbing.Hash
		copy(h[:], data[nul+1:nul+21])
		out = append(out, object.TreeEntry{Name: string(data[:nul]), Mode: filemode.FileMode(mode), Hash: h})
		data = data[nul+21:]
	}
	return out, nil
}

// encodeTree is a tree object's content for entries in git's order.
func encodeTree(entries []object.TreeEntry) []byte {
	n := 0
	for _, e := range entries {
		n += 7 + 1 + len(e.Name) + 1 + 20
	}
	buf := make([]byte, 0, n)
	for _, e := range entries {
		buf = strconv.AppendUint(buf, uint64(e.Mode), 8)
		buf = append(buf, ' ')
		buf = append(buf, e.Name...)
		buf = append(buf, 0)
		buf = append(buf, e.Hash[:]...)
	}
	return buf
}

// compareEntry orders a tree's entries as git does: by name, a folder's name compared as if it
// ended in "/".
func compareEntry(a, b object.TreeEntry) int {
	return compareNames(a.Name, a.Mode == filemode.Dir, b.Name, b.Mode == filemode.Dir)
}

func compareNames(a string, aDir bool, b string, bDir bool) int {
	la, lb := len(a), len(b)
	if aDir {
		la++
	}
	if bDir {
		lb++
	}
	for i := 0; i < la && i < lb; i++ {
		if ca, cb := keyByte(a, aDir, i), keyByte(b, bDir, i); ca != cb {
			return int(ca) - int(cb)
		}
	}
	return la - lb
}

// keyByte is byte i of a name's sort key (the name, and "/" after a folder's).
func keyByte(s string, dir bool, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return '/'
}

// find returns the index of the entry named name, or -1.
func (d *dtree) find(name string) int { return findEntry(d.entries, name) }

// findEntry returns the index of the entry named name among entries in git's order, or -1: a
// file of that name or a folder of that name sort apart, so both places are looked at.
func findEntry(entries []object.TreeEntry, name string) int {
	for _, dir := range []bool{false, true} {
		i, ok := slices.BinarySearchFunc(entries, name, func(e object.TreeEntry, n string) int {
			return compareNames(e.Name, e.Mode == filemode.Dir, n, dir)
		})
		if ok {
			return i
		}
	}
	return -1
}

// entry returns the entry at a slash-separated path below the tree at root.
func (c *trees) entry(root plumbing.Hash, p string) (object.TreeEntry, bool) {
	if root.IsZero() {
		return object.TreeEntry{}, false
	}
	cur := root
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		d, err := c.get(cur)
		if err != nil {
			return object.TreeEntry{}, false
		}
		j := d.find(seg)
		if j < 0 {
			return object.TreeEntry{}, false
		}
		e := d.entries[j]
		if i == len(segs)-1 {
			return e, true
		}
		if e.Mode != filemode.Dir {
			return object.TreeEntry{}, false
		}
		cur = e.Hash
	}
	return object.TreeEntry{}, false
}

// dir returns the decoded tree at path p below root ("." for root itself), or nil.
func (c *trees) dir(root plumbing.Hash, p string) *dtree {
	if root.IsZero() {
		return nil
	}
	h := root
	if p != "." {
		e, ok := c.entry(root, p)
		if !ok || e.Mode != filemode.Dir {
			return nil
		}
		h = e.Hash
	}
	d, err := c.get(h)
	if err != nil {
		return nil
	}
	return d
}

// hasFile says whether the tree at h holds at least one file (at any depth) for which keep
// says yes.
func (c *trees) hasFile(h plumbing.Hash, prefix string, keep func(path string) bool) bool {
	d, err := c.get(h)
	if err != nil {
		return false
	}
	for _, e := range d.entries {
		p := prefix + e.Name
		switch {
		case e.Mode == filemode.Dir:
			if c.hasFile(e.Hash, p+"/", keep) {
				return true
			}
		case e.Mode.IsFile() && keep(p):
			return true
		}
	}
	return false
}

// store writes a tree of entries (in git's order), enters it decoded, and returns its hash.
func (c *trees) store(entries []object.TreeEntry) (plumbing.Hash, error) {
	obj := c.s.NewEncodedObject()
	obj.SetType(plumbing.TreeObject)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(encodeTree(entries)); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	h, err := c.s.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	c.add(&dtree{hash: h, entries: entries})
	return h, nil
}
