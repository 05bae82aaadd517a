package limits

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Sharing is the shared serving tier as the key check reads it from the tenants folder, beside
// the limits: every tenant as in force (its tier's catalogue, narrowed by its own list), and
// the model each endpoint of a provider tenant serves (its job file's spec.model).
type Sharing struct {
	tenants map[string]*v1alpha1.Tenant
	models  map[string]map[string]string // provider -> job -> model
}

// SharedCall reports whether a key of tenant caller may call the endpoint job of tenant
// (policy.SharedCallAllowed), and the model it serves. A nil Sharing allows none.
func (s *Sharing) SharedCall(caller, tenant, job string) (model string, ok bool) {
	if s == nil {
		return "", false
	}
	model = s.models[tenant][job]
	return model, policy.SharedCallAllowed(s.tenants[tenant], s.tenants[caller], model)
}

// Shared lists what provider tenants share: by provider, job and model.
func (s *Sharing) Shared(fn func(provider, job, model string)) {
	if s == nil {
		return
	}
	for p, jobs := range s.models {
		for j, m := range jobs {
			fn(p, j, m)
		}
	}
}

// add records tenant name (its tier applied) and, for a provider, its jobs.
// A tenant whose own lists widen its tier gets the tier's (the generator refuses such a file;
// here the wider list is never the one applied).
func (s *Sharing) add(name string, t *v1alpha1.Tenant, tier *v1alpha1.Tier, jobFiles []file) error {
	inForce := t.DeepCopy()
	if tier != nil {
		inForce, _ = policy.ApplyTier(t, tier)
	}
	inForce.Name = name
	s.tenants[name] = inForce
	if !t.Spec.Provider {
		return nil
	}
	jobs := map[string]string{}
	for _, f := range jobFiles {
		p := f.path
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var j v1alpha1.ManagedInferenceJob
		if err := yaml.UnmarshalStrict(data, &j); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if j.Name == "" || j.Spec.Model == "" {
			return fmt.Errorf("%s: a job of provider tenant %s needs metadata.name and spec.model (the model it shares)", p, name)
		}
		jobs[j.Name] = j.Spec.Model
	}
	s.models[name] = jobs
	return nil
}

// jobsDir is the folder of a tenant's jobs (generator/inputs.JobsDir).
const jobsDir = "jobs"

// jobFiles are the job files of a tenant of the tenants folder dir (folder.jobFiles reads
// both forms).
func jobFiles(dir, tenant string) []string {
	entries, err := os.ReadDir(filepath.Join(dir, tenant, jobsDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, ".") && isYAML(n) {
			out = append(out, filepath.Join(dir, tenant, jobsDir, n))
		}
	}
	return out
}

// providers are the provider tenants (nil for a nil Sharing): whose job files tell a change
// of the shared serving tier.
func (s *Sharing) providers() []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.models))
}

// hasProviders reports whether a tenant is a provider of the shared serving tier.
func (s *Sharing) hasProviders() bool { return len(s.models) > 0 }

// Sharing is the shared serving tier as last read (nil before Load).
func (f *TenantFiles) Sharing() *Sharing { return f.sharing.Load() }
