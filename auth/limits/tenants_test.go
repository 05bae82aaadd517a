package limits

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

func writeTenant(t *testing.T, dir, name, limits string) {
	t.Helper()
	p := filepath.Join(dir, name, "tenant.yaml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: " + name + "\nspec:\n  tier: t\n" + limits
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTenantFiles: limits read from a tenants folder laid out as a ConfigMap volume (folders
// that are symbolic links into ..data), a bad edit refused with the file and field while the
// last good limits stay, and a good edit taken.
func TestTenantFiles(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "..data")
	writeTenant(t, data, "acme", "  limits:\n    requestsPerMinute: {value: 60}\n    timeZone: Asia/Tokyo\n    onStoreDown: closed\n")
	writeTenant(t, data, "globex", "")
	for _, n := range []string{"acme", "globex"} {
		if err := os.Symlink(filepath.Join("..data", n), filepath.Join(root, n)); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "nodetypes"), 0o755) // not a tenant
	f := &TenantFiles{Dir: root, Interval: 10 * time.Millisecond}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	acme := f.Tenant("acme")
	if acme.Limits[RequestsPerMinute].Value != 60 || acme.Location.String() != "Asia/Tokyo" || acme.OnStoreDown != v1alpha1.StoreDownClosed {
		t.Fatalf("acme: %+v", acme)
	}
	if g := f.Tenant("globex"); !g.Limits.Empty() || g.OnStoreDown != v1alpha1.StoreDownOpen || g.Location != time.UTC {
		t.Fatalf("globex: %+v", g)
	}
	if n := f.Names(); len(n) != 1 || n[0] != "acme" {
		t.Fatalf("names %v", n)
	}

	done := make(chan struct{})
	defer close(done)
	go f.Watch(done)
	writeTenant(t, data, "acme", "  limits:\n    requestsPerMinute: {value: -1}\n")
	_, _, _, err := readTenants(root, nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join("acme", "tenant.yaml")) || !strings.Contains(err.Error(), "spec.limits.requestsPerMinute.value is -1: must be a positive number") {
		t.Fatalf("bad edit: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if f.Tenant("acme").Limits[RequestsPerMinute].Value != 60 {
		t.Fatal("a bad edit replaced the last good limits")
	}
	writeTenant(t, data, "acme", "  limits:\n    tokensPerDay: {value: 500, mode: soft}\n")
	deadline := time.Now().Add(5 * time.Second)
	for f.Tenant("acme").Limits[TokensPerDay] != (Rule{Value: 500, Soft: true}) {
		if time.Now().After(deadline) {
			t.Fatalf("the good edit was not taken: %+v", f.Tenant("acme"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := (&TenantFiles{Dir: filepath.Join(root, "missing")}).Load(); err == nil {
		t.Fatal("a missing folder loaded")
	}
}

// TestTenantFilesTiers: a tenant's limits are its own over its tier's, field by field, and its
// keys get the tier's keyLimits where they set none of a kind; a tenant without limits of its
// own takes the tier's; the install mounts the tier's file beside the tenant's.
func TestTenantFilesTiers(t *testing.T) {
	dir := t.TempDir()
	writeTenant(t, dir, "acme", "  limits:\n    requestsPerMinute: {value: 60}\n")
	writeTenant(t, dir, "globex", "")
	for name, p := range map[string]string{"acme": filepath.Join(dir, "acme", "tenant.yaml"), "globex": filepath.Join(dir, "globex", "tenant.yaml")} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), "tier: t", "tier: gold", 1)), 0o644); err != nil {
			t.Fatal(name, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "tiers"), 0o755); err != nil {
		t.Fatal(err)
	}
	tier := "apiVersion: inferplane.io/v1alpha1\nkind: Tier\nmetadata: {name: gold}\nspec:\n  nodeTypes: [metal3.*]\n" +
		"  limits:\n    requestsPerMinute: {value: 600}\n    tokensPerDay: {value: 1000, mode: soft}\n" +
		"  keyLimits:\n    requestsPerMinute: {value: 10}\n"
	if err := os.WriteFile(filepath.Join(dir, "tiers", "gold.yaml"), []byte(tier), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &TenantFiles{Dir: dir}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	acme, globex := f.Tenant("acme"), f.Tenant("globex")
	if acme.Limits[RequestsPerMinute].Value != 60 || acme.Limits[TokensPerDay] != (Rule{Value: 1000, Soft: true}) {
		t.Fatalf("acme's own rpm over the tier's, the tier's tokens per day: %+v", acme.Limits)
	}
	if globex.Limits[RequestsPerMinute].Value != 600 || globex.KeyDefaults[RequestsPerMinute].Value != 10 || acme.KeyDefaults[RequestsPerMinute].Value != 10 {
		t.Fatalf("globex takes the tier's limits, both its key limits: %+v %+v", globex, acme)
	}
	files, err := TenantFilesWithLimits(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || string(files["tiers/gold"]) != tier {
		t.Fatalf("the install's files: %v", len(files))
	}

	// A key's own limit of a kind replaces the tier's default of that kind, and only it.
	l := New(Options{Tenants: f.Tenant})
	var own Set
	own[TokensPerMinute] = Rule{Value: 5}
	for i := range 10 {
		if res := l.Check("globex", "k1", own); !res.Allowed {
			t.Fatalf("request %d refused: %+v", i+1, res.Denied)
		}
	}
	if res := l.Check("globex", "k1", own); res.Allowed || res.Denied.Scope != ScopeKey || res.Denied.Kind != RequestsPerMinute {
		t.Fatalf("the 11th request of a key with the tier's default of 10 per minute: %+v", res)
	}
	own[RequestsPerMinute] = Rule{Value: 100}
	if res := l.Check("globex", "k2", own); !res.Allowed {
		t.Fatalf("a key's own requests per minute replace the default: %+v", res.Denied)
	}
}
