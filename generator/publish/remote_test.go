package publish

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/generator/internal/gentest"
)

// Remote publishes what Publish would, with no work tree: the same commit for the same files
// and clock; nothing when nothing changed; on top of another writer's commit (fetched); ErrMoved
// when the branch moved between its read and its push; nothing at all when Skip says so.
func TestRemotePublishes(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIPPED: go-git's file:// transport runs git-upload-pack and git-receive-pack, and git is not installed here")
	}
	ctx := context.Background()
	remoteDir := gentest.BareRepo(t)
	target := Target{Name: "globex", URL: "file://" + remoteDir, Branch: "gitops"}
	var p Remote

	res, err := p.Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, Created, res.Status)
	assert.True(t, res.Pushed)
	files, c := gentest.BranchFiles(t, remoteDir, "gitops")
	assert.Equal(t, rendered(), files)
	assert.Equal(t, res.Commit, c.Hash.String())
	// Publish makes the very same commit from the same files at the same time.
	viaWorkTree, err := Publish(ctx, Target{Name: "globex", Dir: filepath.Join(t.TempDir(), "w"), URL: "file://" + gentest.BareRepo(t), Branch: "gitops"},
		rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, viaWorkTree.Commit, res.Commit)

	res, err = p.Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	assert.Equal(t, Result{Status: Unchanged}, res)

	// Another writer (a work tree's Publish) moves the branch: the next publish reads it.
	next := rendered()
	next["jobs/qwen/vm.yaml"] = []byte("kind: VirtualMachine\nspec: {running: true}\n")
	other, err := Publish(ctx, Target{Name: "globex", Dir: filepath.Join(t.TempDir(), "o"), URL: target.URL, Branch: "gitops"}, next, opts())
	require.NoError(t, err)
	third := rendered()
	third["vcluster.yaml"] = []byte("privateNodes:\n  enabled: false\n")
	delete(third, "jobs/llama/vm.yaml")
	res, err = p.Publish(ctx, target, third, opts())
	require.NoError(t, err)
	assert.Equal(t, []Change{{"jobs/llama/vm.yaml", Deleted}, {"jobs/qwen/vm.yaml", Modified}, {"vcluster.yaml", Modified}}, res.Changes)
	files, c = gentest.BranchFiles(t, remoteDir, "gitops")
	assert.Equal(t, third, files)
	require.Len(t, c.ParentHashes, 1)
	assert.Equal(t, other.Commit, c.ParentHashes[0].String(), "on top of the other writer's commit")

	// Skip sees the head's message and publishes nothing.
	var seen string
	o := opts()
	o.Skip = func(msg string) bool { seen = msg; return true }
	res, err = p.Publish(ctx, target, rendered(), o)
	require.NoError(t, err)
	assert.True(t, res.Skipped)
	assert.Equal(t, c.Message, seen)
	files, _ = gentest.BranchFiles(t, remoteDir, "gitops")
	assert.Equal(t, third, files, "nothing pushed")
}

// A publisher whose remembered head is stale reads the new one from the advertisement and
// builds on it.
func TestRemoteReadsAMovedBranch(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIPPED: go-git's file:// transport runs git-upload-pack and git-receive-pack, and git is not installed here")
	}
	ctx := context.Background()
	remoteDir := gentest.BareRepo(t)
	target := Target{Name: "globex", URL: "file://" + remoteDir}
	var a, b Remote
	_, err := a.Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	moved := rendered()
	moved["vcluster.yaml"] = []byte("moved: true\n")
	_, err = b.Publish(ctx, target, moved, opts())
	require.NoError(t, err)
	// a believes the branch is at its own commit; the advertisement tells it otherwise, so it
	// fetches and builds on b's commit: no refusal is needed for a stale memory.
	mine := rendered()
	mine["platform/project.yaml"] = []byte("kind: Project\nmine: true\n")
	res, err := a.Publish(ctx, target, mine, opts())
	require.NoError(t, err)
	files, _ := gentest.BranchFiles(t, remoteDir, "main")
	assert.Equal(t, mine, files)
	assert.Equal(t, Updated, res.Status)
}

// Another writer's push lands between a publish's read of the branch and its push: the remote
// refuses the push (ErrMoved) and nothing of it lands; the next publish lands on the new head.
func TestRemoteRefusedWhenTheBranchMoved(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.Start(t, "tok")
	url := srv.NewRepo(t, "globex", nil)
	target := Target{Name: "globex", URL: url, Auth: &githttp.BasicAuth{Username: "x", Password: "tok"}}
	var a, b Remote
	_, err := a.Publish(ctx, target, rendered(), opts())
	require.NoError(t, err)
	moved := rendered()
	moved["vcluster.yaml"] = []byte("moved: true\n")
	var once atomic.Bool
	srv.BeforePush = func(*http.Request) bool {
		if once.CompareAndSwap(false, true) { // a's push is here: b pushes first
			_, err := b.Publish(ctx, target, moved, opts())
			require.NoError(t, err)
		}
		return true
	}
	mine := rendered()
	mine["platform/project.yaml"] = []byte("kind: Project\nmine: true\n")
	_, err = a.Publish(ctx, target, mine, opts())
	require.ErrorIs(t, err, ErrMoved)
	files, _ := gentest.BranchFiles(t, srv.Dir("globex"), "main")
	assert.Equal(t, moved, files, "nothing of the refused push")
	res, err := a.Publish(ctx, target, mine, opts())
	require.NoError(t, err)
	assert.Equal(t, Updated, res.Status)
	files, _ = gentest.BranchFiles(t, srv.Dir("globex"), "main")
	assert.Equal(t, mine, files)
}
