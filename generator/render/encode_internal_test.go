package render

import (
	"bytes"
	"testing"

	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/internal/manifest"
)

// TestEncodeMatchesManifest: the render's fast encoder writes exactly what the project's
// shared encoder (internal/manifest, sigs.k8s.io/yaml) writes for every object the render
// builds, so the files are the same as if manifest.Encode had written them.
func TestEncodeMatchesManifest(t *testing.T) {
	n := 0
	for _, tp := range append(rendertest.Many(12, 5), rendertest.Acme(), rendertest.Globex(), rendertest.Initech()) {
		opts := Options{}.withDefaults(&tp)
		rt, err := resolve(&tp, opts)
		if err != nil {
			t.Fatal(err)
		}
		addons, err := addonsFor(opts.Webhook)
		if err != nil {
			t.Fatal(err)
		}
		objs := []any{vclusterValues(rt, addons), project(rt), tenantObject(rt), appProject(rt),
			addonsKustomization(), addonsApplication(rt, addons), addonsAppProject(rt, addons)}
		objs = append(objs, nodeTypeObjects(rt)...)
		for i := range rt.jobs {
			j := &rt.jobs[i]
			objs = append(objs, application(rt, j))
			for _, f := range jobFiles(rt, j) {
				objs = append(objs, f.obj)
			}
		}
		for _, o := range objs {
			want, err := manifest.Encode(o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encode(o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: fast encoder differs from manifest.Encode for %T:\n--- got\n%s\n--- want\n%s", tp.Tenant.Name, o, got, want)
			}
			n++
		}
		// Multi-document streams too.
		want, _ := manifest.Encode(nodeTypeObjects(rt)...)
		got, _ := encode(nodeTypeObjects(rt)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: node type stream differs", tp.Tenant.Name)
		}
	}
	t.Logf("%d objects encoded identically", n)
}
