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
	_, _, err := readTenants(root)
	if err == nil || !strings.Contains(err.Error(), filepath.Join("acme", "tenant.yaml")) || !strings.Contains(err.Error(), "spec.limits.requestsPerMinute.value: a positive number, is -1") {
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
