package publish

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/generator/internal/gentest"
)

var clock = func() time.Time { return time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC) }

func group(p string) string {
	if rest, ok := strings.CutPrefix(p, "jobs/"); ok {
		job, _, _ := strings.Cut(rest, "/")
		return "job " + job
	}
	return ""
}

func opts() Options { return Options{Now: clock, Group: group} }

func rendered() map[string][]byte {
	return map[string][]byte{
		"vcluster.yaml":                 []byte("privateNodes:\n  enabled: true\n"),
		"platform/project.yaml":         []byte("kind: Project\n"),
		"jobs/qwen/kustomization.yaml":  []byte("resources: [vm.yaml]\n"),
		"jobs/qwen/vm.yaml":             []byte("kind: VirtualMachine\n"),
		"jobs/llama/kustomization.yaml": []byte("resources: [vm.yaml]\n"),
		"jobs/llama/vm.yaml":            []byte("kind: VirtualMachine\n"),
	}
}

func headCommit(t *testing.T, dir string) *object.Commit {
	t.Helper()
	repo, err := git.PlainOpen(dir)
	require.NoError(t, err)
	ref, err := repo.Head()
	require.NoError(t, err)
	c, err := repo.CommitObject(ref.Hash())
	require.NoError(t, err)
	return c
}

func commitFiles(t *testing.T, c *object.Commit) map[string][]byte {
	t.Helper()
	files, err := treeFiles(c)
	require.NoError(t, err)
	return files
}

// gitStatusClean asks the real git CLI, when installed, whether the work tree matches HEAD.
func gitStatusClean(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Log("git CLI not installed: work tree checked through go-git only")
		return
	}
	out, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=all").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Empty(t, string(out), "git status in %s", dir)
}

func TestPublishLocalRepo(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "out", "acme")
	target := Target{Name: "acme", Dir: dir}

	// First run: the folder becomes a repository with one commit holding exactly the files.
	res, err := Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, Created, res.Status)
	assert.Len(t, res.Changes, 6)
	assert.False(t, res.Pushed)
	c := headCommit(t, dir)
	assert.Equal(t, res.Commit, c.Hash.String())
	assert.Equal(t, "inferplane", c.Author.Name)
	assert.Equal(t, "inferplane@localhost", c.Author.Email)
	assert.Equal(t, c.Author, c.Committer)
	assert.True(t, clock().Equal(c.Author.When))
	assert.Equal(t, rendered(), commitFiles(t, c))
	assert.Equal(t, rendered(), gentest.WorkTree(t, dir))
	assert.True(t, strings.HasPrefix(c.Message, "inferplane: create tenant acme\n\n6 added, 0 modified, 0 deleted\n"), c.Message)
	gitStatusClean(t, dir)

	// Second run on the same files: no commit, and not a byte (or timestamp) changes.
	before := gentest.Snapshot(t, dir)
	res, err = Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, Result{Status: Unchanged}, res)
	assert.Equal(t, before, gentest.Snapshot(t, dir))
	assert.Equal(t, 1, gentest.Commits(t, dir))

	// A change: one file modified, one job gone, one file added. Stale files and the emptied
	// folder are removed, and the message lists the changes per job.
	next := rendered()
	next["jobs/qwen/vm.yaml"] = []byte("kind: VirtualMachine\nspec: {}\n")
	delete(next, "jobs/llama/kustomization.yaml")
	delete(next, "jobs/llama/vm.yaml")
	next["jobs/qwen/service.yaml"] = []byte("kind: Service\n")
	res, err = Publish(ctx, target, next, opts())
	require.NoError(t, err)
	assert.Equal(t, Updated, res.Status)
	assert.Equal(t, []Change{
		{"jobs/llama/kustomization.yaml", Deleted},
		{"jobs/llama/vm.yaml", Deleted},
		{"jobs/qwen/service.yaml", Added},
		{"jobs/qwen/vm.yaml", Modified},
	}, res.Changes)
	c2 := headCommit(t, dir)
	assert.Equal(t, []plumbing.Hash{c.Hash}, c2.ParentHashes)
	assert.Equal(t, next, commitFiles(t, c2))
	assert.Equal(t, next, gentest.WorkTree(t, dir))
	assert.NoDirExists(t, filepath.Join(dir, "jobs", "llama"))
	assert.Equal(t, `inferplane: update tenant acme

1 added, 1 modified, 2 deleted

job llama:
  deleted   jobs/llama/kustomization.yaml
  deleted   jobs/llama/vm.yaml

job qwen:
  added     jobs/qwen/service.yaml
  modified  jobs/qwen/vm.yaml
`, c2.Message)
	gitStatusClean(t, dir)
}

func TestPublishRestoresHandEditsWithoutCommit(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "acme")
	target := Target{Name: "acme", Dir: dir}
	_, err := Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "vcluster.yaml"), []byte("edited by hand\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stray.yaml"), []byte("left behind\n"), 0o644))
	require.NoError(t, os.Remove(filepath.Join(dir, "jobs/qwen/vm.yaml")))

	res, err := Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, Unchanged, res.Status, "the branch already holds these files")
	assert.Equal(t, rendered(), gentest.WorkTree(t, dir))
	assert.Equal(t, 1, gentest.Commits(t, dir))
	gitStatusClean(t, dir)
}

func TestPublishIsDeterministic(t *testing.T) {
	ctx := context.Background()
	a, err := Publish(ctx, Target{Name: "acme", Dir: filepath.Join(t.TempDir(), "a")}, rendered(), opts())
	require.NoError(t, err)
	b, err := Publish(ctx, Target{Name: "acme", Dir: filepath.Join(t.TempDir(), "b")}, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, a.Commit, b.Commit, "same files, same clock: same commit")
}

func TestPublishRefusesAForeignFolder(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
	_, err := Publish(context.Background(), Target{Name: "acme", Dir: dir}, rendered(), opts())
	require.ErrorContains(t, err, "exists and is not a git repository")
	entries, _ := os.ReadDir(dir)
	assert.Len(t, entries, 1, "nothing written")
}

func TestPublishRefusesBadPaths(t *testing.T) {
	for _, p := range []string{"../escape.yaml", "/abs.yaml", ".git/config", "a//b.yaml", "jobs/x/.GIT/hooks", ""} {
		dir := filepath.Join(t.TempDir(), "acme")
		files := rendered()
		files[p] = []byte("x")
		_, err := Publish(context.Background(), Target{Name: "acme", Dir: dir}, files, opts())
		assert.Error(t, err, "%q", p)
		assert.NoDirExists(t, dir, "nothing written for %q", p)
	}
	files := rendered()
	files["jobs"] = []byte("a file where a folder is")
	_, err := Publish(context.Background(), Target{Name: "acme", Dir: t.TempDir() + "/x"}, files, opts())
	assert.ErrorContains(t, err, `"jobs" is a file`)
}

// bare creates a bare repository, the stand-in for a git server, and its file:// URL.

func TestPublishPushesToRemote(t *testing.T) {
	if _, err := exec.LookPath("git-upload-pack"); err != nil {
		if _, err := exec.LookPath("git"); err != nil {
			t.Skip("go-git's file:// transport runs git-upload-pack and git-receive-pack, and git is not installed here")
		}
	}
	ctx := context.Background()
	remoteDir := gentest.BareRepo(t)
	url := "file://" + remoteDir
	target := Target{Name: "globex", Dir: filepath.Join(t.TempDir(), "globex"), URL: url, Branch: "gitops"}

	res, err := Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, Created, res.Status)
	assert.True(t, res.Pushed)
	files, c := gentest.BranchFiles(t, remoteDir, "gitops")
	assert.Equal(t, rendered(), files)
	assert.Equal(t, res.Commit, c.Hash.String())

	// Same files: nothing to commit, nothing pushed.
	res, err = Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, Result{Status: Unchanged}, res)

	// Another clone (a second operator's machine) pushes a change; the first clone's next run
	// builds on it rather than on its own stale branch.
	other := target
	other.Dir = filepath.Join(t.TempDir(), "other")
	next := rendered()
	next["jobs/qwen/vm.yaml"] = []byte("kind: VirtualMachine\nspec: {running: true}\n")
	res, err = Publish(ctx, other, next, opts())
	require.NoError(t, err)
	assert.Equal(t, Updated, res.Status)
	assert.Equal(t, []Change{{"jobs/qwen/vm.yaml", Modified}}, res.Changes)
	othersCommit := res.Commit

	third := rendered()
	third["vcluster.yaml"] = []byte("privateNodes:\n  enabled: false\n")
	res, err = Publish(ctx, target, third, opts())
	require.NoError(t, err)
	assert.Equal(t, Updated, res.Status)
	// The first clone saw the other's change on the remote: it reverts that file (the inputs
	// say so) and changes vcluster.yaml, on top of the other's commit.
	assert.Equal(t, []Change{{"jobs/qwen/vm.yaml", Modified}, {"vcluster.yaml", Modified}}, res.Changes)
	files, c = gentest.BranchFiles(t, remoteDir, "gitops")
	assert.Equal(t, third, files)
	assert.Equal(t, res.Commit, c.Hash.String())
	require.Len(t, c.ParentHashes, 1)
	assert.Equal(t, othersCommit, c.ParentHashes[0].String(), "a fast-forward of the other clone's commit")
	assert.Equal(t, third, gentest.WorkTree(t, target.Dir))
	gitStatusClean(t, target.Dir)

	// Current reads the remote without writing anything.
	got, exists, err := Current(ctx, Target{Name: "globex", Dir: "/nonexistent", URL: url, Branch: "gitops"})
	require.NoError(t, err)
	assert.True(t, exists)
	assert.Equal(t, third, got)
	assert.NoDirExists(t, "/nonexistent")
}

func TestPublishPushFailureCommitsNothing(t *testing.T) {
	ctx := context.Background()
	url := "file://" + filepath.Join(t.TempDir(), "no-such-remote.git")
	dir := filepath.Join(t.TempDir(), "globex")
	_, err := Publish(ctx, Target{Name: "globex", Dir: dir, URL: url}, rendered(), opts())
	require.Error(t, err)
	// The work tree was not written and no branch points at the commit.
	assert.Empty(t, gentest.WorkTree(t, dir))
	repo, err := git.PlainOpen(dir)
	require.NoError(t, err)
	_, err = repo.Reference(plumbing.NewBranchReferenceName("main"), true)
	assert.ErrorIs(t, err, plumbing.ErrReferenceNotFound)
}

func TestPublishRefusesACloneOfAnotherRemote(t *testing.T) {
	ctx := context.Background()
	url := "file://" + gentest.BareRepo(t)
	dir := filepath.Join(t.TempDir(), "globex")
	_, err := Publish(ctx, Target{Name: "globex", Dir: dir, URL: url}, rendered(), opts())
	require.NoError(t, err)
	url2 := "file://" + gentest.BareRepo(t)
	_, err = Publish(ctx, Target{Name: "globex", Dir: dir, URL: url2}, rendered(), opts())
	require.ErrorContains(t, err, "is a clone of "+url)
}

func TestCurrentLocal(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "acme")
	files, exists, err := Current(ctx, Target{Name: "acme", Dir: dir})
	require.NoError(t, err)
	assert.False(t, exists)
	assert.Nil(t, files)
	assert.NoDirExists(t, dir)

	_, err = Publish(ctx, Target{Name: "acme", Dir: dir}, rendered(), opts())
	require.NoError(t, err)
	files, exists, err = Current(ctx, Target{Name: "acme", Dir: dir})
	require.NoError(t, err)
	assert.True(t, exists)
	assert.Equal(t, rendered(), files)
}

func TestRedact(t *testing.T) {
	assert.Equal(t, "https://git.example.com/a.git", Redact("https://bot:s3cret@git.example.com/a.git"))
	assert.Equal(t, "git@github.com:org/repo.git", Redact("git@github.com:org/repo.git"))
	assert.NotContains(t, Redact("https://bot:s3cret@git.example.com/%zz"), "s3cret")
}

func TestDiff(t *testing.T) {
	old := map[string]plumbing.Hash{
		"same.yaml": blobHash([]byte("a")),
		"mod.yaml":  blobHash([]byte("b")),
		"gone.yaml": blobHash([]byte("c")),
	}
	got := Diff(old, map[string][]byte{"same.yaml": []byte("a"), "mod.yaml": []byte("B"), "new.yaml": []byte("d")})
	assert.Equal(t, []Change{{"gone.yaml", Deleted}, {"mod.yaml", Modified}, {"new.yaml", Added}}, got)
	assert.Empty(t, Diff(old, map[string][]byte{"same.yaml": []byte("a"), "mod.yaml": []byte("b"), "gone.yaml": []byte("c")}))
}
