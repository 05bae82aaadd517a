package limits

import (
	"context"
	"errors"
	"fmt"
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
// whose keyLimits are its keys' defaults), or from the flat folder the gateway's install
// mounts (folder.go), and reloads it when a file changes. A folder with an error at start is
// refused; a bad edit later is logged and the last good limits stay.
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
				level := slog.LevelError
				if errors.Is(err, errChanging) {
					level = slog.LevelInfo // passes by itself, at the kubelet's next update
				}
				log.Log(context.Background(), level, "tenant limits not reloaded: the last good ones stay", "err", err)
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

// tierFiles are the tier files of a tenants folder (tiers/*.yaml; none without the folder).
func tierFiles(dir string) []string {
	entries, err := os.ReadDir(filepath.Join(dir, tiersDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, ".") && isYAML(n) {
			out = append(out, filepath.Join(dir, tiersDir, n))
		}
	}
	return out
}

// tiersDir is the folder of the tiers in a tenants folder (generator/inputs.TiersDir).
const tiersDir = "tiers"

// readTiers reads tier files, by tier name.
func readTiers(files []string) (map[string]*v1alpha1.Tier, []error) {
	out := map[string]*v1alpha1.Tier{}
	var errs []error
	for _, p := range files {
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
	f, err := scanFolder(dir)
	if err != nil {
		return "", err
	}
	return f.stamp(providers)
}

func (f *folder) stamp(providers []string) (string, error) {
	var b strings.Builder
	for _, p := range f.stampFiles(providers) {
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
	f, err := scanFolder(dir)
	if err != nil {
		return nil, nil, "", err
	}
	stamp, err := f.stamp(providers)
	if err != nil {
		return nil, nil, "", err
	}
	if err := f.checkShards(); err != nil {
		return nil, nil, "", err
	}
	out := map[string]Tenant{}
	sh := &Sharing{tenants: map[string]*v1alpha1.Tenant{}, models: map[string]map[string]string{}}
	tiers, errs := readTiers(f.tiers)
	for _, tf := range f.tenants {
		p, name := tf.path, tf.name
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
		if err := sh.add(name, &t, tiers[t.Spec.Tier], f.jobFiles(name)); err != nil {
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
	f, err := scanFolder(dir)
	if err != nil {
		return nil, err
	}
	tiers := map[string]string{}
	for _, p := range f.tiers {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var t v1alpha1.Tier
		if yaml.Unmarshal(data, &t) == nil && t.Name != "" {
			tiers[t.Name] = p
		}
	}
	want := map[string]string{} // entry -> path
	for _, t := range f.tenants {
		_, limited := m[t.name]
		read := sh.tenants[t.name]
		if read == nil || !limited && !sh.hasProviders() {
			continue // (nil: a tenant added since the read above, read next time)
		}
		want[t.name] = t.path
		if p := tiers[read.Spec.Tier]; p != "" {
			want[tiersDir+"/"+read.Spec.Tier] = p
		}
		if _, provider := sh.models[t.name]; provider {
			for _, j := range f.jobFiles(t.name) {
				want[t.name+"/"+jobsDir+"/"+j.name] = j.path
			}
		}
	}
	out := map[string][]byte{}
	for entry, p := range want {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[entry] = b
	}
	return out, nil
}
