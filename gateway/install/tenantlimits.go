package install

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/inferplane/inferplane/auth/limits"
)

// tenantsMount is where the xDS servers and the key checks find the tenants' limits.
const tenantsMount = "/etc/inferplane/tenants"

// LabelTenantLimits marks the ConfigMaps of the tenants' limits, by the install's name: what
// `kubectl apply --prune -l` selects to delete those a smaller fleet no longer needs.
const LabelTenantLimits = "inferplane.io/tenant-limits"

// Bounds of one ConfigMap of the tenants' limits. The API server refuses a ConfigMap over 1 MiB
// of data, and an object whose annotations pass 256 KiB: `kubectl apply` (and Argo CD, unless
// told to apply on the server) keeps the whole object, as JSON, in its last-applied annotation.
// So a ConfigMap holds at most maxShardBytes of its files as JSON (names and contents, escaped),
// which leaves room for its metadata in the annotation, and about shardTarget, so that the
// hash's unevenness rarely adds one.
const (
	maxShardBytes = 200 << 10
	shardTarget   = 160 << 10
)

// tenantLimitsConfigMaps hold Options.TenantLimits as a flat folder (limits.FlatName: a key
// cannot hold a '/'), spread over ConfigMaps <name>-tenant-limits-<i> by a hash of each file's
// name, so that a file stays in its ConfigMap while their number does not change; each also
// holds its shard file (limits.ShardFile), by which the readers take only a folder whose
// ConfigMaps are all of this render. One projected volume mounts them all (tenantLimitsVolume);
// the kubelet updates it in place, and the xDS servers and the key checks reload it.
func tenantLimitsConfigMaps(o Options) ([]*corev1.ConfigMap, error) {
	if len(o.TenantLimits) == 0 {
		return nil, nil
	}
	names, err := limits.FlatNames(slices.Collect(maps.Keys(o.TenantLimits)))
	if err != nil {
		return nil, fmt.Errorf("tenant limits: %w", err)
	}
	files := make(map[string][]byte, len(names))
	for entry, n := range names {
		files[n] = o.TenantLimits[entry]
	}
	shards, err := splitFiles(files, maxShardBytes, shardTarget)
	if err != nil {
		return nil, fmt.Errorf("tenant limits: %w", err)
	}
	render := limits.Render(files)
	out := make([]*corev1.ConfigMap, len(shards))
	for i, shard := range shards {
		m := meta(o, tenantLimitsName(o, i), "xds")
		m.Labels[LabelTenantLimits] = o.Name
		cm := &corev1.ConfigMap{TypeMeta: typeConfigMap, ObjectMeta: m, Data: make(map[string]string, len(shard)+1)}
		for n, b := range shard {
			cm.Data[n] = string(b)
		}
		mark, err := json.Marshal(limits.ShardFile{Shard: i, Of: len(shards), Render: render})
		if err != nil {
			return nil, err
		}
		cm.Data[limits.ShardFileName(i)] = string(mark) + "\n"
		out[i] = cm
	}
	return out, nil
}

func tenantLimitsName(o Options, i int) string { return o.Name + "-tenant-limits-" + strconv.Itoa(i) }

// splitFiles spreads files over the fewest shards, from total/target up, in which the hash of
// each file's name puts at most limit bytes (jsonSize, and room for a shard file).
// Pure and deterministic: the same files give the same shards.
func splitFiles(files map[string][]byte, limit, target int) ([]map[string][]byte, error) {
	const shardFileRoom = 256
	if len(files) == 0 {
		return nil, nil
	}
	total := 0
	sizes := make(map[string]int, len(files))
	for _, n := range slices.Sorted(maps.Keys(files)) {
		sizes[n] = jsonSize(n, files[n])
		if sizes[n] > limit-shardFileRoom {
			return nil, fmt.Errorf("%s is %d bytes as JSON: a ConfigMap of the tenant limits holds at most %d", n, sizes[n], limit-shardFileRoom)
		}
		total += sizes[n]
	}
	hashes := make(map[string]uint64, len(files))
	for n := range files {
		h := fnv.New64a()
		h.Write([]byte(n))
		hashes[n] = h.Sum64()
	}
	// Two files share shard i of count only when count divides their hashes' difference: few
	// counts do, so a count that fits comes soon.
	first := max(1, (total+target-1)/target)
	for count := first; count <= first+len(files); count++ {
		shardSizes := make([]int, count)
		for n := range files {
			shardSizes[hashes[n]%uint64(count)] += sizes[n]
		}
		if slices.Max(shardSizes) > limit-shardFileRoom {
			continue
		}
		shards := make([]map[string][]byte, count)
		for i := range shards {
			shards[i] = map[string][]byte{}
		}
		for n, b := range files {
			shards[hashes[n]%uint64(count)][n] = b
		}
		return shards, nil
	}
	return nil, fmt.Errorf("%d files of %d bytes: no spread over %d to %d ConfigMaps keeps each under %d bytes", len(files), total, first, first+len(files), limit)
}

// jsonSize is what a file takes in a ConfigMap as JSON: "name":"content", both escaped.
func jsonSize(name string, content []byte) int {
	n, _ := json.Marshal(name)
	c, _ := json.Marshal(string(content))
	return len(n) + len(c) + 2
}

// tenantLimitsVolume mounts the ConfigMaps as one folder: a projected volume with every key of
// each at its root (no items: the pod spec does not grow with the fleet).
func tenantLimitsVolume(o Options, shards int) corev1.Volume {
	sources := make([]corev1.VolumeProjection, shards)
	for i := range sources {
		sources[i] = corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: tenantLimitsName(o, i)}}}
	}
	return corev1.Volume{Name: "tenant-limits", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}
}

// mountTenantLimits gives a pod's container the tenants' limits at tenantsMount (when there are
// any: shards > 0).
func mountTenantLimits(o Options, shards int, c *corev1.Container, volumes *[]corev1.Volume) {
	if shards == 0 {
		return
	}
	*volumes = append(*volumes, tenantLimitsVolume(o, shards))
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tenant-limits", MountPath: tenantsMount, ReadOnly: true})
}
