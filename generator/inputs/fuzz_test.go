package inputs

import (
	"strings"
	"testing"
	"testing/fstest"
)

// FuzzLoad feeds arbitrary bytes to the loader as every kind of input file: whatever the bytes,
// Load returns inputs or problems, never panics, and never both.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		nodeTypeH100, masterMistral, tenantAcme, jobQwen,
		"", "---\n---\n", "- a\n", "kind: [", "a: &x [*x]\n", "{}", "null", "apiVersion: 1\nkind: 2\n",
		strings.Replace(jobQwen, "replicas: 2", "replicas: 1e99", 1),
		strings.Replace(jobQwen, "gpuCount: 1", "gpuCount: {a: b}", 1),
		strings.Replace(jobQwen, "model: Qwen/Qwen3-32B", "extraArgs: [1, [2]]\n  features: {x: 3}", 1),
		tenantAcme + "  git: {url: \"http://[::1\"}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range []string{"nodetypes/x.yaml", "masters/x.yaml", "acme/tenant.yaml", "acme/jobs/x.yaml"} {
			tree := fstest.MapFS{"acme/tenant.yaml": {Data: []byte(tenantAcme)}}
			tree[p] = &fstest.MapFile{Data: data}
			in, err := Load(tree, "tenants")
			if (in == nil) == (err == nil) {
				t.Fatalf("%s: inputs %v and error %v", p, in, err)
			}
			if err != nil && err.Error() == "" {
				t.Fatalf("%s: empty error", p)
			}
		}
	})
}
