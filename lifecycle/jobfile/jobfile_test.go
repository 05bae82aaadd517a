package jobfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/recipe"
)

// A written job file is one the loader takes as it is: strict decoding, every check.
func TestEncodeLoads(t *testing.T) {
	off := false
	spec := v1alpha1.ManagedInferenceJobSpec{Model: "Qwen/Qwen3-32B", Variant: "fp8", Replicas: 2, GPUCount: 1,
		NodeType: "metal3.gpu-h100", Features: map[string]bool{"reasoning": false}, RequireAPIKey: &off}
	data, err := Encode("chat", spec)
	require.NoError(t, err)
	tree, err := Tree("../../tenants", "acme")
	require.NoError(t, err)
	tree[Path("acme", "chat")] = &fstest.MapFile{Data: data}
	in, err := inputs.Load(tree, "tenants")
	require.NoError(t, err, string(data))
	rel, err := Find(in, "tenants", "acme", "chat")
	require.NoError(t, err)
	assert.Equal(t, "acme/jobs/chat.yaml", rel)
	for _, tn := range in.Tenants {
		for _, j := range tn.Jobs {
			if j.Object.Name == "chat" {
				assert.Equal(t, spec, j.Object.Spec)
			}
		}
	}
	_, err = Find(in, "tenants", "acme", "chta")
	assert.EqualError(t, err, `tenant acme has no job "chta"; did you mean chat? (jobs: chat, mistral-small, qwen3-32b, transcribe)`)
}

func TestCheckNameAndTenant(t *testing.T) {
	require.NoError(t, CheckName("tenant", "acme-2"))
	for _, bad := range []string{"../acme", "Acme", "a/b", "", "acme.v2"} {
		assert.ErrorContains(t, CheckName("tenant", bad), "expected a DNS-1123 label", bad)
	}
	require.NoError(t, CheckJobName("chat-2", 1))
	for _, bad := range []string{"../acme", "Chat", "a/b", "", "chat.v2", "7b"} {
		assert.ErrorContains(t, CheckJobName(bad, 1), "must be lower-case letters, digits and '-', starting with a letter", bad)
	}
	long := strings.Repeat("j", 58)
	assert.EqualError(t, CheckJobName(long, 1), `job "`+long+`": must be at most 57 characters (it has 58): `+
		"it names the job's VMs, <job>-r<replica>-n<node>, up to <job>-r0-n0, and a VM name is at most 63")
	require.NoError(t, CheckTenant("../../tenants", "acme"))
	assert.EqualError(t, CheckTenant("../../tenants", "acmee"),
		`unknown tenant "acmee": no acmee/tenant.yaml in ../../tenants; did you mean acme? (tenants: acme, globex, initech, platform)`)
	assert.ErrorContains(t, CheckTenant("../../tenants", "nodetypes"), `unknown tenant "nodetypes"`)
}

// The in-memory tree leaves out what the loader ignores and the other tenants; writes are
// whole files; removing
// the last job removes its jobs folder too.
func TestTreeWriteRemove(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "acme", ".git"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "acme", ".git", "HEAD"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "acme", "tenant.yaml"), []byte("kind: Tenant\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "globex"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "globex", "tenant.yaml"), []byte("kind: Tenant\n"), 0o644))
	tree, err := Tree(dir, "acme")
	require.NoError(t, err)
	assert.Equal(t, []string{"acme/tenant.yaml"}, keys(tree), "hidden files and the other tenants left out")

	require.NoError(t, Write(dir, "acme/jobs/chat.yaml", []byte("a: 1\n")))
	require.NoError(t, Write(dir, "acme/jobs/chat.yaml", []byte("a: 2\n")))
	got, err := os.ReadFile(filepath.Join(dir, "acme", "jobs", "chat.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "a: 2\n", string(got))
	entries, _ := os.ReadDir(filepath.Join(dir, "acme", "jobs"))
	assert.Len(t, entries, 1, "no temporary file is left")

	require.NoError(t, Remove(dir, "acme/jobs/chat.yaml"))
	assert.NoDirExists(t, filepath.Join(dir, "acme", "jobs"))
	assert.FileExists(t, filepath.Join(dir, "acme", "tenant.yaml"))
}

func keys(m fstest.MapFS) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestNew(t *testing.T) {
	tree, err := Tree("../../tenants", "acme")
	require.NoError(t, err)
	in, err := inputs.Load(tree, "tenants")
	require.NoError(t, err)
	book, err := recipe.Load(os.DirFS("../../recipes"))
	require.NoError(t, err)
	asr := v1alpha1.ManagedInferenceJobSpec{Model: v1alpha1.ParakeetModel, NodeType: "metal3.gpu-h100", GPUCount: 1, Replicas: 1}
	for _, tc := range []struct {
		name        string
		job         string
		replace     bool
		wantRel     string
		wantRuntime v1alpha1.Runtime
		wantErr     string
	}{
		{name: "a new job goes to the tenant's jobs folder, its defaults filled", job: "asr",
			wantRel: "acme/jobs/asr.yaml", wantRuntime: v1alpha1.RuntimeParakeet},
		{name: "an existing job is refused", job: "qwen3-32b",
			wantErr: "job acme/qwen3-32b exists (tenants/acme/jobs/qwen3-32b.yaml)"},
		{name: "an existing job is replaced in its own file", job: "qwen3-32b", replace: true,
			wantRel: "acme/jobs/qwen3-32b.yaml", wantRuntime: v1alpha1.RuntimeParakeet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nj, err := New(in, book, "tenants", "acme", tc.job, asr, "# test\n", tc.replace)
			if tc.wantErr != "" {
				var e *ExistsError
				require.ErrorAs(t, err, &e)
				assert.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantRel, nj.Rel)
			assert.Equal(t, tc.wantRuntime, nj.Spec.Runtime)
			assert.True(t, strings.HasPrefix(string(nj.Data), "# test\napiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\n"), string(nj.Data))
			assert.Contains(t, string(nj.Data), "name: "+tc.job+"\n")
		})
	}
}
