package inputsrepo

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/generator/publish"
)

// renderer is a stand-in for the generator that is a pure function of the inputs, as the
// generator is: a tenant's repository holds its tenant.yaml, its jobs and the node types. It
// reads neither the recipes nor the masters, so a change there renders to the same files.
type renderer struct {
	calls   map[string]int
	failFor string
}

func (rd *renderer) files(t TenantRepo, snap Snapshot) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(snap.Files, "tenants", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch {
		case strings.HasPrefix(p, "tenants/"+t.Tenant+"/"), strings.HasPrefix(p, "tenants/nodetypes/"):
			data, err := snap.Files.ReadFile(p)
			files[strings.TrimPrefix(p, "tenants/")] = data
			return err
		}
		return nil
	})
	return files, err
}

func (rd *renderer) render(ctx context.Context, t TenantRepo, snap Snapshot) (bool, error) {
	rd.calls[t.Tenant]++
	if t.Tenant == rd.failFor {
		return false, errors.New("the check refused it")
	}
	files, err := rd.files(t, snap)
	if err != nil {
		return false, err
	}
	res, err := publish.Publish(ctx, t.Target, files, publish.Options{Trailers: []string{InputsTrailer(snap.Commit)}})
	return res.Status != publish.Unchanged, err
}

// tenantsOf lists the tenant folders of a snapshot, each with a bare repository beside root.
func tenantsOf(root string) func(Snapshot) ([]TenantRepo, error) {
	return func(snap Snapshot) ([]TenantRepo, error) {
		entries, err := fs.ReadDir(snap.Files, "tenants")
		if err != nil {
			return nil, err
		}
		var out []TenantRepo
		for _, e := range entries {
			if _, err := fs.Stat(snap.Files, path.Join("tenants", e.Name(), "tenant.yaml")); err != nil {
				continue
			}
			bare := filepath.Join(root, e.Name()+".git")
			out = append(out, TenantRepo{Tenant: e.Name(), Target: publish.Target{
				Name: e.Name(), URL: "file://" + bare, Dir: filepath.Join(root, "work", e.Name()),
			}})
		}
		return out, nil
	}
}

func statuses(outs []Outcome) map[string]Status {
	m := map[string]Status{}
	for _, o := range outs {
		m[o.Tenant] = o.Status
	}
	return m
}

func TestReconcile(t *testing.T) {
	ctx := context.Background()
	_, o := fileRemote(t)
	root := t.TempDir()
	for _, tenant := range []string{"acme", "globex"} {
		gitserver.Init(t, filepath.Join(root, tenant+".git"), nil)
	}
	inputs := open(t, o)
	rd := &renderer{calls: map[string]int{}}
	rc := &Reconciler{Inputs: inputs, Tenants: tenantsOf(root), Render: rd.render}
	trailer := func(tenant string) string {
		msg := gitserver.Git(t, filepath.Join(root, tenant+".git"), "log", "-1", "--format=%B", "main")
		return Trailers(msg)[TrailerInputs]
	}

	// Never rendered: both are.
	head, outs, err := rc.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]Status{"acme": Rendered, "globex": Rendered}, statuses(outs))
	assert.Equal(t, head, trailer("acme"))
	assert.Equal(t, head, trailer("globex"))

	// Nothing moved: nothing is rendered.
	_, outs, err = rc.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]Status{"acme": Fresh, "globex": Fresh}, statuses(outs))
	assert.Equal(t, map[string]int{"acme": 1, "globex": 1}, rd.calls)

	// A write to acme's inputs whose replica died before rendering it: acme heals, globex is
	// not rendered (none of its inputs changed).
	w, err := inputs.Write(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi")})
	require.NoError(t, err)
	head, outs, err = rc.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, w.Commit, head)
	assert.Equal(t, map[string]Status{"acme": Rendered, "globex": Fresh}, statuses(outs))
	assert.Equal(t, map[string]int{"acme": 2, "globex": 1}, rd.calls)
	assert.Equal(t, head, trailer("acme"))
	assert.Contains(t, gitserver.Git(t, filepath.Join(root, "acme.git"), "show", "main:acme/jobs/phi.yaml"), "name: phi")

	// A change both read (the recipes) that renders to the same files: both are rendered once,
	// make no commit, and are then known to be up to date at the new head.
	_, err = inputs.Write(ctx, Change{Author: dana, Message: "recipes: refresh", Apply: func(tr *Tree) error {
		return tr.WriteFile("recipes/models/qwen/Qwen3.yaml", []byte("model: Qwen/Qwen3-32B\nupdated: true\n"))
	}})
	require.NoError(t, err)
	_, outs, err = rc.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]Status{"acme": Rendered, "globex": Rendered}, statuses(outs))
	for _, o := range outs {
		assert.False(t, o.Committed, o.Tenant)
	}
	_, outs, err = rc.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]Status{"acme": Fresh, "globex": Fresh}, statuses(outs))
	assert.Equal(t, map[string]int{"acme": 3, "globex": 2}, rd.calls)

	// Another replica (no memory of that) renders them once more, and commits nothing.
	rc2 := &Reconciler{Inputs: open(t, o), Tenants: tenantsOf(root), Render: rd.render}
	_, outs, err = rc2.Run(ctx)
	require.NoError(t, err)
	for _, o := range outs {
		assert.False(t, o.Committed, o.Tenant)
	}

	// Rendering by hand afterwards (generate: same files, no trailer) changes nothing.
	snap, err := inputs.Head(ctx)
	require.NoError(t, err)
	tenants, err := tenantsOf(root)(snap)
	require.NoError(t, err)
	for _, tr := range tenants {
		files, err := rd.files(tr, snap)
		require.NoError(t, err)
		res, err := publish.Publish(ctx, tr.Target, files, publish.Options{})
		require.NoError(t, err)
		assert.Equal(t, publish.Unchanged, res.Status, tr.Tenant)
	}

	// A tenant whose render fails is reported; the others go on.
	_, err = inputs.Write(ctx, Change{Author: dana, Message: "nodetypes: add h200", Apply: func(tr *Tree) error {
		return tr.WriteFile("tenants/nodetypes/h200.yaml", []byte("kind: NodeType\nname: h200\n"))
	}})
	require.NoError(t, err)
	rd.failFor = "acme"
	_, outs, err = rc.Run(ctx)
	require.ErrorContains(t, err, "tenant acme: the check refused it")
	assert.Equal(t, map[string]Status{"acme": Failed, "globex": Rendered}, statuses(outs))
	rd.failFor = ""
	_, outs, err = rc.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]Status{"acme": Rendered, "globex": Fresh}, statuses(outs))
}

func TestChanged(t *testing.T) {
	ctx := context.Background()
	_, o := fileRemote(t)
	r := open(t, o)
	before, err := r.Head(ctx)
	require.NoError(t, err)
	w, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi")})
	require.NoError(t, err)
	for p, want := range map[string]bool{
		"tenants/acme": true, "tenants/acme/jobs/phi.yaml": true, "tenants/globex": false,
		"recipes": false, "tenants/nodetypes": false, "tenants/absent": false,
	} {
		got, err := r.Changed(before.Commit, w.Commit, []string{p})
		require.NoError(t, err)
		assert.Equal(t, want, got, p)
	}
	_, err = r.Changed("0123456789012345678901234567890123456789", w.Commit, []string{"recipes"})
	assert.Error(t, err)

	for _, c := range []struct {
		a, b string
		want bool
	}{{before.Commit, w.Commit, true}, {w.Commit, w.Commit, true}, {w.Commit, before.Commit, false}} {
		got, err := r.IsAncestor(c.a, c.b)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%s ancestor of %s", c.a, c.b)
	}
}
