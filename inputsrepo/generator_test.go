package inputsrepo

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/problem"
)

// bundled reads the repository's bundled recipes/ and tenants/ (the README's examples).
func bundled(t *testing.T) map[string]string {
	files := map[string]string{}
	for _, dir := range []string{"recipes", "tenants"} {
		root := filepath.Join("..", dir)
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			rel, _ := filepath.Rel("..", p)
			files[filepath.ToSlash(rel)] = string(data)
			return err
		}))
	}
	return files
}

// generatorCheck is the check the API passes: the generator, for one tenant, over the changed
// tree (nothing written: a dry run into an empty output folder).
func generatorCheck(t *testing.T, tenant string) func(context.Context, *Tree) error {
	return func(ctx context.Context, tr *Tree) error {
		recipes, err := fs.Sub(tr, "recipes")
		require.NoError(t, err)
		tenants, err := fs.Sub(tr, "tenants")
		require.NoError(t, err)
		_, err = generator.Generate(ctx, generator.Options{
			Recipes: recipes, Tenants: tenants, RecipesDir: "recipes", TenantsDir: "tenants",
			OutDir: filepath.Join(t.TempDir(), "out"), Tenant: tenant, DryRun: true,
		})
		return err
	}
}

// The real generator runs as the write's check over the Tree: a job the policy admits is
// committed; one past the tenant's GPU quota is refused with the generator's own problem
// (file, field, expected) and nothing is committed.
func TestCheckWithTheGenerator(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "inputs.git")
	gitserver.Init(t, dir, bundled(t))
	r := open(t, Options{URL: "file://" + dir})
	job := func(name string, replicas int) func(*Tree) error {
		return func(tr *Tree) error {
			return tr.WriteFile("tenants/acme/jobs/"+name+".yaml", []byte(`apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: `+name+`
spec:
  model: Qwen/Qwen3-32B
  replicas: `+strconv.Itoa(replicas)+`
  gpuCount: 1
  nodeType: metal3.gpu-h100
`))
		}
	}
	res, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job qwen-small", Apply: job("qwen-small", 1), Check: generatorCheck(t, "acme")})
	require.NoError(t, err)
	assert.Equal(t, []string{"tenants/acme/jobs/qwen-small.yaml"}, res.Changed)

	before := remoteLog(t, dir)
	_, err = r.Write(ctx, Change{Author: dana, Message: "acme: create job qwen-big", Apply: job("qwen-big", 40), Check: generatorCheck(t, "acme")})
	var ce *CheckError
	require.ErrorAs(t, err, &ce)
	probs := problem.Problems(ce.Err)
	require.NotEmpty(t, probs, "the generator's own problems: %v", ce.Err)
	var quota []string
	for _, p := range probs {
		if p.File == "tenants/acme/jobs/qwen-big.yaml" {
			quota = append(quota, p.Err.Field+": "+p.Err.Detail)
		}
	}
	assert.Contains(t, quota, "spec.replicas: must be at most 16, Tenant acme's quota of replicas per job")
	assert.Equal(t, before, remoteLog(t, dir), "nothing committed")
}
