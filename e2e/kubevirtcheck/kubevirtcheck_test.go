package kubevirtcheck_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/kubevirtcheck"
	"github.com/inferplane/inferplane/e2e/toolbin"
	"github.com/inferplane/inferplane/generator"
)

// vmFiles lists the rendered VM files under the given job folders.
func vmFiles(t *testing.T, jobDirs []string) int {
	t.Helper()
	n := 0
	for _, d := range jobDirs {
		m, err := filepath.Glob(filepath.Join(d, "*", "*-vm.yaml"))
		require.NoError(t, err)
		n += len(m)
	}
	return n
}

// TestGeneratedVMsPassKubeVirtValidation: KubeVirt's own VirtualMachine validation accepts
// every VirtualMachine that `generate` renders for the bundled examples, and every VM of the
// golden trees (single- and multi-node, GPU and InfiniBand passthrough, vLLM and Parakeet). One
// run of the checker covers both: each run spends seconds building KubeVirt's OpenAPI validator
// in a package init.
func TestGeneratedVMsPassKubeVirtValidation(t *testing.T) {
	bin := toolbin.Require(t, toolbin.KubeVirtCheck)[0]
	root := kubeenv.RepoRoot()
	out := t.TempDir()
	_, err := generator.Generate(context.Background(), generator.Options{
		RecipesDir: filepath.Join(root, "recipes"), TenantsDir: filepath.Join(root, "tenants"), OutDir: out,
	})
	require.NoError(t, err)

	var dirs []string
	for _, pattern := range []string{
		filepath.Join(out, "*", "jobs"), // generate on the bundled examples
		filepath.Join(root, "generator", "testdata", "golden", "*", "jobs"),
	} {
		m, err := filepath.Glob(pattern)
		require.NoError(t, err)
		require.NotEmpty(t, m, pattern)
		dirs = append(dirs, m...)
	}
	want := vmFiles(t, dirs)
	r, err := kubevirtcheck.Run(bin, dirs...)
	require.NoError(t, err)
	require.Empty(t, r.Refusals, "KubeVirt refused generated VMs")
	require.Equal(t, want, r.VMs, "the checker must have seen every VM file")
	t.Logf("KubeVirt accepted %d VirtualMachines", r.VMs)
}

// TestKubeVirtCheckRefusesBrokenVMs: the checker is not a rubber stamp. A generated VM broken
// the ways a hand edit could break it is refused, with KubeVirt's own message.
func TestKubeVirtCheckRefusesBrokenVMs(t *testing.T) {
	bin := toolbin.Require(t, toolbin.KubeVirtCheck)[0]
	golden := filepath.Join(kubeenv.RepoRoot(), "generator", "testdata", "golden", "acme", "jobs", "transcribe", "r0-n0-vm.yaml")
	data, err := os.ReadFile(golden)
	require.NoError(t, err)

	cases := map[string]struct {
		breakIt func(*kubevirtv1.VirtualMachineInstanceSpec)
		want    string
	}{
		"disk-without-volume.yaml": {
			breakIt: func(s *kubevirtv1.VirtualMachineInstanceSpec) {
				s.Volumes = deleteNamed(s.Volumes, func(v kubevirtv1.Volume) string { return v.Name }, "model-cache")
			},
			want: "spec.template.spec.domain.devices.disks[2].Name 'model-cache' not found.",
		},
		"interface-without-network.yaml": {
			breakIt: func(s *kubevirtv1.VirtualMachineInstanceSpec) { s.Networks = nil },
			want:    "spec.template.spec.domain.devices.interfaces[0].name 'default' not found.",
		},
	}
	dir := t.TempDir()
	for file, tc := range cases {
		var vm kubevirtv1.VirtualMachine
		require.NoError(t, yaml.Unmarshal(data, &vm))
		tc.breakIt(&vm.Spec.Template.Spec)
		broken, err := yaml.Marshal(&vm)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), broken, 0o644))
	}

	r, err := kubevirtcheck.Run(bin, dir)
	require.NoError(t, err)
	require.Equal(t, len(cases), r.VMs)
	for file, tc := range cases {
		var got []string
		for _, line := range r.Refusals {
			if strings.HasPrefix(line, filepath.Join(dir, file)+":") {
				got = append(got, line)
			}
		}
		require.NotEmpty(t, got, "KubeVirt accepted %s", file)
		require.Contains(t, strings.Join(got, "\n"), tc.want, file)
	}
}

func deleteNamed[T any](list []T, name func(T) string, drop string) []T {
	var out []T
	for _, x := range list {
		if name(x) != drop {
			out = append(out, x)
		}
	}
	return out
}
