// Package toolbin finds the tools hack/gitopsbin.sh builds for the e2e tests (argocd,
// kustomize, kubevirt-check, kube-controller-manager), each in its own cache folder
// <cache>/<tool>/<hash>/, the way kubeenv finds kube-apiserver and etcd.
//
// A test asks for a tool with Require: when the tool is missing it skips, saying how to build
// it, unless INFERPLANE_REQUIRE_GITOPS=1 (set by `make test` and `make test-argocd`, which build
// the tools first), in which case the test fails: a CI run never passes by skipping.
package toolbin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

// Environment variables the package reads.
const (
	// EnvCache is the cache root the build scripts use (default <repo>/.cache).
	EnvCache = "INFERPLANE_CACHE"
	// EnvRequire, when "1", turns a missing tool into a test failure instead of a skip.
	EnvRequire = "INFERPLANE_REQUIRE_GITOPS"
)

// The tools, by the name hack/gitopsbin.sh takes; each folder holds a binary of that name.
const (
	ArgoCD                = "argocd"
	Kustomize             = "kustomize"
	KubeVirtCheck         = "kubevirt-check"
	KubeControllerManager = "kube-controller-manager"
)

// EnvVar is the variable that names a tool's folder explicitly, e.g. INFERPLANE_ARGOCD for
// argocd; `make test` sets it to what hack/gitopsbin.sh printed.
func EnvVar(tool string) string {
	return "INFERPLANE_" + strings.ToUpper(strings.ReplaceAll(tool, "-", "_"))
}

// Dir finds the folder holding tool: $INFERPLANE_<TOOL>, else the newest build in the cache.
func Dir(tool string) (string, error) {
	if dir := os.Getenv(EnvVar(tool)); dir != "" {
		return dir, check(dir, tool)
	}
	cache := os.Getenv(EnvCache)
	if cache == "" {
		cache = filepath.Join(kubeenv.RepoRoot(), ".cache")
	}
	newest := kubeenv.NewestBuild(filepath.Join(cache, tool, "*", tool))
	if newest == "" {
		return "", fmt.Errorf("no %s build in %s: run `hack/gitopsbin.sh %s` (or `make test-argocd`), or set %s",
			tool, filepath.Join(cache, tool), tool, EnvVar(tool))
	}
	return newest, check(newest, tool)
}

func check(dir, tool string) error {
	st, err := os.Stat(filepath.Join(dir, tool))
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return errors.New(dir + ": no executable " + tool + " (run hack/gitopsbin.sh " + tool + ")")
	}
	return nil
}

// Require returns the folders of the given tools, in order, or skips the test (fails it under
// INFERPLANE_REQUIRE_GITOPS=1) naming what is missing.
func Require(t testing.TB, tools ...string) []string {
	t.Helper()
	dirs := make([]string, len(tools))
	var missing []error
	for i, tool := range tools {
		d, err := Dir(tool)
		if err != nil {
			missing = append(missing, err)
		}
		dirs[i] = d
	}
	if err := errors.Join(missing...); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but a tool is missing: %v", EnvRequire, err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	return dirs
}
