package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// TenantFiles reads the tenants' limits from a tenants folder, the generator's input tree
// (<tenant>/tenant.yaml, spec.limits, over the limits of the tier it names, tiers/<tier>.yaml,
// whose keyLimits are its keys' defaults), and reloads it when a file changes. A folder with
// an error at start is refused; a bad edit later is logged and the last good limits stay.
type TenantFiles struct {
	Dir string
	// Interval between checks for changes (default 10 s).
	Interval time.Duration
	Log      *slog.Logger

	cur     atomic.Pointer[map[string]Tenant]
	sharing atomic.Pointer[Sharing]
	stamp   string
}

// Tenant is the limits of name (none, UTC, open for a tenant without limits or unknown).
func (f *TenantFiles) Tenant(name string) Tenant {
	if m := f.cur.Load(); m != nil {
		if t, ok := (*m)[name]; ok {
			return t
		}
	}
	return Tenant{Location: time.UTC, OnStoreDown: v1alpha1.StoreDownOpen}
}

// Load reads the folder once; Watch keeps reading it.
func (f *TenantFiles) Load() error {
	m, sh, stamp, err := readTenants(f.Dir, nil)
	if err != nil {
		return err
	}
	f.cur.Store(&m)
	f.sharing.Store(sh)
	f.stamp = stamp
	return nil
}

// Watch reloads the folder every Interval until done is closed.
func (f *TenantFiles) Watch(done <-chan struct{}) {
	every := f.Interval
	if every <= 0 {
		every = 10 * time.Second
	}
	log := f.Log
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		providers := f.sharing.Load().providers()
		if s, err := stampTenants(f.Dir, providers); err == nil && s == f.stamp {
			continue
		}
		m, sh, stamp, err := readTenants(f.Dir, providers)
		if err != nil {
			if err.Error() != lastErr {
				log.Error("tenant limits not reloaded: the last good ones stay", "err", err)
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		f.cur.Store(&m)
		f.sharing.Store(sh)
		f.stamp = stamp
		log.Info("tenant limits reloaded", "dir", f.Dir, "tenants with limits", len(m))
	}
}

func tenantFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("tenants folder: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a mounted ConfigMap's ..data and its versions
		}
		// A ConfigMap volume's folders are symbolic links: follow them.
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err != nil || !st.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name(), "tenant.yaml")
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			continue // nodetypes/, masters/: not tenants
		}
		out = append(out, p)
	}
	return out, nil
}

// tierFiles are the tier files of a tenants folder (tiers/*.yaml; none without the folder).
func tierFiles(dir string) []string {
	entries, err := os.ReadDir(filepath.Join(dir, tiersDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			out = append(out, filepath.Join(dir, tiersDir, n))
		}
	}
	return out
}

// tiersDir is the folder of the tiers in a tenants folder (generator/inputs.TiersDir).
const tiersDir = "tiers"

// readTiers reads the tier files of a tenants folder, by tier name.
func readTiers(dir string) (map[string]*v1alpha1.Tier, []error) {
	out := map[string]*v1alpha1.Tier{}
	var errs []error
	for _, p := range tierFiles(dir) {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var t v1alpha1.Tier
		if err := yaml.UnmarshalStrict(data, &t); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		bad := append(ValidateTenantLimits(t.Spec.Limits, field.NewPath("spec", "limits")),
			ValidateRateLimits(t.Spec.KeyLimits, field.NewPath("spec", "keyLimits"))...)
		if err := fielderr.Err(bad); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		out[t.Name] = &t
	}
	return out, errs
}

// stampTenants is the files' names, sizes and modification times: what tells a change. The
// job files counted are those of providers, the provider tenants as last read (Sharing): a
// tenant that becomes one changes its tenant.yaml, so the stamp changes with it, and the next
// stamp counts its jobs too. No file is parsed here.
func stampTenants(dir string, providers []string) (string, error) {
	files, err := tenantFiles(dir)
	if err != nil {
		return "", err
	}
	files = append(files, tierFiles(dir)...)
	for _, p := range providers {
		files = append(files, jobFiles(dir, p)...)
	}
	var b strings.Builder
	for _, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// readTenants reads the folder with its stamp (readStamped), the stamp counting the job files
// of the providers as last read; when the read finds other providers, it reads once more so
// the stamp counts theirs.
func readTenants(dir string, providers []string) (map[string]Tenant, *Sharing, string, error) {
	m, sh, stamp, err := readStamped(dir, providers)
	if err == nil && !slices.Equal(sh.providers(), providers) {
		m, sh, stamp, err = readStamped(dir, sh.providers())
	}
	return m, sh, stamp, err
}

// readStamped reads the folder; its stamp (stampTenants with providers) is taken first, so that
// a change made while it reads is a change the next stamp sees.
func readStamped(dir string, providers []string) (map[string]Tenant, *Sharing, string, error) {
	stamp, err := stampTenants(dir, providers)
	if err != nil {
		return nil, nil, "", err
	}
	files, _ := tenantFiles(dir)
	out := map[string]Tenant{}
	sh := &Sharing{tenants: map[string]*v1alpha1.Tenant{}, models: map[string]map[string]string{}}
	tiers, errs := readTiers(dir)
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var t v1alpha1.Tenant
		if err := yaml.UnmarshalStrict(data, &t); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		name := filepath.Base(filepath.Dir(p))
		if err := sh.add(dir, name, &t, tiers[t.Spec.Tier]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		if err := fielderr.Err(ValidateTenantLimits(t.Spec.Limits, field.NewPath("spec", "limits"))); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		own, keyDefaults := t.Spec.Limits, Set{}
		if tier := tiers[t.Spec.Tier]; tier != nil {
			own, keyDefaults = own.Over(tier.Spec.Limits), FromSpec(tier.Spec.KeyLimits)
		}
		if own == nil && keyDefaults.Empty() {
			continue
		}
		tl, err := TenantFromSpec(own)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: spec.limits.%w", p, err))
			continue
		}
		tl.KeyDefaults = keyDefaults
		out[name] = tl
	}
	return out, sh, stamp, errors.Join(errs...)
}

// Names lists the tenants that have limits.
func (f *TenantFiles) Names() []string {
	var out []string
	if m := f.cur.Load(); m != nil {
		for name, t := range *m {
			if !t.Limits.Empty() {
				out = append(out, name)
			}
		}
	}
	return out
}

// TenantFilesWithLimits reads a tenants folder and returns, checked, the tenant.yaml of every
// tenant with limits (its own or its tier's), by tenant name, and the file of each tier those
// tenants name, as "tiers/<tier>": what the gateway's install mounts for --limits-tenants.
// When a tenant is a provider of the shared serving tier, every tenant's file is returned (its
// catalogue says what it may call) and each provider's jobs, as "<provider>/jobs/<file name>".
func TenantFilesWithLimits(dir string) (map[string][]byte, error) {
	m, sh, _, err := readTenants(dir, nil)
	if err != nil {
		return nil, err
	}
	jobs := map[string]string{}
	if sh.hasProviders() {
		for name := range sh.tenants {
			if _, ok := m[name]; !ok {
				m[name] = Tenant{}
			}
			if sh.tenants[name].Spec.Provider {
				for _, p := range jobFiles(dir, name) {
					jobs[name+"/"+jobsDir+"/"+filepath.Base(p)] = p
				}
			}
		}
	}
	tiers := map[string]string{}
	for _, p := range tierFiles(dir) {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var t v1alpha1.Tier
		if yaml.Unmarshal(data, &t) == nil && t.Name != "" {
			tiers[t.Name] = p
		}
	}
	out := map[string][]byte{}
	for name := range m {
		p := filepath.Join(dir, name, "tenant.yaml")
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[name] = b
		var t v1alpha1.Tenant
		if yaml.Unmarshal(b, &t) == nil && tiers[t.Spec.Tier] != "" {
			tb, err := os.ReadFile(tiers[t.Spec.Tier])
			if err != nil {
				return nil, err
			}
			out[tiersDir+"/"+t.Spec.Tier] = tb
		}
	}
	for name, p := range jobs {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}
