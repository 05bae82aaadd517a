package limits

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFlatNames: each entry of TenantFilesWithLimits has a flat file name a flat folder reads
// back as the same entry; names two entries would share, or that would read as another kind,
// are refused naming both.
func TestFlatNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []string
		want    map[string]string
		err     []string
	}{
		{"the three kinds", []string{"acme", "tiers/h100-dedicated", "platform/jobs/qwen3-32b.yaml", "platform"},
			map[string]string{"acme": "acme.yaml", "tiers/h100-dedicated": "tier.h100-dedicated.yaml",
				"platform/jobs/qwen3-32b.yaml": "platform.jobs.qwen3-32b.yaml", "platform": "platform.yaml"}, nil},
		{"a dotted tier, a job file .yml with dots", []string{"tiers/gold.v2", "p/jobs/a.b.yml", "p"},
			map[string]string{"tiers/gold.v2": "tier.gold.v2.yaml", "p/jobs/a.b.yml": "p.jobs.a.b.yml", "p": "p.yaml"}, nil},
		{"a tenant named tier, a tier named tier and one named jobs", []string{"tier", "tiers/tier", "tiers/jobs"},
			map[string]string{"tier": "tier.yaml", "tiers/tier": "tier.tier.yaml", "tiers/jobs": "tier.jobs.yaml"}, nil},
		{"a provider named tier and its jobs", []string{"tier", "tier/jobs/q.yaml"},
			map[string]string{"tier": "tier.yaml", "tier/jobs/q.yaml": "tier.jobs.q.yaml"}, nil},
		{"one name for two entries", []string{"tier", "tier/jobs/x.yaml", "tiers/jobs.x"}, nil,
			[]string{"tier/jobs/x.yaml and tiers/jobs.x would both be the file tier.jobs.x.yaml"}},
		{"a tier read as a job of the tenant named tier", []string{"tier", "tiers/jobs.y"}, nil,
			[]string{"tiers/jobs.y: its file tier.jobs.y.yaml of the tenant limits would be read as tier/jobs/y.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FlatNames(tc.entries)
			if tc.err != nil {
				require.Error(t, err)
				for _, e := range tc.err {
					assert.Contains(t, err.Error(), e)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// writeFlat lays files out as the kubelet mounts a projected volume: in a folder of its own
// under the volume, reached through ..data, each file at the root a link into ..data.
func writeFlat(t *testing.T, root string, files map[string]string) {
	t.Helper()
	version := filepath.Join(root, "..v"+time.Now().Format("150405.000000000"))
	require.NoError(t, os.MkdirAll(version, 0o755))
	for n, s := range files {
		require.NoError(t, os.WriteFile(filepath.Join(version, n), []byte(s), 0o644))
	}
	tmp := filepath.Join(root, "..data_tmp")
	require.NoError(t, os.Symlink(filepath.Base(version), tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(root, "..data")))
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") {
			if _, ok := files[e.Name()]; !ok {
				require.NoError(t, os.Remove(filepath.Join(root, e.Name())))
			}
		}
	}
	for n := range files {
		if _, err := os.Lstat(filepath.Join(root, n)); err != nil {
			require.NoError(t, os.Symlink(filepath.Join("..data", n), filepath.Join(root, n)))
		}
	}
}

func shardFile(t *testing.T, i, of int, render string) string {
	b, err := json.Marshal(ShardFile{Shard: i, Of: of, Render: render})
	require.NoError(t, err)
	return string(b)
}

// TestFlatFolder: the flat form (tenants, a tier, a provider's job) reads as the tenants folder
// does; a folder whose shard files are not all there or not of one render is refused and the
// last good limits stay; once they agree, the change is taken.
func TestFlatFolder(t *testing.T) {
	tier := "apiVersion: inferplane.io/v1alpha1\nkind: Tier\nmetadata: {name: gold}\nspec:\n  nodeTypes: []\n  models: [Qwen/*]\n" +
		"  limits:\n    requestsPerMinute: {value: 600}\n  keyLimits:\n    requestsPerMinute: {value: 10}\n"
	tenant := func(name, extra string) string {
		return "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: " + name + "\nspec:\n  tier: gold\n" + extra
	}
	job := "apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nmetadata: {name: qwen}\nspec: {model: Qwen/Qwen3-32B, replicas: 1, gpuCount: 1, nodeType: n}\n"
	files := map[string]string{
		"acme.yaml":              tenant("acme", "  limits:\n    requestsPerMinute: {value: 60}\n    timeZone: Asia/Tokyo\n"),
		"platform.yaml":          tenant("platform", "  provider: true\n"),
		"tier.gold.yaml":         tier,
		"platform.jobs.q.yaml":   job,
		"README.md":              "not read",
		"nodetypes.x.y.yaml":     "not read either",
		ShardFileName(0):         shardFile(t, 0, 2, "r1"),
		ShardFileName(1):         shardFile(t, 1, 2, "r1"),
		"tier.gold.yaml.unknown": "not a tier",
	}
	root := t.TempDir()
	writeFlat(t, root, files)
	f := &TenantFiles{Dir: root, Interval: 10 * time.Millisecond}
	require.NoError(t, f.Load())
	acme, platform := f.Tenant("acme"), f.Tenant("platform")
	assert.Equal(t, int64(60), acme.Limits[RequestsPerMinute].Value)
	assert.Equal(t, "Asia/Tokyo", acme.Location.String())
	assert.Equal(t, int64(600), platform.Limits[RequestsPerMinute].Value, "the tier's")
	assert.Equal(t, int64(10), platform.KeyDefaults[RequestsPerMinute].Value)
	model, ok := f.Sharing().SharedCall("acme", "platform", "qwen")
	assert.True(t, ok)
	assert.Equal(t, "Qwen/Qwen3-32B", model)

	done := make(chan struct{})
	defer close(done)
	go f.Watch(done)
	for _, tc := range []struct {
		name   string
		shards map[string]string
		want   string
	}{
		{"one of two of a new render", map[string]string{ShardFileName(0): shardFile(t, 0, 2, "r2"), ShardFileName(1): shardFile(t, 1, 2, "r1")},
			"shard 1 of 2 of render r1, beside shard 0 of 2 of render r2"},
		{"the count grew, a replica mounts the old ones", map[string]string{ShardFileName(0): shardFile(t, 0, 3, "r2"), ShardFileName(1): shardFile(t, 1, 3, "r2")},
			"2 shard files, of 3: the tenant limits' ConfigMaps are being changed"},
		{"a shard twice", map[string]string{ShardFileName(0): shardFile(t, 0, 2, "r2"), ShardFileName(1): shardFile(t, 0, 2, "r2")},
			"shard 0 of 2 of render r2, beside shard 0 of 2"},
		{"a shard file that is not one", map[string]string{ShardFileName(0): "{", ShardFileName(1): shardFile(t, 1, 2, "r2")},
			ShardFileName(0) + ": unexpected end of JSON input"},
	} {
		next := map[string]string{}
		for n, s := range files {
			next[n] = s
		}
		next["acme.yaml"] = tenant("acme", "  limits:\n    requestsPerMinute: {value: 99}\n")
		for n, s := range tc.shards {
			next[n] = s
		}
		writeFlat(t, root, next)
		_, _, _, err := readTenants(root, nil)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
		time.Sleep(30 * time.Millisecond)
		assert.Equal(t, int64(60), f.Tenant("acme").Limits[RequestsPerMinute].Value, "%s: the last good limits stay", tc.name)
	}
	files["acme.yaml"] = tenant("acme", "  limits:\n    requestsPerMinute: {value: 99}\n")
	files[ShardFileName(0)], files[ShardFileName(1)] = shardFile(t, 0, 2, "r3"), shardFile(t, 1, 2, "r3")
	writeFlat(t, root, files)
	require.Eventually(t, func() bool { return f.Tenant("acme").Limits[RequestsPerMinute].Value == 99 }, 5*time.Second, 10*time.Millisecond,
		"the change is taken once every shard is of its render")

	// A tenant in both forms is refused.
	both := t.TempDir()
	writeTenant(t, both, "acme", "")
	require.NoError(t, os.WriteFile(filepath.Join(both, "acme.yaml"), []byte(tenant("acme", "")), 0o644))
	_, _, _, err := readTenants(both, nil)
	assert.ErrorContains(t, err, "tenant acme twice, in "+filepath.Join(both, "acme", "tenant.yaml")+" and in acme.yaml")

	// Without shard files (a flat folder made by hand) nothing is checked.
	delete(files, ShardFileName(0))
	delete(files, ShardFileName(1))
	writeFlat(t, root, files)
	_, _, _, err = readTenants(root, nil)
	require.NoError(t, err)
}
