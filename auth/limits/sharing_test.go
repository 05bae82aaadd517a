package limits

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSharing: the shared serving tier read from a tenants folder: a provider's jobs and every
// tenant's catalogue through its tier; a new provider job is taken on reload; a provider job
// that names no model is refused with its file, and the last good reading stays.
func TestSharing(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "tiers", "t.yaml"), "apiVersion: inferplane.io/v1alpha1\nkind: Tier\nmetadata: {name: t}\nspec:\n  nodeTypes: []\n  models: [Qwen/*]\n")
	writeTenant(t, root, "acme", "")
	writeTenant(t, root, "platform", "  provider: true\n")
	job := func(name, model string) string {
		return "apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nmetadata: {name: " + name + "}\nspec: {model: " + model + ", replicas: 1, gpuCount: 1, nodeType: n}\n"
	}
	writeFile(t, filepath.Join(root, "platform", "jobs", "qwen.yaml"), job("qwen", "Qwen/Qwen3-32B"))
	writeFile(t, filepath.Join(root, "platform", "jobs", "llama.yaml"), job("llama", "meta-llama/Llama-3.3-70B-Instruct"))
	writeFile(t, filepath.Join(root, "acme", "jobs", "mine.yaml"), job("mine", "Qwen/Qwen3-8B"))
	f := &TenantFiles{Dir: root, Interval: 10 * time.Millisecond}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	call := func(caller, tenant, job string) bool { _, ok := f.Sharing().SharedCall(caller, tenant, job); return ok }
	if m, ok := f.Sharing().SharedCall("acme", "platform", "qwen"); !ok || m != "Qwen/Qwen3-32B" {
		t.Fatalf("acme on platform/qwen: %q %v", m, ok)
	}
	for _, c := range [][3]string{{"acme", "platform", "llama"}, {"platform", "acme", "mine"}, {"nobody", "platform", "qwen"}, {"acme", "platform", "nojob"}} {
		if call(c[0], c[1], c[2]) {
			t.Fatalf("%s on %s/%s allowed", c[0], c[1], c[2])
		}
	}
	// The gateway's install mounts every tenant (their catalogues) and the provider's jobs.
	files, err := TenantFilesWithLimits(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"acme", "platform", "tiers/t", "platform/jobs/qwen.yaml", "platform/jobs/llama.yaml"} {
		if len(files[k]) == 0 {
			t.Fatalf("%s not mounted: %v", k, len(files))
		}
	}
	if _, ok := files["acme/jobs/mine.yaml"]; ok {
		t.Fatal("a dedicated tenant's job mounted")
	}

	done := make(chan struct{})
	defer close(done)
	go f.Watch(done)
	writeFile(t, filepath.Join(root, "platform", "jobs", "coder.yaml"), job("coder", "Qwen/Qwen3-Coder-480B-A35B-Instruct"))
	deadline := time.Now().Add(5 * time.Second)
	for !call("acme", "platform", "coder") {
		if time.Now().After(deadline) {
			t.Fatal("a new provider job was not taken")
		}
		time.Sleep(10 * time.Millisecond)
	}
	writeFile(t, filepath.Join(root, "platform", "jobs", "bad.yaml"), "apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nmetadata: {name: bad}\nspec: {replicas: 1}\n")
	_, _, _, err = readTenants(root, nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join("platform", "jobs", "bad.yaml")) || !strings.Contains(err.Error(), "spec.model (the model it shares)") {
		t.Fatalf("bad provider job: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if !call("acme", "platform", "qwen") {
		t.Fatal("a bad edit replaced the last good reading")
	}
	var nilSharing *Sharing
	if _, ok := nilSharing.SharedCall("acme", "platform", "qwen"); ok {
		t.Fatal("no folder shares nothing")
	}
}

// TestSharingWatchesNewProviders: the reload's change check parses no file, so it counts the
// job files of the providers as last read; a tenant that becomes a provider is taken with its
// jobs, and a later edit of one of its job files is taken too.
func TestSharingWatchesNewProviders(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "tiers", "t.yaml"), "apiVersion: inferplane.io/v1alpha1\nkind: Tier\nmetadata: {name: t}\nspec:\n  nodeTypes: []\n  models: [Qwen/*]\n")
	writeTenant(t, root, "acme", "")
	writeTenant(t, root, "globex", "")
	job := "apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nmetadata: {name: qwen}\nspec: {model: %s, replicas: 1, gpuCount: 1, nodeType: n}\n"
	writeFile(t, filepath.Join(root, "globex", "jobs", "qwen.yaml"), fmt.Sprintf(job, "Qwen/Qwen3-32B"))
	f := &TenantFiles{Dir: root, Interval: 10 * time.Millisecond}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	model := func() string { m, _ := f.Sharing().SharedCall("acme", "globex", "qwen"); return m }
	if m := model(); m != "" {
		t.Fatalf("globex shares before it is a provider: %q", m)
	}
	done := make(chan struct{})
	defer close(done)
	go f.Watch(done)
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for model() != want {
			if time.Now().After(deadline) {
				t.Fatalf("acme on globex/qwen: %q, want %q", model(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	writeTenant(t, root, "globex", "  provider: true\n")
	waitFor("Qwen/Qwen3-32B")
	writeFile(t, filepath.Join(root, "globex", "jobs", "qwen.yaml"), fmt.Sprintf(job, "Qwen/Qwen3-8B"))
	waitFor("Qwen/Qwen3-8B")
}
