package inputsrepo

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Tree is a correct fs.FS before and after changes (testing/fstest checks every file and
// folder it lists, Open, ReadDir, ReadFile and Stat agreeing with each other).
func TestTreeIsAnFS(t *testing.T) {
	_, o := fileRemote(t)
	snap, err := open(t, o).Head(context.Background())
	require.NoError(t, err)
	tr := snap.Files
	var files []string
	for p := range initial {
		files = append(files, p)
	}
	require.NoError(t, fstest.TestFS(tr, files...))

	require.NoError(t, tr.WriteFile("tenants/initech/tenant.yaml", []byte("kind: Tenant\n")))
	require.NoError(t, tr.WriteFile("tenants/acme/jobs/qwen.yaml", []byte("replicas: 4\n")))
	require.NoError(t, tr.Remove("tenants/acme/jobs/mistral.yaml"))
	require.NoError(t, tr.RemoveAll("tenants/globex"))
	require.NoError(t, tr.RemoveAll("recipes/strategies"))
	require.NoError(t, fstest.TestFS(tr, "tenants/initech/tenant.yaml", "tenants/acme/jobs/qwen.yaml",
		"tenants/acme/tenant.yaml", "recipes/models/qwen/Qwen3.yaml"))

	// What was removed is gone, folders emptied by it too.
	for _, gone := range []string{"tenants/globex", "tenants/globex/tenant.yaml", "tenants/acme/jobs/mistral.yaml", "recipes/strategies"} {
		_, err := fs.Stat(tr, gone)
		assert.ErrorIs(t, err, fs.ErrNotExist, gone)
	}
	data, err := fs.ReadFile(tr, "tenants/acme/jobs/qwen.yaml")
	require.NoError(t, err)
	assert.Equal(t, "replicas: 4\n", string(data))
	assert.Equal(t, []string{"recipes/strategies/single.yaml", "tenants/acme/jobs/mistral.yaml", "tenants/acme/jobs/qwen.yaml",
		"tenants/globex/jobs/llama.yaml", "tenants/globex/tenant.yaml", "tenants/initech/tenant.yaml"}, tr.Changed())
}

func TestTreeRefusesBadPaths(t *testing.T) {
	_, o := fileRemote(t)
	snap, err := open(t, o).Head(context.Background())
	require.NoError(t, err)
	tr := snap.Files
	for _, p := range []string{"", ".", "../x", "/etc/passwd", "a//b", ".git/config", "x/.GIT/y"} {
		assert.Error(t, tr.WriteFile(p, []byte("x")), p)
	}
	assert.ErrorContains(t, tr.WriteFile("tenants/acme", []byte("x")), "is a folder")
	assert.ErrorContains(t, tr.WriteFile("tenants/acme/tenant.yaml/x", []byte("x")), "is a file")
	assert.ErrorIs(t, tr.Remove("tenants/absent.yaml"), fs.ErrNotExist)
	assert.NoError(t, tr.RemoveAll("tenants/absent"))
	assert.Empty(t, tr.Changed())
}
