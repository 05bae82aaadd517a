package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jobsTree is a copy of the bundled tenants in a temporary folder, and an out folder beside it.
type jobsTree struct {
	tenants, out string
}

func newJobsTree(t *testing.T) jobsTree {
	t.Helper()
	dir := t.TempDir()
	tr := jobsTree{tenants: filepath.Join(dir, "tenants"), out: filepath.Join(dir, "out")}
	require.NoError(t, os.CopyFS(tr.tenants, os.DirFS("../../tenants")))
	return tr
}

// run runs a jobs (or generate) command on the tree with the bundled recipes.
func (tr jobsTree) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	args = append(args, "--tenants", tr.tenants, "--recipes", "../../recipes")
	if len(args) < 2 || args[0] != "jobs" || (args[1] != "list" && args[1] != "detail" && args[1] != "restart" && args[1] != "logs") {
		args = append(args, "--out-dir", tr.out) // only the commands that render take it
	}
	out, errOut, err := execCLI(context.Background(), args...)
	return out + errOut, err
}

// files reads every file under dir (a repository's work tree without .git), by slash path.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return out
	}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return fs.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	}))
	return out
}

// everything reads every file and its time under dir, .git included: equal only if nothing
// was written.
func everything(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, _ := d.Info()
		b, _ := os.ReadFile(p)
		out[p] = fmt.Sprintf("%s %x", info.ModTime(), sha256.Sum256(b))
		return nil
	})
	return out
}

// `jobs create` writes the job and commits exactly what `generate` would: a generate right
// after it changes nothing. `jobs delete` then leaves the inputs and the tenant's work tree
// as if the job had never existed.
func TestJobsCreateGenerateDelete(t *testing.T) {
	tr := newJobsTree(t)
	before := files(t, tr.tenants)
	out, err := tr.run(t, "generate")
	require.NoError(t, err, out)
	neverExisted := files(t, filepath.Join(tr.out, "acme"))

	out, err = tr.run(t, "jobs", "create", "acme/chat", "--model", "Qwen/Qwen3-32B", "--replicas", "2", "--feature", "reasoning=off")
	require.NoError(t, err, out)
	assert.Contains(t, out, "acme: updated (")
	assert.Contains(t, out, "wrote "+filepath.Join(tr.tenants, "acme", "jobs", "chat.yaml")+" and committed "+filepath.Join(tr.out, "acme"))
	assert.NotContains(t, out, "globex", "only the job's tenant is rendered")
	job, err := os.ReadFile(filepath.Join(tr.tenants, "acme", "jobs", "chat.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "# Written by `inferplane jobs create`; edit it like any job file.\n"+
		"apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nmetadata:\n  name: chat\nspec:\n"+
		"  features:\n    reasoning: false\n  gpuCount: 1\n  model: Qwen/Qwen3-32B\n  nodeType: metal3.gpu-h100\n  replicas: 2\n", string(job),
		"--gpus and --node-type default to the master's GPUs and the tenant's one node type")
	assert.Contains(t, files(t, filepath.Join(tr.out, "acme")), "jobs/chat/r1-n0-vm.yaml")

	snap := everything(t, tr.out)
	out, err = tr.run(t, "generate")
	require.NoError(t, err, out)
	assert.Contains(t, out, "acme: unchanged")
	assert.Equal(t, snap, everything(t, tr.out), "generate after jobs create writes nothing")

	out, err = tr.run(t, "jobs", "delete", "acme/chat")
	require.Error(t, err, "no --yes and no terminal")
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), "stdin is not a terminal: pass --yes")
	assert.Equal(t, snap, everything(t, tr.out))

	out, err = tr.run(t, "jobs", "delete", "acme/chat", "--dry-run")
	require.NoError(t, err, out)
	assert.Contains(t, out, "acme: would be updated (")
	assert.Contains(t, out, "+++ /dev/null")
	assert.Equal(t, snap, everything(t, tr.out), "a dry run writes nothing")

	out, err = tr.run(t, "jobs", "delete", "acme/chat", "--yes")
	require.NoError(t, err, out)
	assert.Contains(t, out, "its prune deletes Application acme-chat")
	assert.Equal(t, before, files(t, tr.tenants), "the inputs are as before")
	assert.Equal(t, neverExisted, files(t, filepath.Join(tr.out, "acme")), "the repository is as if the job never existed")
}

// --no-commit writes the job file only; --dry-run writes nothing; --replace overwrites.
func TestJobsCreateModes(t *testing.T) {
	tr := newJobsTree(t)
	out, err := tr.run(t, "jobs", "create", "acme/asr", "--model", "nvidia/parakeet-tdt-0.6b-v3", "--dry-run")
	require.NoError(t, err, out)
	assert.Contains(t, out, "would write "+filepath.Join(tr.tenants, "acme", "jobs", "asr.yaml")+":")
	assert.Contains(t, out, "runtime: parakeet", "the Parakeet model implies its runtime")
	assert.Contains(t, out, "acme: would be created (")
	assert.NoFileExists(t, filepath.Join(tr.tenants, "acme", "jobs", "asr.yaml"))
	assert.NoDirExists(t, tr.out)

	out, err = tr.run(t, "jobs", "create", "acme/asr", "--model", "nvidia/parakeet-tdt-0.6b-v3", "--no-commit")
	require.NoError(t, err, out)
	assert.Contains(t, out, "nothing committed: `inferplane generate` commits the change shown above")
	assert.FileExists(t, filepath.Join(tr.tenants, "acme", "jobs", "asr.yaml"))
	assert.NoDirExists(t, tr.out)

	out, err = tr.run(t, "jobs", "create", "acme/asr", "--model", "nvidia/parakeet-tdt-0.6b-v3", "--replicas", "2", "--replace")
	require.NoError(t, err, out)
	b, _ := os.ReadFile(filepath.Join(tr.tenants, "acme", "jobs", "asr.yaml"))
	assert.Contains(t, string(b), "replicas: 2")
	assert.FileExists(t, filepath.Join(tr.out, "acme", "jobs", "asr", "r1-n0-vm.yaml"))
}

// Bad input: each a clear error (the generator's own messages where it decides), the exit
// status, and nothing written or committed.
func TestJobsCreateBadInput(t *testing.T) {
	tr := newJobsTree(t)
	out, err := tr.run(t, "generate")
	require.NoError(t, err, out)
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"acmee/chat", "--model", "Qwen/Qwen3-32B"}, 1,
			[]string{`unknown tenant "acmee": no acmee/tenant.yaml in ` + tr.tenants + `; did you mean acme? (tenants: acme, globex, initech)`}},
		{[]string{"acme/qwen3-32b", "--model", "Qwen/Qwen3-32B"}, 1,
			[]string{"job acme/qwen3-32b exists (" + filepath.Join(tr.tenants, "acme", "jobs", "qwen3-32b.yaml") + "); pass --replace to overwrite it"}},
		{[]string{"acme/chat", "--model", "Qwen/Qwen3-23B"}, 1,
			[]string{filepath.Join(tr.tenants, "acme", "jobs", "chat.yaml") + `: spec.model: unknown model "Qwen/Qwen3-23B"; did you mean Qwen/Qwen3-32B, Qwen/Qwen3-4B, Qwen/Qwen3-8B?`}},
		{[]string{"acme/chat", "--model", "Qwen/Qwen3-32B", "--gpus", "2"}, 1,
			[]string{"spec.gpuCount is 2: must equal perReplicaGPUCount 1 of ModelMaster qwen3-32b-h100"}},
		{[]string{"acme/chat", "--model", "Qwen/Qwen3-32B", "--node-type", "metal3.gpu-h200"}, 1,
			[]string{`spec.nodeType is "metal3.gpu-h200": not allowed for Tenant acme (allowedNodeTypes: [metal3.gpu-h100]); Tenant acme may use: metal3.gpu-h100`}},
		{[]string{"initech/chat", "--model", "Qwen/Qwen3-32B"}, 1,
			[]string{"spec.nodeType is missing: must name a NodeType; Tenant initech may use no node type (allowedNodeTypes: [])"}},
		{[]string{"acme/chat", "--model", "Qwen/Qwen3-32B", "--replicas", "13"}, 1,
			[]string{"spec.replicas is 13: needs 13 GPUs (13 replicas x 1), but Tenant acme's GPU quota is 16 and its other jobs use 4 (mistral-small 1x1, qwen3-32b 2x1, transcribe 1x1): 12 left"}},
		{[]string{"acme/Chat", "--model", "Qwen/Qwen3-32B"}, 2, []string{`job "Chat": must be lower-case letters, digits and '-'`}},
		{[]string{"acme/../globex", "--model", "Qwen/Qwen3-32B"}, 2, []string{`job "../globex": must be lower-case letters, digits and '-'`}},
		{[]string{"acme/" + strings.Repeat("c", 58), "--model", "Qwen/Qwen3-32B"}, 2, []string{"must be at most 57 characters (it has 58)"}},
		{[]string{"acme/chat", "--model", "Qwen/Qwen3-32B", "--feature", "reasoning"}, 2, []string{`--feature "reasoning": expected name=on or name=off`}},
	}
	snapIn, snapOut := everything(t, tr.tenants), everything(t, tr.out)
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := tr.run(t, append([]string{"jobs", "create"}, tc.args...)...)
			require.Error(t, err, out)
			assert.Equal(t, tc.code, exitCode(err), err.Error())
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			if strings.HasPrefix(tc.args[0], "initech/") {
				assert.NotContains(t, err.Error(), "metal3.", "nothing is offered to a tenant that may use no node type")
			}
			assert.Equal(t, snapIn, everything(t, tr.tenants), "nothing written to the inputs")
			assert.Equal(t, snapOut, everything(t, tr.out), "nothing written or committed")
		})
	}

	_, err = tr.run(t, "jobs", "delete", "acme/chta", "--yes")
	assert.EqualError(t, err, `tenant acme has no job "chta" (jobs: mistral-small, qwen3-32b, transcribe)`)
	_, err = tr.run(t, "jobs", "delete", "acme", "--yes")
	assert.Equal(t, 2, exitCode(err))
	assert.ErrorContains(t, err, `"acme": expected <tenant>/<job>, e.g. acme/chat`)
	assert.Equal(t, snapIn, everything(t, tr.tenants))
}

// `jobs delete` says which API keys limited to the job's endpoint stay active; with
// --revoke-keys it revokes them, and only them.
func TestJobsDeleteAndTheEndpointsKeys(t *testing.T) {
	tr := newJobsTree(t)
	store, secret := filepath.Join(t.TempDir(), "keys.db"), writeKeySecret(t)
	key := func(args ...string) string {
		t.Helper()
		args = append([]string{"keys", "create", "--tenant", "acme", "--tenants", tr.tenants, "--store-file", store, "--secret-file", secret, "-o", "json"}, args...)
		out, errOut, err := execCLI(context.Background(), args...)
		require.NoError(t, err, errOut)
		var created struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &created), out)
		require.NotEmpty(t, created.ID, out)
		return created.ID
	}
	status := func(id string) string {
		t.Helper()
		out, errOut, err := execCLI(context.Background(), "keys", "list", "--store-file", store, "-o", "json")
		require.NoError(t, err, errOut)
		var views []keyView
		require.NoError(t, json.Unmarshal([]byte(out), &views), out)
		for _, v := range views {
			if v.ID == id {
				return string(v.Status)
			}
		}
		return "missing"
	}

	out, err := tr.run(t, "jobs", "create", "acme/chat", "--model", "Qwen/Qwen3-32B")
	require.NoError(t, err, out)
	chatKey, tenantKey := key("--endpoint", "chat"), key()
	out, err = tr.run(t, "jobs", "delete", "acme/chat", "--yes", "--store-file", store)
	require.NoError(t, err, out)
	assert.Contains(t, out, "1 API key(s) limited to endpoint acme/chat stay active: "+chatKey+"; revoke them with `inferplane keys revoke "+chatKey+"`")
	assert.Equal(t, "active", status(chatKey))

	out, err = tr.run(t, "jobs", "create", "acme/chat", "--model", "Qwen/Qwen3-32B")
	require.NoError(t, err, out)
	out, err = tr.run(t, "jobs", "delete", "acme/chat", "--yes", "--revoke-keys", "--store-file", store)
	require.NoError(t, err, out)
	assert.Contains(t, out, "revoked "+chatKey+" (tenant acme)")
	assert.Equal(t, "revoked", status(chatKey))
	assert.Equal(t, "active", status(tenantKey), "a key for every endpoint of the tenant is not the job's")
}
