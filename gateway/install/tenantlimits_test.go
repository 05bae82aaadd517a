package install

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/internal/manifest"
)

// sized are n files of size bytes each (names included), named f<i>.yaml.
func sized(n, size int) map[string][]byte {
	out := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("f%05d.yaml", i)
		out[name] = []byte(strings.Repeat("x", size-len(name)))
	}
	return out
}

// TestSplitFiles: every file in exactly one shard, none over the limit, as few shards as the
// total needs or a few more, the same shards from the same files, and a file kept in its
// shard as files are added while the count stays. Sizes are as JSON (jsonSize: what the
// last-applied annotation of `kubectl apply` holds).
func TestSplitFiles(t *testing.T) {
	for _, tc := range []struct {
		name          string
		files         map[string][]byte
		limit, target int
		shards        [2]int // at least, at most
		err           string
	}{
		{"none", nil, maxShardBytes, shardTarget, [2]int{0, 0}, ""},
		{"one tenant", sized(1, 600), maxShardBytes, shardTarget, [2]int{1, 1}, ""},
		{"1,500 tenants: what one ConfigMap held before", sized(1500, 600), maxShardBytes, shardTarget, [2]int{6, 8}, ""},
		{"5,000 tenants", sized(5000, 600), maxShardBytes, shardTarget, [2]int{19, 22}, ""},
		{"20,000 tenants", sized(20000, 650), maxShardBytes, shardTarget, [2]int{81, 90}, ""},
		{"large files the hash spreads unevenly", sized(40, 300), 1500, 1200, [2]int{10, 40}, ""},
		{"a file over the limit", sized(2, 1000), 1200, 1000, [2]int{}, "f00000.yaml is 1006 bytes as JSON: a ConfigMap of the tenant limits holds at most 944"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shards, err := splitFiles(tc.files, tc.limit, tc.target)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.GreaterOrEqual(t, len(shards), tc.shards[0])
			assert.LessOrEqual(t, len(shards), tc.shards[1])
			seen := map[string]int{}
			for i, shard := range shards {
				size := 0
				for n, b := range shard {
					seen[n]++
					assert.Equal(t, tc.files[n], b)
					size += jsonSize(n, b)
				}
				assert.LessOrEqual(t, size, tc.limit-256, "shard %d, with room for its shard file", i)
			}
			assert.Len(t, seen, len(tc.files))
			for n, c := range seen {
				assert.Equal(t, 1, c, n)
			}
			again, err := splitFiles(maps.Clone(tc.files), tc.limit, tc.target)
			require.NoError(t, err)
			assert.Equal(t, shards, again, "deterministic")
		})
	}

	before, err := splitFiles(sized(5000, 600), maxShardBytes, shardTarget)
	require.NoError(t, err)
	after, err := splitFiles(sized(5040, 600), maxShardBytes, shardTarget)
	require.NoError(t, err)
	require.Len(t, after, len(before))
	for i := range before {
		for n := range before[i] {
			if _, ok := after[i][n]; !ok {
				t.Errorf("%s left shard %d as files were added: a file stays in its shard while the count does", n, i)
			}
		}
	}
}

// writeFleet writes a tenants folder of n tenants on tier gold, which has limits (each
// tenant.yaml about 600 bytes, every seventh with limits of its own); with a provider, a
// tenant platform shares its job qwen.
func writeFleet(t testing.TB, n int, provider bool) string {
	t.Helper()
	dir := t.TempDir()
	write := func(p, s string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644))
	}
	write("tiers/gold.yaml", "apiVersion: inferplane.io/v1alpha1\nkind: Tier\nmetadata:\n  name: gold\nspec:\n  nodeTypes: [metal3.gpu-h100]\n"+
		"  quota: {gpus: 8, jobs: 8, replicasPerJob: 16}\n  limits:\n    requestsPerMinute: {value: 6000}\n    tokensPerDay: {value: 50000000, mode: soft}\n"+
		"  keyLimits:\n    requestsPerMinute: {value: 600}\n  models: [Qwen/*]\n")
	for i := range n {
		name := fmt.Sprintf("tenant-%05d", i)
		own := ""
		if i%7 == 0 {
			own = fmt.Sprintf("  limits:\n    requestsPerMinute: {value: %d}\n    timeZone: Europe/Berlin\n    onStoreDown: closed\n", 60+i)
		}
		write(name+"/tenant.yaml", "# A customer of the generated fleet: dedicated GPUs on tier gold, its own\n# connector and groups.\n"+
			"apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: "+name+"\nspec:\n"+
			"  displayName: Customer "+name+" of the generated fleet\n  tier: gold\n  quota:\n    gpus: 16\n  argoCD:\n    connector: argocd-main\n"+
			"  access:\n  - group: "+name+"-ml\n    role: developer\n  - group: "+name+"-all\n    role: viewer\n"+
			"  - user: ops@"+name+".example\n    role: admin\n  - user: billing@"+name+".example\n    role: viewer\n"+own)
	}
	if provider {
		write("platform/tenant.yaml", "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: platform\nspec:\n  tier: gold\n  provider: true\n")
		write("platform/jobs/qwen.yaml", "apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nmetadata:\n  name: qwen\n"+
			"spec: {model: Qwen/Qwen3-32B, replicas: 1, gpuCount: 1, nodeType: metal3.gpu-h100}\n")
	}
	return dir
}

// tenantLimitsOf are the install's ConfigMaps of the tenants' limits.
func tenantLimitsOf(t *testing.T, o Options) []*corev1.ConfigMap {
	t.Helper()
	objs, err := Manifests(o)
	require.NoError(t, err)
	var out []*corev1.ConfigMap
	for _, obj := range objs {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Labels[LabelTenantLimits] != "" {
			out = append(out, cm)
		}
	}
	return out
}

// TestTenantLimitsReadAsTheTenantsFolder: the flat folder the install's ConfigMaps make (every
// key of each at the root of one folder, as the projected volume mounts them) gives the xDS
// servers and the key checks the same limits, key defaults and shared endpoints as the
// tenants folder they were rendered from.
func TestTenantLimitsReadAsTheTenantsFolder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dir    string
		shards int
	}{
		{"the bundled examples (tiers with limits, a provider)", "../../tenants", 1},
		{"2,000 generated tenants and a provider", writeFleet(t, 2000, true), 7},
		{"300 generated tenants, no provider", writeFleet(t, 300, false), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := limits.TenantFilesWithLimits(tc.dir)
			require.NoError(t, err)
			cms := tenantLimitsOf(t, Options{Domain: "inference.example.com", TenantLimits: files})
			require.GreaterOrEqual(t, len(cms), tc.shards)
			flat := t.TempDir()
			for _, cm := range cms {
				for k, v := range cm.Data {
					require.NoFileExists(t, filepath.Join(flat, k), "a key in two ConfigMaps")
					require.NoError(t, os.WriteFile(filepath.Join(flat, k), []byte(v), 0o644))
				}
			}
			tree, fromFlat := &limits.TenantFiles{Dir: tc.dir}, &limits.TenantFiles{Dir: flat}
			require.NoError(t, tree.Load())
			require.NoError(t, fromFlat.Load())
			assert.ElementsMatch(t, tree.Names(), fromFlat.Names())
			assert.NotEmpty(t, tree.Names())
			entries, err := os.ReadDir(tc.dir)
			require.NoError(t, err)
			var tenants []string
			for _, e := range entries {
				if _, err := os.Stat(filepath.Join(tc.dir, e.Name(), "tenant.yaml")); err == nil {
					tenants = append(tenants, e.Name())
				}
			}
			for _, name := range tenants {
				assert.Equal(t, tree.Tenant(name), fromFlat.Tenant(name), name)
			}
			shared := func(f *limits.TenantFiles) []string {
				var out []string
				f.Sharing().Shared(func(p, j, m string) {
					for _, caller := range tenants {
						_, ok := f.Sharing().SharedCall(caller, p, j)
						out = append(out, fmt.Sprintf("%s on %s/%s (%s): %v", caller, p, j, m, ok))
					}
				})
				slices.Sort(out)
				return out
			}
			assert.Equal(t, shared(tree), shared(fromFlat))
		})
	}
}

// TestManifestsFleetApplied: the install of 5,000 tenants on a tier with limits, and a provider
// (so every tenant's file is mounted), is applied for real to the API server, strict field
// validation on, each object with the last-applied annotation `kubectl apply` adds (the
// ConfigMaps' 1 MiB bound and the annotations' 256 KiB are the API server's own checks); each
// ConfigMap holds well under both, and the pod specs do not grow with the fleet. Applied again for a
// smaller fleet, the ConfigMaps the label selects and the render lacks are the ones `kubectl
// apply --prune -l` deletes: exactly those past the new count.
func TestManifestsFleetApplied(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	o := Options{Domain: "inference.example.com", Namespace: "fleet-gateway", Name: "gw"}
	apply := func(tenants int) []string {
		t.Helper()
		files, err := limits.TenantFilesWithLimits(writeFleet(t, tenants, true))
		require.NoError(t, err)
		require.Len(t, files, tenants+3, "every tenant, the tier, the provider and its job")
		o.TenantLimits = files
		y, err := YAML(o)
		require.NoError(t, err)
		objs, err := manifest.Decode(y)
		require.NoError(t, err)
		var names []string
		for _, u := range objs {
			// What `kubectl apply` (client-side, as Argo CD by default) adds: the object as JSON.
			last, err := u.MarshalJSON()
			require.NoError(t, err)
			u.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(last) + "\n"})
			if ns := u.GetNamespace(); ns != "" {
				require.NoError(t, env.EnsureNamespace(ctx, ns))
			}
			require.NoError(t, env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
				client.FieldOwner(kubeenv.FieldManager), client.ForceOwnership), kubeenv.Describe(u))
			if u.GetLabels()[LabelTenantLimits] != "" {
				names = append(names, u.GetName())
			}
			if u.GetKind() == "StatefulSet" || u.GetKind() == "Deployment" {
				spec, _, _ := unstructured.NestedMap(u.Object, "spec", "template")
				b, err := manifest.Encode(spec)
				require.NoError(t, err)
				assert.Less(t, len(b), 8<<10, "%s: the pod spec does not grow with the fleet", u.GetName())
			}
		}
		return names
	}
	big := apply(5000)
	assert.GreaterOrEqual(t, len(big), 18, "about 3 MB of files")
	var stored corev1.ConfigMapList
	require.NoError(t, env.Client.List(ctx, &stored, client.InNamespace(o.Namespace), client.MatchingLabels{LabelTenantLimits: o.Name}))
	require.Len(t, stored.Items, len(big))
	keys, total := 0, 0
	for _, cm := range stored.Items {
		size := 0
		for k, v := range cm.Data {
			size += len(k) + len(v)
		}
		annotation := len(cm.Annotations["kubectl.kubernetes.io/last-applied-configuration"])
		assert.Less(t, annotation, 256<<10, cm.Name)
		keys += len(cm.Data) - 1 // its shard file
		assert.LessOrEqual(t, size, maxShardBytes, cm.Name)
		t.Logf("%s: %d files, %d bytes, the last-applied annotation %d", cm.Name, len(cm.Data), size, annotation)
		total += size
	}
	assert.Equal(t, 5003, keys, "every file stored once")
	t.Logf("%d files, %d bytes in all", keys, total)
	// What the install rendered before: every file in one ConfigMap, which the API server refuses.
	one := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gw-tenant-limits", Namespace: o.Namespace}, Data: map[string]string{}}
	for _, cm := range stored.Items {
		maps.Copy(one.Data, cm.Data)
	}
	assert.ErrorContains(t, env.Client.Create(ctx, one, client.DryRunAll), "may not be more than 1048576 bytes")

	small := apply(1000)
	require.Less(t, len(small), len(big))
	require.NoError(t, env.Client.List(ctx, &stored, client.InNamespace(o.Namespace), client.MatchingLabels{LabelTenantLimits: o.Name}))
	var stale []string
	for _, cm := range stored.Items {
		if !slices.Contains(small, cm.Name) {
			stale = append(stale, cm.Name)
		}
	}
	want := slices.Sorted(slices.Values(big[len(small):]))
	slices.Sort(stale)
	assert.Equal(t, want, stale, "what a prune by the label deletes")
}
