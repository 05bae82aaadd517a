package setupscripts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// builder is a set-up script that builds test binaries into the cache: it prints the folder
// (cache/<folder>/<stamp>) that holds bins.
type builder struct {
	script string
	args   []string
	folder string
	bins   []string
}

var builders = []builder{
	{script: "hack/kubebin.sh", folder: "kubebin", bins: []string{"kube-apiserver", "etcd"}},
	{script: "hack/gitopsbin.sh", args: []string{"argocd"}, folder: "argocd", bins: []string{"argocd"}},
	{script: "hack/gitopsbin.sh", args: []string{"kustomize"}, folder: "kustomize", bins: []string{"kustomize"}},
	{script: "hack/gitopsbin.sh", args: []string{"kubevirt-check"}, folder: "kubevirt-check", bins: []string{"kubevirt-check"}},
	{script: "hack/gitopsbin.sh", args: []string{"kube-controller-manager"}, folder: "kube-controller-manager", bins: []string{"kube-controller-manager"}},
	{script: "hack/gitopsbin.sh", args: []string{"dex"}, folder: "dex", bins: []string{"dex"}},
}

func (b builder) title() string { return strings.TrimSpace(b.script + " " + strings.Join(b.args, " ")) }

var stampRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// checkBuild checks that a run printed a build folder of the cache holding b's binaries, and
// returns it.
func (w *world) checkBuild(b builder, r result) string {
	w.t.Helper()
	require.Equal(w.t, 0, r.code, r.stderr)
	dest := strings.TrimSuffix(r.stdout, "\n")
	require.Equal(w.t, filepath.Join(w.dir, "cache", b.folder), filepath.Dir(dest), "stdout is the build's folder alone")
	require.Regexp(w.t, stampRE, filepath.Base(dest))
	for _, bin := range b.bins {
		fi, err := os.Stat(filepath.Join(dest, bin))
		require.NoError(w.t, err)
		assert.NotZero(w.t, fi.Mode()&0o111, "%s is executable", bin)
	}
	return dest
}

// Each build script on an empty cache, a second time, with a failing build, beside other
// builds in the cache, and twice at once, against a stand-in of go.
func TestBuildCacheStandIn(t *testing.T) {
	for _, b := range builders {
		t.Run(b.title()+"/empty cache, then again", func(t *testing.T) {
			w := newWorld(t)
			dest := w.checkBuild(b, w.runScript(b.script, b.args))
			assert.Equal(t, b.bins, w.lines("built"))
			if b.folder == "argocd" {
				for _, f := range []string{"argocd-repo-server", "argocd-application-controller", "crds/application-crd.yaml"} {
					assert.FileExists(t, filepath.Join(dest, f))
				}
			}
			assert.Equal(t, []string{".lock", filepath.Base(dest)}, names(t, filepath.Dir(dest)), "nothing else in the cache")

			assert.Equal(t, dest, w.checkBuild(b, w.runScript(b.script, b.args)))
			assert.Equal(t, b.bins, w.lines("built"), "the second run builds nothing")
		})
		t.Run(b.title()+"/a build fails", func(t *testing.T) {
			w := newWorld(t)
			w.write("state/build-fails-"+b.bins[len(b.bins)-1], "")
			r := w.runScript(b.script, b.args)
			assert.NotEqual(t, 0, r.code)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, "stand-in go: building "+b.bins[len(b.bins)-1]+" failed")
			assert.Equal(t, []string{".lock"}, names(t, filepath.Join(w.dir, "cache", b.folder)), "no build published or left half-done")
		})
		t.Run(b.title()+"/two at once", func(t *testing.T) {
			w := newWorld(t)
			first, second := w.twoAtOnce(b.script, b.args...)
			assert.Equal(t, w.checkBuild(b, first), w.checkBuild(b, second))
			assert.Equal(t, b.bins, w.lines("built"), "one build")
		})
	}
}

// A new build removes the builds no run has used for 3 days and the folders of killed builds,
// and keeps another checkout's recent build (other pins, its tests may be running from it).
func TestBuildCachePrunesStandIn(t *testing.T) {
	b := builders[0]
	w := newWorld(t)
	cache := filepath.Join(w.dir, "cache", b.folder)
	for _, d := range []string{"0000000000000old", "00000000000recent", ".build.killed"} {
		require.NoError(t, os.MkdirAll(filepath.Join(cache, d), 0o755))
	}
	old := time.Now().Add(-10 * 24 * time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(cache, "0000000000000old"), old, old))
	dest := w.checkBuild(b, w.runScript(b.script, b.args))
	assert.ElementsMatch(t, []string{".lock", "00000000000recent", filepath.Base(dest)}, names(t, cache))

	// A run that finds its build marks it used, so another checkout's new build keeps it.
	require.NoError(t, os.Chtimes(dest, old, old))
	w.checkBuild(b, w.runScript(b.script, b.args))
	fi, err := os.Stat(dest)
	require.NoError(t, err)
	assert.True(t, fi.ModTime().After(old.Add(24*time.Hour)), "the build's folder is marked used")
}

// testbins.sh builds everything and prints one NAME=folder per line, running COMMAND beside the
// builds; a failing build or COMMAND fails it. Both ways: in parallel and one after the other.
func TestTestbinsStandIn(t *testing.T) {
	vars := map[string]string{"INFERPLANE_KUBEBIN": "kubebin", "INFERPLANE_ARGOCD": "argocd", "INFERPLANE_KUSTOMIZE": "kustomize",
		"INFERPLANE_KUBEVIRT_CHECK": "kubevirt-check", "INFERPLANE_KUBE_CONTROLLER_MANAGER": "kube-controller-manager", "INFERPLANE_DEX": "dex"}
	for _, parallel := range []string{"0", "1"} {
		env := "INFERPLANE_BUILD_PARALLEL=" + parallel
		t.Run("parallel="+parallel+"/builds", func(t *testing.T) {
			w := newWorld(t)
			r := w.runScript("hack/testbins.sh", []string{"echo", "the command ran"}, env)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Contains(t, r.stderr, "the command ran\n")
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			require.Len(t, lines, len(vars), r.stdout)
			for _, l := range lines {
				name, dir, _ := strings.Cut(l, "=")
				require.Contains(t, vars, name)
				assert.Equal(t, filepath.Join(w.dir, "cache", vars[name]), filepath.Dir(dir))
				assert.DirExists(t, dir)
			}
			assert.Len(t, w.lines("built"), 7) // kube-apiserver, etcd and the five tools
		})
		t.Run("parallel="+parallel+"/a build fails", func(t *testing.T) {
			w := newWorld(t)
			w.write("state/build-fails-kustomize", "")
			r := w.runScript("hack/testbins.sh", nil, env)
			assert.Equal(t, 1, r.code)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, "testbins: a build or the command failed")
		})
		t.Run("parallel="+parallel+"/the command fails", func(t *testing.T) {
			w := newWorld(t)
			r := w.runScript("hack/testbins.sh", []string{"false"}, env)
			assert.Equal(t, 1, r.code)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, "testbins: a build or the command failed")
		})
	}
}
