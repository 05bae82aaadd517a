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
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/recipe"
)

// Path is where a new job's file goes, relative to the tenants folder.
func Path(tenant, job string) string {
	return path.Join(tenant, inputs.JobsDir, job+".yaml")
}

// CheckName says what is wrong with a tenant or job name given on the command line, before it
// becomes part of a path.
func CheckName(what, name string) error {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return fmt.Errorf("%s %q: expected a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters, e.g. chat): %s",
			what, name, strings.Join(msgs, "; "))
	}
	return nil
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
	if s := recipe.Suggest(tenant, names); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return fmt.Errorf("%s (tenants: %s)", msg, orNone(names))
}

// Encode is the YAML of a new job file: the job as an operator would write it.
func Encode(job string, spec v1alpha1.ManagedInferenceJobSpec) ([]byte, error) {
	return EncodeInput(v1alpha1.KindManagedInferenceJob, job, spec,
		"# Written by `inferplane jobs create`; edit it like any job file.\n")
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
// count: a hand-written master's, Parakeet's, or the one its recipe derives for the node
// type. ok is false when the master cannot be resolved; the plan then says why.
func GPUs(in *inputs.Inputs, book *recipe.Book, spec *v1alpha1.ManagedInferenceJobSpec) (n int32, ok bool) {
	for _, m := range in.Masters {
		if m.Object.Name == spec.Model {
			return m.Object.Spec.PerReplicaGPUCount, true
		}
	}
	if spec.EffectiveRuntime() == v1alpha1.RuntimeParakeet {
		return recipe.Parakeet().Spec.PerReplicaGPUCount, true
	}
	if book == nil {
		return 0, false
	}
	for _, nt := range in.NodeTypes {
		if nt.Object.Name != spec.NodeType || nt.Object.Spec.HardwareProfile == "" {
			continue
		}
		m, err := book.Derive(recipe.Request{ModelID: spec.Model, Variant: spec.Variant, Strategy: spec.Strategy,
			Features: spec.Features, Hardware: recipe.HardwareOf(&nt.Object.Spec)})
		if err != nil {
			return 0, false
		}
		return m.Spec.PerReplicaGPUCount, true
	}
	return 0, false
}

// Tree is the tenants folder read into memory, hidden entries left out as the loader leaves
// them out, so a change can be checked before anything is written.
func Tree(dir string) (fstest.MapFS, error) {
	out := fstest.MapFS{}
	src := os.DirFS(dir)
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case p != "." && strings.HasPrefix(d.Name(), "."):
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
	if err != nil {
		return nil, fmt.Errorf("read the tenants folder %s: %w", dir, err)
	}
	return out, nil
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
		if s := recipe.Suggest(job, jobs); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return "", fmt.Errorf("%s (jobs: %s)", msg, orNone(jobs))
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

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(slices.Values(names)), ", ")
}
