package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validateCLI runs the command line and returns the exit code main would use.
func validateCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, err := execCLI(context.Background(), args...)
	if err != nil {
		return stdout, stderr + "inferplane: " + err.Error() + "\n", exitCode(err)
	}
	return stdout, stderr, 0
}

const validateData = "testdata/validate"

func TestValidateGoodTree(t *testing.T) {
	stdout, stderr, code := validateCLI(t, "validate", "--tenants", validateData+"/tenants", validateData+"/good")
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "skipping "+validateData+"/good/vcluster.yaml: no Kubernetes object in it")
	assert.Contains(t, stderr, "validate: 7 files, 10 objects: 7 checked (labelled inferplane.io/tenant), 0 denied")
	assert.NotContains(t, stderr, "broken.yaml", "hidden folders are skipped")
}

func TestValidateBadTree(t *testing.T) {
	stdout, stderr, code := validateCLI(t, "validate", "--tenants", validateData+"/tenants", validateData+"/bad")
	assert.Equal(t, 1, code)
	assert.Equal(t, `DENY ManagedInferenceJob/acme/chat: spec.nodeType is "gcp.l4": not allowed for Tenant acme (allowedNodeTypes: [aws.*]); Tenant acme may use: aws.h100
DENY ManagedInferenceJob/acme/chat: spec.gpuCount is 8: must equal perReplicaGPUCount 4 of ModelMaster qwen-4
DENY VirtualMachine/acme/chat-r0-n0: spec.template.spec.domain.devices.gpus[0].deviceName is "nvidia.com/GB200": must be "nvidia.com/GH100_H100_SXM5_80GB", the GPU of NodeType aws.h100
DENY VirtualMachine/acme/chat-r0-n0: spec.template.spec.domain.devices.gpus is 5: must be 4: a replica of ModelMaster qwen-4 needs 4 GPUs, which fit one node of NodeType aws.h100 (8 GPUs): one VM with all 4
`, stdout)
	assert.Contains(t, stderr, "validate: 2 files, 2 objects: 2 checked (labelled inferplane.io/tenant), 2 denied")
	assert.Contains(t, stderr, "inferplane: 2 of 2 checked objects denied")
}

// TestValidatePolicyDataFromPaths: without --tenants, the data must come from the PATHs; the
// objects of one file are enough when they carry it.
func TestValidatePolicyDataFromPaths(t *testing.T) {
	stdout, _, code := validateCLI(t, "validate", validateData+"/good/acme/jobs/chat/job.yaml")
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, `DENY ManagedInferenceJob/acme/chat: metadata.labels[inferplane.io/tenant] is "acme": no Tenant "acme" in the policy data`)

	_, stderr, code := validateCLI(t, "validate", validateData+"/tenants/acme", validateData+"/tenants/nodetypes",
		validateData+"/tenants/masters", validateData+"/good/acme/jobs/chat")
	assert.Equal(t, 0, code, stderr)
}

func TestValidateUnusableInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	job, err := os.ReadFile(validateData + "/good/acme/jobs/chat/job.yaml")
	require.NoError(t, err)
	master, err := os.ReadFile(validateData + "/tenants/masters/qwen-4.yaml")
	require.NoError(t, err)

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no path", []string{"validate"}, "validate needs at least one PATH"},
		{"missing path", []string{"validate", filepath.Join(dir, "nope")}, "no such file or directory"},
		{"YAML error", []string{"validate", write("broken.yaml", "kind: [unclosed\n")}, "broken.yaml: document 1"},
		{"no kind", []string{"validate", write("nokind.yaml", "apiVersion: v1\nmetadata: {name: x}\n")}, "apiVersion and kind are required"},
		{"unknown field", []string{"validate", write("unknown.yaml", strings.Replace(string(job), "gpuCount:", "gpus: 4\n  gpuCount:", 1))},
			`unknown.yaml: ManagedInferenceJob/chat: ManagedInferenceJob: unknown field "spec.gpus"`},
		{"unserved version", []string{"validate", write("version.yaml", strings.Replace(string(job), "inferplane.io/v1alpha1", "inferplane.io/v1beta1", 1))},
			`apiVersion "inferplane.io/v1beta1" is not served; want inferplane.io/v1alpha1`},
		{"wrong type", []string{"validate", write("type.yaml", strings.Replace(string(job), "gpuCount: 4", "gpuCount: four", 1))}, "gpuCount"},
		{"conflicting masters", []string{"validate", write("m1.yaml", string(master)),
			write("m2.yaml", strings.Replace(string(master), "perReplicaGPUCount: 4", "perReplicaGPUCount: 8", 1))},
			`ModelMaster "qwen-4" is defined twice with different specs`},
		{"tenants not a folder", []string{"validate", "--tenants", filepath.Join(dir, "nope"), validateData + "/bad"}, "not a folder"},
		{"bad flag", []string{"validate", "--frobnicate", validateData + "/bad"}, "unknown flag: --frobnicate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := validateCLI(t, tc.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Empty(t, stdout, "nothing is judged on unusable input")
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// TestValidateWithRecipes: a job naming a recipe model gets the master the generator would
// derive for its node type (the bundled recipes and tenants).
func TestValidateWithRecipes(t *testing.T) {
	job := `apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: qwen
  namespace: acme
  labels: {inferplane.io/tenant: acme}
spec:
  model: Qwen/Qwen3-32B
  replicas: 1
  gpuCount: 64
  nodeType: metal3.gpu-h100
`
	p := filepath.Join(t.TempDir(), "job.yaml")
	require.NoError(t, os.WriteFile(p, []byte(job), 0o644))

	stdout, _, code := validateCLI(t, "validate", "--tenants", "../../tenants", p)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, `DENY ManagedInferenceJob/acme/qwen: spec.model is "Qwen/Qwen3-32B": no ModelMaster "Qwen/Qwen3-32B" in the policy data`)

	stdout, stderr, code := validateCLI(t, "validate", "--tenants", "../../tenants", "--recipes", "../../recipes", p)
	assert.Equal(t, 1, code, stderr)
	assert.Regexp(t, `DENY ManagedInferenceJob/acme/qwen: spec.gpuCount is 64: must equal perReplicaGPUCount \d+ of ModelMaster qwen3-32b-h100`, stdout)
	assert.NotContains(t, stdout, "no ModelMaster")
}

// TestValidateGeneratorOutput renders the bundled examples with `inferplane generate` and
// checks that the webhook's rules admit every object the generator commits.
func TestValidateGeneratorOutput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, stderr, code := validateCLI(t, "generate", "--recipes", "../../recipes", "--tenants", "../../tenants", "--out-dir", out)
	require.Equal(t, 0, code, stderr)
	stdout, stderr, code := validateCLI(t, "validate", out)
	assert.Equal(t, 0, code, stdout+stderr)
	assert.Empty(t, stdout)
	assert.Regexp(t, `validate: \d+ files, \d+ objects: \d+ checked`, stderr)
	assert.NotContains(t, stderr, ": 0 checked", "the generator's workloads are labelled, so they are checked")
}

// TestValidateInputJobs: input job files carry no tenant label; validate takes the tenant from
// the <tenant>/jobs/ folder (as generate does) and applies the webhook's rules, so a wrong
// gpuCount is denied rather than passed as "0 checked".
func TestValidateInputJobs(t *testing.T) {
	jobs := filepath.Join(t.TempDir(), "acme", "jobs")
	require.NoError(t, os.MkdirAll(jobs, 0o755))
	for _, name := range []string{"mistral-small.yaml", "qwen3-32b.yaml", "transcribe.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../tenants/acme/jobs", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(jobs, name), data, 0o644))
	}
	_, stderr, code := validateCLI(t, "validate", "--tenants", "../../tenants", "--recipes", "../../recipes", jobs)
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "3 checked (labelled inferplane.io/tenant, 3 input jobs by their folder), 0 denied")

	data, err := os.ReadFile(filepath.Join(jobs, "mistral-small.yaml"))
	require.NoError(t, err)
	bad := filepath.Join(jobs, "x.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(strings.Replace(string(data), "gpuCount: 1", "gpuCount: 3", 1),
		"name: mistral-small", "name: x", 1)), 0o644))
	stdout, stderr, code := validateCLI(t, "validate", "--tenants", "../../tenants", bad)
	assert.Equal(t, 1, code, stderr)
	assert.Equal(t, "DENY ManagedInferenceJob/acme/x: spec.gpuCount is 3: must equal perReplicaGPUCount 1 of ModelMaster mistral-small-24b\n", stdout)

	// A recipe model without --recipes: denied as generate denies it, with a hint saying what to
	// pass.
	stdout, stderr, code = validateCLI(t, "validate", "--tenants", "../../tenants", filepath.Join(jobs, "qwen3-32b.yaml"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, `DENY ManagedInferenceJob/acme/qwen3-32b: spec.model: unknown model "Qwen/Qwen3-32B" (no recipes are loaded)`)
	assert.Contains(t, stderr, `names model "Qwen/Qwen3-32B", which is no ModelMaster: pass --recipes DIR`)
}

// TestValidateNothingChecked: when no object is inferplane's, validate says so loudly and exits
// 2, unless --allow-empty.
func TestValidateNothingChecked(t *testing.T) {
	stdout, stderr, code := validateCLI(t, "validate", validateData+"/good/unrelated.yaml")
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "0 checked")
	assert.Contains(t, stderr, "NOTHING WAS CHECKED")
	_, stderr, code = validateCLI(t, "validate", "--allow-empty", validateData+"/good/unrelated.yaml")
	assert.Equal(t, 0, code, stderr)
}

// TestValidateHelpExamples runs the examples of `validate --help` on the bundled inputs (the
// rendered repository generated first): each does what its comment says.
func TestValidateHelpExamples(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(root, "tenants"), os.DirFS("../../tenants")))
	require.NoError(t, os.CopyFS(filepath.Join(root, "recipes"), os.DirFS("../../recipes")))
	t.Chdir(root)

	help, _, err := execCLI(context.Background(), "validate", "--help")
	require.NoError(t, err)
	_, examples, ok := strings.Cut(help, "Examples:")
	require.True(t, ok, help)
	examples, _, _ = strings.Cut(examples, "Flags:")
	var ran int
	for _, line := range strings.Split(examples, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "inferplane ") {
			continue
		}
		for _, cmdline := range strings.Split(line, " && ") {
			args := strings.Fields(strings.TrimPrefix(cmdline, "inferplane "))
			stdout, stderr, code := validateCLI(t, args...)
			assert.Equal(t, 0, code, "%s:\n%s%s", cmdline, stdout, stderr)
			if args[0] == "validate" {
				assert.Regexp(t, `: [1-9]\d* checked`, stderr, cmdline)
			}
			ran++
		}
	}
	assert.Equal(t, 4, ran, "the examples run: %s", examples)
}
