package render_test

import (
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/internal/manifest"
)

// TestJobFoldersBuildWithKustomize builds every jobs/<job>/ folder, and the addons/ folder, with kustomize's krusty over
// an in-memory copy of the rendered tree (what Argo CD does with the folder), and checks the
// build yields exactly the objects of the folder's files: none lost, none added, none changed.
func TestJobFoldersBuildWithKustomize(t *testing.T) {
	for _, tp := range fixtures() {
		files := mustRender(t, tp)
		fs := filesys.MakeFsInMemory()
		dirs := map[string]bool{}
		for _, p := range slices.Sorted(maps.Keys(files)) {
			if err := fs.WriteFile("/"+p, files[p]); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(p, "jobs/") || path.Dir(p) == render.AddonsDir {
				dirs[path.Dir(p)] = true
			}
		}
		if want := len(tp.Jobs) + 1; len(dirs) != want {
			t.Errorf("%s: %d job and add-on folders, want %d", tp.Tenant.Name, len(dirs), want)
		}
		for dir := range dirs {
			k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
			rm, err := k.Run(fs, "/"+dir)
			if err != nil {
				t.Errorf("%s/%s: kustomize build: %v", tp.Tenant.Name, dir, err)
				continue
			}
			built := map[string]map[string]any{}
			for _, r := range rm.Resources() {
				m, err := r.Map()
				if err != nil {
					t.Fatal(err)
				}
				built[r.CurId().String()] = m
			}

			want := map[string]map[string]any{}
			for _, p := range slices.Sorted(maps.Keys(files)) {
				if path.Dir(p) != dir || !isKubeObjectFile(p) {
					continue
				}
				objs, err := manifest.Decode(files[p])
				if err != nil {
					t.Fatal(err)
				}
				for _, u := range objs {
					id := u.GetKind() + "|" + u.GetNamespace() + "|" + u.GetName()
					want[id] = u.Object
				}
			}
			if len(built) != len(want) {
				t.Errorf("%s/%s: kustomize yields %d objects, the folder holds %d", tp.Tenant.Name, dir, len(built), len(want))
			}
			for _, m := range built {
				u := metaOf(m)
				w, ok := want[u]
				if !ok {
					t.Errorf("%s/%s: kustomize yields %s, which no file holds", tp.Tenant.Name, dir, u)
					continue
				}
				if !reflect.DeepEqual(normalize(m), normalize(w)) {
					t.Errorf("%s/%s: kustomize changed %s", tp.Tenant.Name, dir, u)
				}
			}
		}
	}
}

func metaOf(m map[string]any) string {
	md, _ := m["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	kind, _ := m["kind"].(string)
	return kind + "|" + ns + "|" + name
}

// normalize re-encodes an object through JSON so both sides use the same number types.
func normalize(m map[string]any) any {
	b, err := manifest.Encode(m)
	if err != nil {
		panic(err)
	}
	objs, err := manifest.Decode(b)
	if err != nil {
		panic(err)
	}
	return objs[0].Object
}
