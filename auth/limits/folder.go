package limits

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A --limits-tenants folder comes in two forms, read alike (and mixed, though nothing writes
// that):
//   - a tenants folder, the generator's input: <tenant>/tenant.yaml, tiers/<tier>.yaml and
//     <tenant>/jobs/<file>;
//   - flat, as the gateway's install mounts it: every key of its ConfigMaps at the root of one
//     projected volume (a ConfigMap's keys cannot hold a '/'): <tenant>.yaml,
//     tier.<tier>.yaml and <tenant>.jobs.<file> (FlatName), and a shard file per ConfigMap
//     (.shard-<i>, ShardFile) that tells a folder whose ConfigMaps are all of one render.
//
// A tenant's name is a DNS label (no dot), so a name with a dot is a flat file and one without
// is a folder.

// file is a tenant's file (name: the tenant) or a job file (name: the file's name in jobs/).
type file struct{ name, path string }

// folder is what a --limits-tenants folder holds, by kind.
type folder struct {
	dir     string
	tenants []file
	tiers   []string
	// flatJobs are the flat form's job files by tenant; a tenants folder's are read from
	// <tenant>/jobs/ when asked for (only providers' jobs are read).
	flatJobs map[string][]file
	shards   []string
}

// scanFolder lists the folder's files; nothing is parsed but the shard files' names.
func scanFolder(dir string) (*folder, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("tenants folder: %w", err)
	}
	f := &folder{dir: dir}
	var flat []string
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, shardPrefix):
			f.shards = append(f.shards, filepath.Join(dir, n))
		case strings.HasPrefix(n, "."):
			// A mounted volume's ..data and its versions.
		case strings.Contains(n, "."):
			flat = append(flat, n)
		case n == tiersDir:
			f.tiers = append(f.tiers, tierFiles(dir)...)
		default:
			// A volume's folders are symbolic links: Stat follows them.
			p := filepath.Join(dir, n, "tenant.yaml")
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				f.tenants = append(f.tenants, file{n, p})
			} // nodetypes/, masters/: not tenants
		}
	}
	c := classifyFlat(flat)
	for _, t := range f.tenants {
		if n, ok := c.tenants[t.name]; ok {
			return nil, fmt.Errorf("tenants folder %s: tenant %s twice, in %s and in %s", dir, t.name, t.path, n)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(c.tenants)) {
		f.tenants = append(f.tenants, file{t, filepath.Join(dir, c.tenants[t])})
	}
	for _, t := range slices.Sorted(maps.Keys(c.tiers)) {
		f.tiers = append(f.tiers, filepath.Join(dir, c.tiers[t]))
	}
	f.flatJobs = map[string][]file{}
	for t, jobs := range c.jobs {
		for _, j := range slices.Sorted(maps.Keys(jobs)) {
			f.flatJobs[t] = append(f.flatJobs[t], file{j, filepath.Join(dir, jobs[j])})
		}
	}
	return f, nil
}

// jobFiles are the job files of tenant.
func (f *folder) jobFiles(tenant string) []file {
	out := slices.Clone(f.flatJobs[tenant])
	for _, p := range jobFiles(f.dir, tenant) {
		out = append(out, file{filepath.Base(p), p})
	}
	return out
}

// stampFiles are the files whose names, sizes and times tell a change: every tenant's, tier's
// and shard file, and the job files of providers.
func (f *folder) stampFiles(providers []string) []string {
	out := slices.Clone(f.shards)
	for _, t := range f.tenants {
		out = append(out, t.path)
	}
	out = append(out, f.tiers...)
	for _, p := range providers {
		for _, j := range f.jobFiles(p) {
			out = append(out, j.path)
		}
	}
	return out
}

// flatFiles are a flat folder's file names by kind: tenant -> file, tier -> file, tenant ->
// job file -> file.
type flatFiles struct {
	tenants, tiers map[string]string
	jobs           map[string]map[string]string
}

// classifyFlat sorts the names of a flat folder: <tenant>.yaml, tier.<tier>.yaml and
// <tenant>.jobs.<file>. A tier's name may hold dots: tier.jobs.<x> is a job of a tenant named
// tier when there is one, else a tier (FlatNames refuses what both would claim). A name of
// none of these forms is not read.
func classifyFlat(names []string) flatFiles {
	c := flatFiles{tenants: map[string]string{}, tiers: map[string]string{}, jobs: map[string]map[string]string{}}
	for _, n := range names {
		head, rest, _ := strings.Cut(n, ".")
		if rest == "yaml" {
			c.tenants[head] = n
		}
	}
	for _, n := range names {
		head, rest, _ := strings.Cut(n, ".")
		job, isJob := strings.CutPrefix(rest, jobsDir+".")
		isJob = isJob && isYAML(job) && !strings.HasPrefix(job, ".")
		switch {
		case rest == "yaml" || head == "":
		case isJob && (head != tierPrefix || c.tenants[tierPrefix] != ""):
			if c.jobs[head] == nil {
				c.jobs[head] = map[string]string{}
			}
			c.jobs[head][job] = n
		case head == tierPrefix && strings.HasSuffix(rest, ".yaml") && rest != ".yaml":
			c.tiers[strings.TrimSuffix(rest, ".yaml")] = n
		}
	}
	return c
}

// tierPrefix begins a tier's flat file name.
const tierPrefix = "tier"

func isYAML(n string) bool { return strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml") }

// FlatName is the flat folder's name of an entry of TenantFilesWithLimits: <tenant>.yaml for
// a tenant, tier.<tier>.yaml for "tiers/<tier>", <tenant>.jobs.<file> for
// "<tenant>/jobs/<file>".
func FlatName(entry string) string {
	if tier, ok := strings.CutPrefix(entry, tiersDir+"/"); ok {
		return tierPrefix + "." + tier + ".yaml"
	}
	if tenant, job, ok := strings.Cut(entry, "/"+jobsDir+"/"); ok {
		return tenant + "." + jobsDir + "." + job
	}
	return entry + ".yaml"
}

// FlatNames is FlatName of every entry, checked: a flat folder of these names is read back as
// the same entries (no two entries share a name, none is read as another kind).
func FlatNames(entries []string) (map[string]string, error) {
	out := make(map[string]string, len(entries))
	byName := map[string]string{}
	var errs []error
	for _, e := range slices.Sorted(slices.Values(entries)) {
		n := FlatName(e)
		if other, ok := byName[n]; ok {
			errs = append(errs, fmt.Errorf("%s and %s would both be the file %s of the tenant limits: rename one", other, e, n))
			continue
		}
		byName[n], out[e] = e, n
	}
	c := classifyFlat(slices.Collect(maps.Keys(byName)))
	back := map[string]string{}
	for t, n := range c.tenants {
		back[n] = t
	}
	for t, n := range c.tiers {
		back[n] = tiersDir + "/" + t
	}
	for t, jobs := range c.jobs {
		for j, n := range jobs {
			back[n] = t + "/" + jobsDir + "/" + j
		}
	}
	for _, e := range slices.Sorted(maps.Keys(out)) {
		if got := back[out[e]]; got != e {
			errs = append(errs, fmt.Errorf("%s: its file %s of the tenant limits would be read as %s: rename the tenant or the tier",
				e, out[e], cmp.Or(got, "nothing")))
		}
	}
	return out, errors.Join(errs...)
}

// ShardFile is the file each ConfigMap of the flat form carries, at .shard-<i>: which of how
// many it is, and the render all of them come from. A flat folder with shard files is read
// only when they are all there and of one render: while a change is applied, one ConfigMap
// at a time, or while a replica still mounts the ConfigMaps of the install before (their
// count changed), the last good limits stay.
type ShardFile struct {
	Shard  int    `json:"shard"`
	Of     int    `json:"of"`
	Render string `json:"render"`
}

// shardPrefix begins a shard file's name.
const shardPrefix = ".shard-"

// ShardFileName is shard i's file name.
func ShardFileName(i int) string { return shardPrefix + strconv.Itoa(i) }

// Render names a set of flat files by their names and contents: what every shard file of one
// render carries.
func Render(files map[string][]byte) string {
	h := sha256.New()
	for _, n := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%d:%s%d:", len(n), n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// errChanging is a flat folder whose ConfigMaps are being changed: the next check most likely
// finds them of one render.
var errChanging = errors.New("the tenant limits' ConfigMaps are being changed")

// checkShards reports a flat folder whose shard files are not all there or not of one render.
func (f *folder) checkShards() error {
	if len(f.shards) == 0 {
		return nil
	}
	var first *ShardFile
	seen := map[int]bool{}
	for _, p := range f.shards {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not a file (a volume's link being replaced): the count below tells
		}
		var s ShardFile
		if err == nil {
			err = json.Unmarshal(data, &s)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if first == nil {
			first = &s
		}
		if s.Of != first.Of || s.Render != first.Render || seen[s.Shard] || s.Shard < 0 || s.Shard >= s.Of {
			return fmt.Errorf("%s: shard %d of %d of render %s, beside shard %d of %d of render %s: %w",
				p, s.Shard, s.Of, s.Render, first.Shard, first.Of, first.Render, errChanging)
		}
		seen[s.Shard] = true
	}
	if first == nil || len(seen) != first.Of {
		return fmt.Errorf("%s: %d shard files, of %d: %w", f.dir, len(seen), cmp.Or(first, &ShardFile{}).Of, errChanging)
	}
	return nil
}
