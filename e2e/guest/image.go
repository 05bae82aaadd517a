package guest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator"
)

// EnvBoot, when "1", runs the tests that boot the guest (make test-guest sets it): minutes of
// emulated CPU each, and the guest image's build the first time.
const EnvBoot = "INFERPLANE_GUEST_BOOT"

// RequireBoot skips the test unless INFERPLANE_GUEST_BOOT=1.
func RequireBoot(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvBoot) != "1" {
		t.Skipf("SKIPPED: boots the guest image in QEMU (minutes under TCG, and the image's build the first time): make test-guest runs it (%s=1)", EnvBoot)
	}
}

// Image builds the guest disk as `make guest-image` does (hack/guest/build.sh), with this
// checkout's agent, and returns its path; the build's root is cached in CacheDir, and the disk
// too while the root and the agent stay the same. The test takes the archive's current package
// versions (--lock archive): it tests the recipe, not one day's archive (build.sh says what
// differs from the lock), and without the GPU driver layer (hack/guest/packages-gpu), which a VM
// without a GPU cannot use and whose DKMS build would take most of CI's time (docs/guest.md#in-ci):
// the image differs from make guest-image's in that layer only.
func Image(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(CacheDir(), "test")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(dir, "inferplane")
	build := exec.Command("go", "build", "-trimpath", "-o", agent, "./cmd/inferplane")
	build.Dir = kubeenv.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	disk := filepath.Join(dir, "gpu-guest-without-gpu.qcow2")
	cmd := exec.Command(filepath.Join(kubeenv.RepoRoot(), "hack", "guest", "build.sh"), "--agent", agent, "--out", disk, "--lock", "archive", "--without-gpu")
	cmd.Env = append(os.Environ(), "INFERPLANE_CACHE="+filepath.Dir(CacheDir()))
	log := filepath.Join(dir, "build.log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		tail, _ := exec.Command("tail", "-40", log).Output()
		t.Fatalf("hack/guest/build.sh: %v (log %s):\n%s", err, log, tail)
	}
	return disk
}

// RenderJob renders one job the bundled examples do not have (a test's own master and job,
// added to a copy of tenants/) with the real generator, and returns its nodes. master and job
// are the files' YAML; tenant is the tenant the job goes to.
func RenderJob(t testing.TB, tenant, masterYAML, jobYAML string) []Node {
	t.Helper()
	root := kubeenv.RepoRoot()
	dir := t.TempDir()
	tenants := filepath.Join(dir, "tenants")
	if err := os.CopyFS(tenants, os.DirFS(filepath.Join(root, "tenants"))); err != nil {
		t.Fatal(err)
	}
	name := func(y string) string {
		for _, l := range strings.Split(y, "\n") {
			if n, ok := strings.CutPrefix(strings.TrimSpace(l), "name: "); ok {
				return n
			}
		}
		t.Fatalf("no metadata.name in %q", y)
		return ""
	}
	for f, y := range map[string]string{
		filepath.Join(tenants, "masters", name(masterYAML)+".yaml"):   masterYAML,
		filepath.Join(tenants, tenant, "jobs", name(jobYAML)+".yaml"): jobYAML,
	} {
		if err := os.WriteFile(f, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out")
	if _, err := generator.Generate(context.Background(), generator.Options{
		RecipesDir: filepath.Join(root, "recipes"), TenantsDir: tenants, OutDir: out,
	}); err != nil {
		t.Fatalf("generate: %v", err)
	}
	nodes, err := ReadJob(filepath.Join(out, tenant, "jobs", name(jobYAML)))
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// SeedDisk writes the docker archives to an ISO labelled inferplane-images, the disk the guest
// image's inferplane-image-seed service loads into Docker at boot (the guest cannot pull).
func SeedDisk(t testing.TB, tools map[string]string, dir string, archives ...string) string {
	t.Helper()
	files := map[string]string{}
	for _, a := range archives {
		b, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(a)] = string(b)
	}
	out := filepath.Join(dir, "image-seed.iso")
	if err := iso(tools, out, "inferplane-images", files); err != nil {
		t.Fatal(err)
	}
	return out
}

// FilesImage builds a small image (hack/image files) holding the given files, with the
// entrypoint, as a docker archive, and returns the archive's path.
func FilesImage(t testing.TB, out, repository, tag, entrypoint string, files map[string]string) string {
	t.Helper()
	args := []string{"run", ".", "files", "--out", out, "--repository", repository, "--tag", tag, "--entrypoint", entrypoint, "--title", repository}
	for src, dst := range files {
		args = append(args, "--file", src+":"+dst)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(kubeenv.RepoRoot(), "hack", "image")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image files: %v\n%s", err, o)
	}
	return out
}

// StaticBinary builds a Go package of this module as a static linux/amd64 binary.
func StaticBinary(t testing.TB, pkg, out string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = kubeenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, o)
	}
	return out
}
