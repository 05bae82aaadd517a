// Package jobfile changes the job files of a tenants tree (tenants/<tenant>/jobs/<job>.yaml)
// for the jobs commands. A change is first made to an in-memory copy of the tree, which the
// generator checks and renders; only a change that passed is written to disk, atomically.
package jobfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing/fstest"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/suggest"
	"github.com/inferplane/inferplane/policy"
)

// Path is where a new job's file goes, relative to the tenants folder.
func Path(tenant, job string) string {
	return path.Join(tenant, inputs.JobsDir, job+".yaml")
}

// CheckName says what is wrong with a tenant's name (what: "tenant") given on the command
// line, before it becomes part of a path.
func CheckName(what, name string) error {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return fmt.Errorf("%s %q: expected a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters, e.g. chat): %s",
			what, name, strings.Join(msgs, "; "))
	}
	return nil
}

// CheckJobName says what is wrong with a job's name given on the command line, by the policy's
// name rule (policy.CheckJobName) for a job of replicas replicas (0: not known yet) on one node:
// the words generate and the webhook use.
func CheckJobName(name string, replicas int32) error {
	errs := policy.CheckJobName(field.NewPath("metadata", "name"), name, replicas, 1)
	if len(errs) == 0 {
		return nil
	}
	details := make([]string, len(errs))
	for i, e := range errs {
		details[i] = e.Detail
	}
	return fmt.Errorf("job %q: %s", name, strings.Join(details, "; "))
}

// CheckTenant says whether dir holds a tenant folder of that name, and if not, which tenants
// there are and which one was perhaps meant.
func CheckTenant(dir, tenant string) error {
	if _, err := os.Stat(filepath.Join(dir, tenant, inputs.TenantFile)); err == nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("tenants folder %s: %w (pass --tenants)", dir, err)
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), inputs.TenantFile)); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	msg := fmt.Sprintf("unknown tenant %q: no %s in %s", tenant, path.Join(tenant, inputs.TenantFile), dir)
	return fmt.Errorf("%s%s (tenants: %s)", msg, suggest.DidYouMean(suggest.Close(tenant, names)), fielderr.List(slices.Sorted(slices.Values(names))))
}

// CLIHeader is the first line of a job file `inferplane jobs create` writes.
const CLIHeader = "# Written by `inferplane jobs create`; edit it like any job file.\n"

// Encode is the YAML of a new job file: the job as an operator would write it.
func Encode(job string, spec v1alpha1.ManagedInferenceJobSpec) ([]byte, error) {
	return EncodeInput(v1alpha1.KindManagedInferenceJob, job, spec, CLIHeader)
}

// EncodeInput is the YAML of an input file of the tenants tree: header (comment lines), then
// apiVersion, kind, metadata with the name alone, and spec; nothing the API server sets.
func EncodeInput(kind, name string, spec any, header string) ([]byte, error) {
	obj := struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec any `json:"spec"`
	}{APIVersion: v1alpha1.GroupVersion.String(), Kind: kind, Spec: spec}
	obj.Metadata.Name = name
	body, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return append([]byte(header), body...), nil
}

// GPUs is the perReplicaGPUCount of the master a job would run, for a job that names no GPU
// count: the master the plan resolves for it (plan.Resolver). ok is false when the master
// cannot be resolved; the plan then says why.
func GPUs(in *inputs.Inputs, book *recipe.Book, spec *v1alpha1.ManagedInferenceJobSpec) (n int32, ok bool) {
	r := plan.NewResolver(in, book)
	m, _, errs := r.Master(&v1alpha1.ManagedInferenceJob{Spec: *spec}, r.NodeType(spec.NodeType))
	if m == nil || len(errs) > 0 {
		return 0, false
	}
	return m.Spec.PerReplicaGPUCount, true
}

// Tree is what one tenant's run reads of the tenants folder (generator.OnlyTenant), read into
// memory, hidden entries left out as the loader leaves them out, so a change can be checked
// before anything is written: the node types, the hand-written masters, the tiers and the
// tenant's own folder. The other tenants' folders are not read: a job's change costs what its tenant holds.
func Tree(dir, tenant string) (fstest.MapFS, error) {
	out := fstest.MapFS{}
	src := os.DirFS(dir)
	for _, top := range []string{inputs.NodeTypesDir, inputs.MastersDir, inputs.TiersDir, tenant} {
		if _, err := fs.Stat(src, top); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := readInto(out, src, top); err != nil {
			return nil, fmt.Errorf("read the tenants folder %s: %w", dir, err)
		}
	}
	return out, nil
}

// readInto reads the files below root of src into out.
func readInto(out fstest.MapFS, src fs.FS, root string) error {
	return fs.WalkDir(src, root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case d.IsDir():
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > inputs.MaxFileSize {
			// The loader refuses it with its own message; an empty stand-in keeps the
			// problem visible without reading a huge file.
			out[p] = &fstest.MapFile{Data: make([]byte, inputs.MaxFileSize+1)}
			return nil
		}
		data, err := fs.ReadFile(src, p)
		out[p] = &fstest.MapFile{Data: data, Mode: 0o644} // a linked file reads as the file it links to
		return err
	})
}

// Find returns the file (relative to the tenants folder) that defines a tenant's job, found
// by the job's name as the loader reads it.
func Find(in *inputs.Inputs, root, tenant, job string) (string, error) {
	var jobs []string
	for _, t := range in.Tenants {
		if t.Object.Name != tenant {
			continue
		}
		for _, j := range t.Jobs {
			if j.Object.Name == job {
				rel, ok := strings.CutPrefix(j.File, strings.TrimSuffix(filepath.ToSlash(root), "/")+"/")
				if !ok {
					return "", fmt.Errorf("job %s/%s: file %s is outside %s", tenant, job, j.File, root)
				}
				return rel, nil
			}
			jobs = append(jobs, j.Object.Name)
		}
		msg := fmt.Sprintf("tenant %s has no job %q", tenant, job)
		return "", fmt.Errorf("%s%s (jobs: %s)", msg, suggest.DidYouMean(suggest.Close(job, jobs)), fielderr.List(slices.Sorted(slices.Values(jobs))))
	}
	return "", fmt.Errorf("unknown tenant %q", tenant)
}

// Write writes a job file atomically (a temporary file renamed over it), making the jobs
// folder when needed.
func Write(dir, rel string, data []byte) error {
	full := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(full), ".job-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), full)
}

// Remove deletes a job file, and its jobs folder when that is left empty.
func Remove(dir, rel string) error {
	full := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.Remove(full); err != nil {
		return err
	}
	parent := filepath.Dir(full)
	if entries, err := os.ReadDir(parent); err == nil && len(entries) == 0 && filepath.Base(parent) == inputs.JobsDir {
		if err := os.Remove(parent); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Complete fills what a new job left to defaults, as `jobs create` and the product API derive
// them: the runtime of the Parakeet model, the tenant's only allowed node type (not a
// wildcard), the GPUs per replica of the master the plan resolves for it. Anything it cannot
// resolve is left for the plan to report, in generate's words.
func Complete(spec *v1alpha1.ManagedInferenceJobSpec, in *inputs.Inputs, book *recipe.Book, tenant string) {
	if spec.Runtime == "" && spec.Model == v1alpha1.ParakeetModel {
		spec.Runtime = v1alpha1.RuntimeParakeet
	}
	if spec.NodeType == "" {
		for _, t := range in.Tenants {
			if a := t.Object.Spec.AllowedNodeTypes; t.Object.Name == tenant && len(a) == 1 && !strings.HasSuffix(a[0], ".*") {
				spec.NodeType = a[0]
			}
		}
	}
	if spec.GPUCount == 0 {
		spec.GPUCount = 1 // a placeholder the plan corrects in its message when the master is unknown
		if n, ok := GPUs(in, book, spec); ok {
			spec.GPUCount = n
		}
	}
}

// ExistsError is a new job whose name one of the tenant's jobs has already; File is that
// job's file (root joined to its path below the tenants folder).
type ExistsError struct{ Tenant, Job, File string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("job %s/%s exists (%s)", e.Tenant, e.Job, e.File)
}

// NewJob is a new job's file, as `jobs create` and the product API write it.
type NewJob struct {
	// Rel is where it goes, relative to the tenants folder: Path, or the file of the job it
	// replaces.
	Rel string
	// Spec is the job's spec with what it left to defaults filled (Complete).
	Spec v1alpha1.ManagedInferenceJobSpec
	// Data is the file: header, then the job (EncodeInput).
	Data []byte
}

// New makes a new job's file for the tenants folder at root, whose inputs (in, book) are
// loaded: a job of that name that exists is an *ExistsError, unless replace (its file is then
// written over). Anything the spec gets wrong is left for the plan to report, in generate's
// words.
func New(in *inputs.Inputs, book *recipe.Book, root, tenant, job string, spec v1alpha1.ManagedInferenceJobSpec, header string, replace bool) (NewJob, error) {
	nj := NewJob{Rel: Path(tenant, job), Spec: spec}
	if existing, err := Find(in, root, tenant, job); err == nil {
		if !replace {
			return NewJob{}, &ExistsError{Tenant: tenant, Job: job, File: path.Join(filepath.ToSlash(root), existing)}
		}
		nj.Rel = existing
	}
	Complete(&nj.Spec, in, book, tenant)
	var err error
	nj.Data, err = EncodeInput(v1alpha1.KindManagedInferenceJob, job, nj.Spec, header)
	return nj, err
}
