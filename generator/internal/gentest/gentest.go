// Package gentest holds the test helpers the generator's packages share: in-memory copies of
// input trees, snapshots of output folders and checks of problem lists.
package gentest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/generator/problem"
)

// Copy reads a folder into memory, so that a test can change it without touching the repo.
func Copy(t testing.TB, dir string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	src := os.DirFS(dir)
	require.NoError(t, fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(src, p)
		out[p] = &fstest.MapFile{Data: data}
		return err
	}))
	return out
}

// Edit replaces the first old in file p of m with new; the test fails when p or old is missing.
func Edit(t testing.TB, m fstest.MapFS, p, old, new string) {
	t.Helper()
	f, ok := m[p]
	require.True(t, ok, "no file %s", p)
	require.Contains(t, string(f.Data), old, "file %s", p)
	m[p] = File(strings.Replace(string(f.Data), old, new, 1))
}

// File is an in-memory file holding s.
func File(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// Snapshot reads every file under dir, .git included, with its bytes and modification time,
// so that two snapshots are equal only if nothing was written in between. Nil when dir does
// not exist.
func Snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = info.ModTime().String() + "\x00" + string(data)
		return nil
	}))
	return out
}

// WorkTree reads the files of a repository's work tree (without .git) by slash path.
func WorkTree(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = data
		return err
	}))
	return out
}

// Want is one expected problem: {file (a suffix), field, two fragments of what it says (what
// is wrong, what was expected)}. An array rather than a struct so that tests can write the
// four strings unkeyed.
type Want [4]string

// AssertProblems checks that err holds exactly the wanted problems, in order, and that each
// one's printed form names the file and the field, and says both fragments.
func AssertProblems(t testing.TB, err error, wants []Want) {
	t.Helper()
	got := problem.Problems(err)
	require.Len(t, got, len(wants), "problems: %v", err)
	for i, w := range wants {
		p := got[i]
		file, field, msg, expected := w[0], w[1], w[2], w[3]
		assert.True(t, strings.HasSuffix(p.File, file), "problem %d: file %q, want %q", i, p.File, file)
		assert.Equal(t, field, p.Err.Field, "problem %d: %v", i, p)
		line := p.Error()
		assert.Contains(t, line, msg, "problem %d", i)
		assert.Contains(t, line, expected, "problem %d", i)
		assert.True(t, strings.HasPrefix(line, p.File+": ") || strings.HasPrefix(line, p.File+":"), line)
		if field != "" {
			assert.Contains(t, line, ": "+field)
		}
	}
}

// Commits counts the commits reachable from HEAD of the repository in dir.
func Commits(t testing.TB, dir string) int {
	t.Helper()
	repo, err := git.PlainOpen(dir)
	require.NoError(t, err)
	head, err := repo.Head()
	require.NoError(t, err)
	it, err := repo.Log(&git.LogOptions{From: head.Hash()})
	require.NoError(t, err)
	n := 0
	require.NoError(t, it.ForEach(func(*object.Commit) error { n++; return nil }))
	return n
}

// BareRepo makes an empty bare repository to push to and returns its folder.
func BareRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "remote.git")
	_, err := git.PlainInit(dir, true)
	require.NoError(t, err)
	return dir
}

// BranchFiles reads the files of branch's last commit in the repository at dir.
func BranchFiles(t testing.TB, dir, branch string) (map[string][]byte, *object.Commit) {
	t.Helper()
	repo, err := git.PlainOpen(dir)
	require.NoError(t, err)
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	require.NoError(t, err)
	c, err := repo.CommitObject(ref.Hash())
	require.NoError(t, err)
	tr, err := c.Tree()
	require.NoError(t, err)
	out := map[string][]byte{}
	require.NoError(t, tr.Files().ForEach(func(f *object.File) error {
		s, err := f.Contents()
		out[f.Name] = []byte(s)
		return err
	}))
	return out, c
}
