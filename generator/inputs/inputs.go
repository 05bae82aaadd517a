// Package inputs loads the tenants tree (node types, hand-written masters, tenants and their
// jobs) into inferplane's v1alpha1 types. Decoding is strict, like the API server's strict field
// validation: an unknown field, a wrong type, a wrong apiVersion or kind, or a file in the wrong
// folder is a problem that names the file, the field and what was expected. Load reads through
// an fs.FS and touches nothing else.
//
// The layout (docs/design.md, "Input layout"):
//
//	nodetypes/<any>.yaml        kind: NodeType
//	masters/<any>.yaml          kind: ModelMaster
//	tiers/<any>.yaml            kind: Tier
//	<tenant>/tenant.yaml        kind: Tenant (metadata.name == <tenant>)
//	<tenant>/jobs/<any>.yaml    kind: ManagedInferenceJob
//
// Hidden entries (.git, .DS_Store) and files that are not YAML (README.md) are ignored.
package inputs

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/policy"
)

// Folder names with a fixed meaning at the top of the tenants tree; no tenant may take them.
const (
	NodeTypesDir = "nodetypes"
	MastersDir   = "masters"
	TiersDir     = "tiers"
	JobsDir      = "jobs"
	TenantFile   = "tenant.yaml"
)

// MaxFileSize bounds one input file; inputs are small hand-written objects.
const MaxFileSize = 1 << 20

// Inputs is the tenants tree, each object decoded and checked on its own, and each tenant with
// its tier applied (policy.ApplyTier). Other cross-object rules (references, quotas, layouts)
// are the plan's job.
type Inputs struct {
	// NodeTypes, Masters, Tiers and Tenants are sorted by name (then file).
	NodeTypes []NodeType
	Masters   []Master
	Tiers     []Tier
	Tenants   []Tenant
	// HasTiers says the tree has a tiers/ folder: every tenant then names one of its tiers.
	// Without it, a tenant's tier is only a name (no node types, quota, limits or models come
	// from it).
	HasTiers bool
}

// TierNamed is the tier of that name, or nil.
func (in *Inputs) TierNamed(name string) *v1alpha1.Tier {
	for i := range in.Tiers {
		if t := &in.Tiers[i].Object; t.Name == name {
			return t
		}
	}
	return nil
}

// Tenant is the tenant of that name, or nil.
func (in *Inputs) Tenant(name string) *v1alpha1.Tenant {
	for i := range in.Tenants {
		if t := &in.Tenants[i].Object; t.Name == name {
			return t
		}
	}
	return nil
}

// NodeType is a NodeType and the file it came from.
type NodeType struct {
	File   string
	Object v1alpha1.NodeType
}

// Master is a hand-written ModelMaster and the file it came from.
type Master struct {
	File   string
	Object v1alpha1.ModelMaster
}

// Tier is a Tier and the file it came from.
type Tier struct {
	File   string
	Object v1alpha1.Tier
}

// Tenant is a Tenant, the file it came from and its jobs.
type Tenant struct {
	File string
	// Object is the tenant in force: as written, with its tier applied (policy.ApplyTier): the
	// node types, models, quota and limits every rule and render reads.
	Object v1alpha1.Tenant
	// Written is the tenant as its file says it (no tier applied).
	Written v1alpha1.Tenant
	// Tier is the tier it names; nil when the inputs define no tiers.
	Tier *v1alpha1.Tier
	// Jobs are sorted by name (then file).
	Jobs []Job
}

// Job is a ManagedInferenceJob and the file it came from.
type Job struct {
	File   string
	Object v1alpha1.ManagedInferenceJob
}

// Load reads the tenants tree at the root of fsys. root is how the operator names that folder
// (e.g. "tenants"); it prefixes the file names in problems. All problems of the tree are
// returned together as a problem.Errors; on any problem the Inputs is nil.
func Load(fsys fs.FS, root string) (*Inputs, error) {
	l := &loader{fsys: fsys, root: root}
	in := l.load()
	if err := l.problems.Err(); err != nil {
		return nil, err
	}
	return in, nil
}

// LoadNodeTypes reads only the nodetypes/ folder of a tenants tree (for `recipe show`, which
// must not fail over an unrelated broken job file). A missing folder gives no node types.
func LoadNodeTypes(fsys fs.FS, root string) ([]NodeType, error) {
	l := &loader{fsys: fsys, root: root}
	var in Inputs
	if _, err := fs.Stat(fsys, NodeTypesDir); err == nil {
		l.loadReserved(&in, NodeTypesDir)
		checkDuplicates(&l.problems, "node type", in.NodeTypes, func(n NodeType) (string, string) {
			return n.Object.Name, n.File
		})
	}
	if err := l.problems.Err(); err != nil {
		return nil, err
	}
	sortByName(in.NodeTypes, func(n NodeType) (string, string) { return n.Object.Name, n.File })
	return in.NodeTypes, nil
}

type loader struct {
	fsys     fs.FS
	root     string
	problems problem.List
}

// display turns a path inside fsys into the name the operator knows the file by.
func (l *loader) display(p string) string {
	if l.root == "" {
		return p
	}
	return path.Join(l.root, p)
}

func (l *loader) add(p string, path *field.Path, expected, format string, args ...any) {
	l.problems.Add(l.display(p), path, expected, format, args...)
}

// addErrors records the field errors of a rule (the policy's) found in file p.
func (l *loader) addErrors(p string, errs field.ErrorList) {
	l.problems.AddError(l.display(p), errs...)
}

func (l *loader) load() *Inputs {
	in := &Inputs{}
	entries, err := fs.ReadDir(l.fsys, ".")
	if err != nil {
		l.add(".", nil, "a folder with nodetypes/, masters/, tiers/ and one folder per tenant", "cannot read: %v", pathErr(err))
		return in
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case ignored(name):
		case !e.IsDir():
			if isYAML(name) {
				l.add(name, nil, "nodetypes/<name>.yaml, masters/<name>.yaml, tiers/<name>.yaml or <tenant>/tenant.yaml",
					"unexpected file at the top of the tenants folder")
			}
		case name == NodeTypesDir || name == MastersDir || name == TiersDir:
			in.HasTiers = in.HasTiers || name == TiersDir
			l.loadReserved(in, name)
		default:
			l.loadTenant(in, name)
		}
	}

	nodeTypeKey := func(n NodeType) (string, string) { return n.Object.Name, n.File }
	masterKey := func(m Master) (string, string) { return m.Object.Name, m.File }
	tierKey := func(t Tier) (string, string) { return t.Object.Name, t.File }
	tenantKey := func(t Tenant) (string, string) { return t.Object.Name, t.File }
	jobKey := func(j Job) (string, string) { return j.Object.Name, j.File }
	checkDuplicates(&l.problems, "node type", in.NodeTypes, nodeTypeKey)
	checkDuplicates(&l.problems, "master", in.Masters, masterKey)
	checkDuplicates(&l.problems, "tier", in.Tiers, tierKey)
	checkDuplicates(&l.problems, "tenant", in.Tenants, tenantKey)
	sortByName(in.NodeTypes, nodeTypeKey)
	sortByName(in.Masters, masterKey)
	sortByName(in.Tiers, tierKey)
	sortByName(in.Tenants, tenantKey)
	for i := range in.Tenants {
		checkDuplicates(&l.problems, "job", in.Tenants[i].Jobs, jobKey)
		sortByName(in.Tenants[i].Jobs, jobKey)
		l.applyTier(in, &in.Tenants[i])
	}
	return in
}

// applyTier gives a tenant its tier (policy.ApplyTier) when the inputs define tiers: a tier
// that does not exist, or a tenant list that widens its tier's, is a problem of the tenant's
// file.
func (l *loader) applyTier(in *Inputs, t *Tenant) {
	t.Written = *t.Object.DeepCopy()
	if !in.HasTiers || t.Object.Spec.Tier == "" {
		return
	}
	tier := in.TierNamed(t.Object.Spec.Tier)
	if tier == nil {
		names := make([]string, len(in.Tiers))
		for i := range in.Tiers {
			names[i] = in.Tiers[i].Object.Name
		}
		l.problems.AddError(t.File, fielderr.NotFound(specPath.Child("tier"), t.Object.Spec.Tier,
			fmt.Sprintf("no Tier %q in %s/ (the tiers: %s)", t.Object.Spec.Tier, l.display(TiersDir), fielderr.List(names)), names))
		return
	}
	applied, errs := policy.ApplyTier(&t.Object, tier)
	l.problems.AddError(t.File, errs...)
	t.Object, t.Tier = *applied, tier
}

// loadReserved reads nodetypes/, masters/ or tiers/: flat folders of one kind.
func (l *loader) loadReserved(in *Inputs, dir string) {
	want := map[string]string{NodeTypesDir: v1alpha1.KindNodeType, MastersDir: v1alpha1.KindModelMaster, TiersDir: v1alpha1.KindTier}[dir]
	entries, err := fs.ReadDir(l.fsys, dir)
	if err != nil {
		l.add(dir, nil, "a readable folder", "cannot read: %v", pathErr(err))
		return
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		switch {
		case ignored(e.Name()):
		case e.IsDir():
			if e.Name() == JobsDir {
				l.add(p, nil, "a tenant folder with another name", "%q is reserved for %s files: a tenant cannot be named %s", dir, want, dir)
				continue
			}
			l.add(p, nil, fmt.Sprintf("only %s files directly in %s/", want, dir), "unexpected folder")
		case isYAML(e.Name()):
			data, ok := l.read(p)
			if !ok {
				continue
			}
			switch want {
			case v1alpha1.KindNodeType:
				var nt v1alpha1.NodeType
				if l.decode(p, data, dir, want, &nt) {
					l.checkNodeType(p, &nt)
					in.NodeTypes = append(in.NodeTypes, NodeType{File: l.display(p), Object: nt})
				}
			case v1alpha1.KindTier:
				var t v1alpha1.Tier
				if l.decode(p, data, dir, want, &t) {
					l.checkTier(p, &t)
					in.Tiers = append(in.Tiers, Tier{File: l.display(p), Object: t})
				}
			default:
				var m v1alpha1.ModelMaster
				if l.decode(p, data, dir, want, &m) {
					l.checkMaster(p, &m)
					in.Masters = append(in.Masters, Master{File: l.display(p), Object: m})
				}
			}
		}
	}
}

// loadTenant reads <tenant>/tenant.yaml and <tenant>/jobs/*.yaml.
func (l *loader) loadTenant(in *Inputs, dir string) {
	entries, err := fs.ReadDir(l.fsys, dir)
	if err != nil {
		l.add(dir, nil, "a readable tenant folder", "cannot read: %v", pathErr(err))
		return
	}
	if msgs := dns1123Label(dir); msgs != "" {
		l.add(dir, nil, "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters), e.g. acme",
			"tenant folder name %q is not valid: %s", dir, msgs)
	}
	var tenants []Tenant
	var jobs []Job
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		switch {
		case ignored(e.Name()):
		case e.IsDir() && e.Name() == JobsDir:
			jobs = l.loadJobs(dir)
		case e.IsDir():
			l.add(p, nil, fmt.Sprintf("only %s and %s/ in a tenant folder", TenantFile, JobsDir), "unexpected folder")
		case e.Name() == TenantFile || e.Name() == "tenant.yml":
			data, ok := l.read(p)
			if !ok {
				continue
			}
			var t v1alpha1.Tenant
			if l.decode(p, data, dir, v1alpha1.KindTenant, &t) {
				if t.Name != "" && t.Name != dir {
					l.add(p, field.NewPath("metadata", "name"), fmt.Sprintf("%q, the name of the tenant's folder", dir),
						"is %q, but the file is in folder %q", t.Name, dir)
				}
				l.checkTenant(p, &t)
				tenants = append(tenants, Tenant{File: l.display(p), Object: t})
			}
		case isYAML(e.Name()):
			hint := fmt.Sprintf("only %s and %s/<job>.yaml in a tenant folder", TenantFile, JobsDir)
			l.add(p, nil, hint, "unexpected file")
		}
	}
	if len(tenants) == 0 {
		if !l.hasProblemsUnder(dir) {
			l.add(path.Join(dir, TenantFile), nil, "a Tenant object named "+dir,
				"missing: every tenant folder needs a %s", TenantFile)
		}
		return
	}
	for i := range tenants {
		tenants[i].Jobs = jobs
	}
	in.Tenants = append(in.Tenants, tenants...)
}

func (l *loader) loadJobs(tenant string) []Job {
	dir := path.Join(tenant, JobsDir)
	entries, err := fs.ReadDir(l.fsys, dir)
	if err != nil {
		l.add(dir, nil, "a readable folder", "cannot read: %v", pathErr(err))
		return nil
	}
	var jobs []Job
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		switch {
		case ignored(e.Name()):
		case e.IsDir():
			l.add(p, nil, "only ManagedInferenceJob files directly in "+dir+"/", "unexpected folder")
		case isYAML(e.Name()):
			data, ok := l.read(p)
			if !ok {
				continue
			}
			var j v1alpha1.ManagedInferenceJob
			if l.decode(p, data, dir, v1alpha1.KindManagedInferenceJob, &j) {
				l.checkJob(p, tenant, &j)
				jobs = append(jobs, Job{File: l.display(p), Object: j})
			}
		}
	}
	return jobs
}

func (l *loader) read(p string) ([]byte, bool) {
	if info, err := fs.Stat(l.fsys, p); err == nil && info.Size() > MaxFileSize {
		l.add(p, nil, fmt.Sprintf("at most %d bytes", MaxFileSize), "file is %d bytes", info.Size())
		return nil, false
	}
	data, err := fs.ReadFile(l.fsys, p)
	if err != nil {
		l.add(p, nil, "a readable file", "cannot read: %v", pathErr(err))
		return nil, false
	}
	if len(data) > MaxFileSize {
		l.add(p, nil, fmt.Sprintf("at most %d bytes", MaxFileSize), "file is %d bytes", len(data))
		return nil, false
	}
	return data, true
}

func (l *loader) hasProblemsUnder(dir string) bool {
	prefix := l.display(dir) + "/"
	return slices.ContainsFunc(l.problems, func(p problem.Problem) bool { return strings.HasPrefix(p.File, prefix) })
}

// pathErr drops the path an fs error repeats, since the problem names the file already.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func ignored(name string) bool { return strings.HasPrefix(name, ".") }

func isYAML(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// checkDuplicates reports every object whose name an earlier file (in path order) already used.
func checkDuplicates[T any](ps *problem.List, what string, items []T, key func(T) (name, file string)) {
	first := map[string]string{}
	sorted := slices.Clone(items)
	slices.SortFunc(sorted, func(a, b T) int {
		_, fa := key(a)
		_, fb := key(b)
		return cmp.Compare(fa, fb)
	})
	for _, it := range sorted {
		name, file := key(it)
		if name == "" {
			continue
		}
		if prev, ok := first[name]; ok {
			ps.Add(file, field.NewPath("metadata", "name"), "a name no other "+what+" uses",
				"duplicate %s name %q, also defined in %s", what, name, prev)
			continue
		}
		first[name] = file
	}
}

func sortByName[T any](items []T, key func(T) (name, file string)) {
	slices.SortStableFunc(items, func(a, b T) int {
		na, fa := key(a)
		nb, fb := key(b)
		return cmp.Or(cmp.Compare(na, nb), cmp.Compare(fa, fb))
	})
}
