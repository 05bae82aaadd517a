package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/render"
)

// runCLI runs the command line and returns stdout and stderr together.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := execCLI(context.Background(), args...)
	return out + errOut, err
}

func TestGenerateCommandOnTheBundledExamples(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	common := []string{"generate", "--recipes", "../../recipes", "--tenants", "../../tenants", "--out-dir", out}

	stdout, err := runCLI(t, append(common, "--dry-run")...)
	require.NoError(t, err)
	assert.Contains(t, stdout, "acme: would be created (")
	assert.NoDirExists(t, out, "--dry-run writes nothing")

	stdout, err = runCLI(t, common...)
	require.NoError(t, err)
	for _, tenant := range []string{"acme", "globex", "initech", "platform"} {
		assert.Contains(t, stdout, tenant+": created (")
		assert.DirExists(t, filepath.Join(out, tenant, ".git"))
	}
	stdout, err = runCLI(t, common...)
	require.NoError(t, err)
	assert.Equal(t, 4, strings.Count(stdout, ": unchanged ("), stdout)
}

func TestGenerateCommandBadInput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, err := runCLI(t, "generate", "--recipes", "../../recipes", "--tenants", filepath.Join(t.TempDir(), "none"), "--out-dir", out)
	require.Error(t, err)
	assert.Equal(t, 1, exitCode(err))
	assert.Contains(t, err.Error(), "does not exist or is not a folder")
	assert.NoDirExists(t, out)

	_, err = runCLI(t, "generate", "extra-arg")
	require.Error(t, err)
}

func TestRecipeShowCommand(t *testing.T) {
	stdout, err := runCLI(t, "recipe", "show", "Qwen/Qwen3-32B", "--node-type", "h100", "--recipes", "../../recipes", "--tenants", "../../tenants")
	require.NoError(t, err)
	for _, want := range []string{"kind: ModelMaster", "name: qwen3-32b-h100", "tensorParallelSize: 1", "toolCallParser: hermes", "reasoningParser: qwen3"} {
		assert.Contains(t, stdout, want)
	}

	// A node type of the tenants folder: Kimi-K2 spans two 8-GPU H200 nodes.
	stdout, err = runCLI(t, "recipe", "show", "moonshotai/Kimi-K2-Instruct", "--node-type", "metal3.gpu-h200", "-o", "json",
		"--recipes", "../../recipes", "--tenants", "../../tenants")
	require.NoError(t, err)
	assert.Contains(t, stdout, `"perReplicaGPUCount": 16`)
	assert.Contains(t, stdout, `"nodes": 2`)

	// Data-parallel over two nodes; a pick-one feature's mode; KV offload.
	stdout, err = runCLI(t, "recipe", "show", "deepseek-ai/DeepSeek-V3.2", "--strategy", "multi_node_dep", "--node-type", "h200",
		"--recipes", "../../recipes", "--tenants", "../../tenants")
	require.NoError(t, err)
	for _, want := range []string{"dataParallelSize: 16", "perReplicaGPUCount: 16", "- --data-parallel-size-local\n  - \"8\"", "strategy: multi_node_dep"} {
		assert.Contains(t, stdout, want)
	}
	stdout, err = runCLI(t, "recipe", "show", "deepseek-ai/DeepSeek-V4-Pro", "--variant", "fp8", "--mode", "spec_decoding=mtp", "--node-type", "b200",
		"--kv-offload", "offloading_cpu", "--recipes", "../../recipes", "--tenants", "../../tenants")
	require.NoError(t, err)
	for _, want := range []string{`{"method":"mtp","num_speculative_tokens":2}`, "spec_decoding: mtp", "kvOffload: offloading_cpu", `"kv_connector":"OffloadingConnector"`} {
		assert.Contains(t, stdout, want)
	}

	// Features toggle: reasoning off drops its parser.
	stdout, err = runCLI(t, "recipe", "show", "Qwen/Qwen3-32B", "--feature", "reasoning=off", "--recipes", "../../recipes", "--tenants", "../../tenants")
	require.NoError(t, err)
	assert.NotContains(t, stdout, "reasoning-parser")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"Qwen/Qwen3-32B", "--node-type", "h900"}, `--node-type "h900": expected a node type (metal3.gpu-h100, metal3.gpu-h200) or a taxonomy hardware profile (h100, h200`},
		{[]string{"Qwen/Qwen3-32B", "--variant", "fp9"}, `variant: recipe Qwen/Qwen3-32B has no variant "fp9"; its variants: default, fp8, awq`},
		{[]string{"Qwen/Qwen3-32B", "--feature", "reasoning"}, `--feature "reasoning": expected name=on or name=off`},
		{[]string{"Qwen/Qwen3-32B", "-o", "xml"}, `-o "xml": expected yaml or json`},
		{[]string{"Nobody/Nothing"}, `unknown model "Nobody/Nothing"`},
		{[]string{"Qwen/Qwen3-32B", "--mode", "spec_decoding"}, `--mode "spec_decoding": expected feature=mode, e.g. spec_decoding=mtp`},
		{[]string{"Qwen/Qwen3-32B", "--kv-offload", "simpel"}, `kvOffload: unknown KV offload option "simpel"; taxonomy.yaml offers simple,`},
		{[]string{"moonshotai/Kimi-K2-Instruct", "--strategy", "pd_cluster", "--node-type", "h200"}, `strategy: strategy pd_cluster is not rendered by inferplane`},
	} {
		_, err := runCLI(t, append(append([]string{"recipe", "show"}, c.args...), "--recipes", "../../recipes", "--tenants", "../../tenants")...)
		require.Error(t, err, "%v", c.args)
		assert.Contains(t, err.Error(), c.want)
	}
}

func TestRecipeListCommand(t *testing.T) {
	stdout, err := runCLI(t, "recipe", "list", "--recipes", "../../recipes")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	assert.Len(t, lines, 174, "a header and the 173 recipes")
	assert.Regexp(t, `^MODEL +VARIANTS +STRATEGIES +NOT RENDERED$`, lines[0])
	assert.Contains(t, stdout, "default,fp8,awq")
	// What recipe show refuses is marked: pd_cluster, and every strategy of a vllm-omni recipe.
	assert.Regexp(t, `(?m)^MiniMaxAI/MiniMax-M2 +default,nvfp4 +single_node_tp,single_node_tep,single_node_dep,multi_node_tp,multi_node_tp_pp,multi_node_tep,multi_node_dep +pd_cluster$`, stdout)
	assert.Regexp(t, `(?m)^Qwen/Qwen-Image +\S+ +- +all \(vllm-omni\)$`, stdout)
}

// TestAdmissionCheckRefusesWhatTheWebhookWouldDeny: generate's pre-commit check is the
// webhook's policy. The bundled acme tree passes; the same tree with one VM asking for an
// extra GPU is refused with the webhook's denial.
func TestAdmissionCheckRefusesWhatTheWebhookWouldDeny(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, err := runCLI(t, "generate", "--recipes", "../../recipes", "--tenants", "../../tenants", "--out-dir", out)
	require.NoError(t, err)

	files := render.Files{}
	root := filepath.Join(out, "acme")
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	}))

	check := generator.AdmissionCheck(context.Background())
	require.NoError(t, check("acme", files))

	vm := "jobs/qwen3-32b/r0-n0-vm.yaml"
	gpu0 := "          - deviceName: nvidia.com/GH100_H100_SXM5_80GB\n            name: gpu0\n"
	require.Contains(t, string(files[vm]), gpu0)
	files[vm] = []byte(strings.Replace(string(files[vm]),
		gpu0, gpu0+
			"          - deviceName: nvidia.com/GH100_H100_SXM5_80GB\n            name: gpu1\n", 1))
	err = check("acme", files)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DENY VirtualMachine/acme/qwen3-32b-r0-n0: spec.template.spec.domain.devices.gpus is 2: must be 1")
}

// TestRecipeWarningsShown: a recipe that loads but looks wrong (its model_id is not the id its
// path gives) is reported on stderr by generate and validate, and by recipe show when it is
// the recipe shown (recipe show reads that recipe alone).
func TestRecipeWarningsShown(t *testing.T) {
	recipes := filepath.Join(t.TempDir(), "recipes")
	require.NoError(t, os.CopyFS(recipes, os.DirFS("../../recipes")))
	odd := filepath.Join(recipes, "models", "acme", "Other.yaml")
	require.NoError(t, os.MkdirAll(filepath.Dir(odd), 0o755))
	require.NoError(t, os.WriteFile(odd, []byte("model: {model_id: acme/Other-NVFP4}\nvariants: {default: {precision: bf16}}\n"), 0o644))
	want := `models/acme/Other.yaml: model.model_id "acme/Other-NVFP4" differs from the id its path gives`

	// Shown by the commands that read that recipe, or all of the tree's.
	_, stderr, err := execCLI(context.Background(), "recipe", "show", "acme/Other", "--recipes", recipes, "--tenants", "../../tenants")
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "warning: "+recipes+": "+want)
	stdout, _, err := execCLI(context.Background(), "recipe", "list", "--warnings", "--recipes", recipes)
	require.NoError(t, err)
	assert.Contains(t, stdout, want)
	// Not by those whose jobs do not use it (TestRecipeWarningsOnlyWhenAsked).
	for _, args := range [][]string{
		{"generate", "--dry-run", "--recipes", recipes, "--tenants", "../../tenants", "--out-dir", filepath.Join(t.TempDir(), "out")},
		{"validate", "--allow-empty", "--recipes", recipes, "testdata/validate/good/unrelated.yaml"},
	} {
		_, stderr, err := execCLI(context.Background(), args...)
		require.NoError(t, err, "%v: %s", args, stderr)
		assert.NotContains(t, stderr, want, args[0])
	}
}
