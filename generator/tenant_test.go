package generator

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/generator/internal/gentest"
	"github.com/inferplane/inferplane/generator/publish"
)

// Options.Tenant publishes that tenant alone, while a broken job of another tenant still
// stops the run (the whole tree is checked, as generate checks it); a name no tenant has is a
// problem naming the tenants there are, with nothing written.
func TestGenerateOneTenant(t *testing.T) {
	out := t.TempDir()
	opts := options(gentest.Copy(t, "../tenants"), out)
	opts.Tenant = "globex"
	rep, err := Generate(context.Background(), opts)
	require.NoError(t, err)
	assert.Equal(t, map[string]publish.Status{"globex": publish.Created}, statuses(rep))
	assert.Nil(t, gentest.Snapshot(t, filepath.Join(out, "acme")), "other tenants are not written")

	opts.Tenant = "acmee"
	_, err = Generate(context.Background(), opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `tenants/acmee/tenant.yaml: unknown tenant "acmee"`)
	assert.Contains(t, err.Error(), "expected one of the tenants: acme, globex, initech, platform")

	// The other tenants' folders are not read: a broken file in acme does not stop a run of
	// globex (a run of every tenant refuses it), and one in globex does.
	in := gentest.Copy(t, "../tenants")
	gentest.Edit(t, in, "acme/jobs/qwen3-32b.yaml", "replicas: 2", "replicas: 2\n  gpuCont: 1")
	opts = options(in, out)
	opts.Tenant = "globex"
	_, err = Generate(context.Background(), opts)
	require.NoError(t, err)
	opts.Tenant = ""
	_, err = Generate(context.Background(), opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tenants/acme/jobs/qwen3-32b.yaml")

	in = gentest.Copy(t, "../tenants")
	gentest.Edit(t, in, "globex/jobs/kimi-k2.yaml", "replicas: 1", "replicas: 1\n  gpuCont: 1")
	before := gentest.Snapshot(t, out)
	opts = options(in, out)
	opts.Tenant = "globex"
	_, err = Generate(context.Background(), opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tenants/globex/jobs/kimi-k2.yaml")
	assert.Equal(t, before, gentest.Snapshot(t, out), "nothing written")
}
