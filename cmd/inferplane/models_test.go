package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testDigest = "sha256:4f1c9e2b7a3d5e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"

// models add writes the derived master as a hand-written one, pinned to a digest; a job that
// names it runs image@digest, and the master survives generate's checks of masters/.
func TestModelsAddPinnedMaster(t *testing.T) {
	tr := newJobsTree(t)
	file := filepath.Join(tr.tenants, "masters", "qwen3-32b-pinned.yaml")
	args := []string{"models", "add", "--from-recipe", "Qwen/Qwen3-32B", "--node-type", "metal3.gpu-h100", "--name", "qwen3-32b-pinned",
		"--image", "vllm/vllm-openai:v0.10.2", "--image-digest", testDigest, "--file", file, "--tenants", tr.tenants, "--recipes", "../../recipes"}
	out, errOut, err := execCLI(t.Context(), args...)
	require.NoError(t, err, errOut)
	assert.Contains(t, out, "wrote "+file+"; jobs run this master with spec.model: qwen3-32b-pinned")
	assert.Empty(t, errOut, "a pinned image needs no note")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	for _, want := range []string{"kind: ModelMaster\n", "  name: qwen3-32b-pinned\n", "  image: vllm/vllm-openai:v0.10.2\n",
		"  imageDigest: " + testDigest + "\n", "  perReplicaGPUCount: 1\n", "  - --reasoning-parser\n"} {
		assert.Contains(t, string(data), want)
	}

	_, _, err = execCLI(t.Context(), args...)
	assert.ErrorContains(t, err, file+" exists: pass --force to overwrite it")

	o, err := tr.run(t, "jobs", "create", "acme/chat", "--model", "qwen3-32b-pinned")
	require.NoError(t, err, o)
	vm, err := os.ReadFile(filepath.Join(tr.out, "acme", "jobs", "chat", "r0-n0-cloud-init.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(vm), "vllm/vllm-openai:v0.10.2@"+testDigest+" \\")
}

// The default image is a release tag, which models add takes without a note; a tag that moves
// gets one; a bad pin is refused with the master check's message and nothing is written.
func TestModelsAddChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "m.yaml")
	_, errOut, err := execCLI(t.Context(), "models", "add", "--from-recipe", "Qwen/Qwen3-32B", "--node-type", "h100",
		"--file", file, "--recipes", "../../recipes", "--tenants", "../../tenants")
	require.NoError(t, err)
	assert.NotContains(t, errOut, "is a tag that moves")

	moving := filepath.Join(dir, "latest.yaml")
	_, errOut, err = execCLI(t.Context(), "models", "add", "--from-recipe", "Qwen/Qwen3-32B", "--node-type", "h100",
		"--image", "vllm/vllm-openai:latest", "--file", moving, "--recipes", "../../recipes", "--tenants", "../../tenants")
	require.NoError(t, err)
	assert.Contains(t, errOut, "note: image vllm/vllm-openai:latest is a tag that moves")

	bad := filepath.Join(dir, "bad.yaml")
	_, _, err = execCLI(t.Context(), "models", "add", "--from-recipe", "Qwen/Qwen3-32B", "--node-type", "h100",
		"--image-digest", "sha256:1234", "--file", bad, "--recipes", "../../recipes", "--tenants", "../../tenants")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `spec.imageDigest: is "sha256:1234"; expected sha256: and 64 lower-case hex digits`)
	assert.NoFileExists(t, bad)

	_, _, err = execCLI(t.Context(), "models", "add", "--from-recipe", "Qwen/Qwen3-23B", "--file", bad, "--recipes", "../../recipes", "--tenants", "../../tenants")
	assert.ErrorContains(t, err, "did you mean Qwen/Qwen3-32B")
	assert.NoFileExists(t, bad)

	_, _, err = execCLI(t.Context(), "models", "add", "--from-recipe", "Qwen/Qwen3-32B", "--file", strings.TrimSuffix(bad, ".yaml")+".txt",
		"--recipes", "../../recipes", "--tenants", "../../tenants")
	assert.Equal(t, 2, exitCode(err))
}
