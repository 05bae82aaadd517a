package validate_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/generator/validate"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// TestRunInputJob: an input job is judged as generate judges it, and the result is data (field
// errors with paths), not text: what the product API turns into its problems.
func TestRunInputJob(t *testing.T) {
	in, err := inputs.Load(os.DirFS("../../tenants"), "tenants")
	require.NoError(t, err)
	book, err := recipe.Load(os.DirFS("../../recipes"))
	require.NoError(t, err)
	job, err := os.ReadFile("../../tenants/acme/jobs/qwen3-32b.yaml")
	require.NoError(t, err)
	bad := strings.Replace(strings.Replace(string(job), "gpuCount: 1", "gpuCount: 2", 1), "nodeType: metal3.gpu-h100", "nodeType: metal3.gpu-h200", 1)

	rep, err := validate.Run(context.Background(), validate.Options{
		Files:  map[string][]byte{"x/acme/jobs/qwen3-32b.yaml": []byte(bad), "x/acme/jobs/ok.yaml": job},
		Inputs: in, Book: book,
	})
	require.NoError(t, err)
	assert.Equal(t, 2, rep.InputJobs)
	assert.Equal(t, 2, rep.Checked())
	denied := rep.Denied()
	require.Len(t, denied, 1)
	assert.Equal(t, "ManagedInferenceJob/acme/qwen3-32b", denied[0].Ref.String())
	require.Len(t, denied[0].Errors, 2)
	assert.Equal(t, "spec.nodeType", denied[0].Errors[0].Field)
	assert.Equal(t, `spec.nodeType is "metal3.gpu-h200": not allowed for Tenant acme (allowedNodeTypes: [metal3.gpu-h100]); Tenant acme may use: metal3.gpu-h100`,
		fielderr.Describe(denied[0].Errors[0]))
	assert.Equal(t, "spec.gpuCount", denied[0].Errors[1].Field)
	assert.Equal(t, int32(2), denied[0].Errors[1].BadValue)

	_, err = validate.Run(context.Background(), validate.Options{Files: map[string][]byte{"broken.yaml": []byte("kind: [")}})
	assert.ErrorContains(t, err, "broken.yaml")
}

// TestMovingTagWarning: validate warns on a master whose runtime image is a moving tag without
// a digest (a file's master, and the master an input job resolves to), and not on a pinned one.
func TestMovingTagWarning(t *testing.T) {
	in, err := inputs.Load(os.DirFS("../../tenants"), "tenants")
	require.NoError(t, err)
	master := func(name, image, digest string) []byte {
		return []byte("apiVersion: inferplane.io/v1alpha1\nkind: ModelMaster\nmetadata:\n  name: " + name +
			"\nspec:\n  runtime: vllm\n  model: Qwen/Qwen3-32B\n  image: " + image + digest +
			"\n  perReplicaGPUCount: 1\n  tensorParallelSize: 1\n  pipelineParallelSize: 1\n")
	}
	const digest = "\n  imageDigest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	rep, err := validate.Run(context.Background(), validate.Options{
		Files: map[string][]byte{
			"m/latest.yaml":  master("on-latest", "vllm/vllm-openai:latest", ""),
			"m/nightly.yaml": master("on-nightly", "vllm/vllm-openai:nightly", ""),
			"m/pinned.yaml":  master("on-release", "vllm/vllm-openai:v0.27.1", ""),
			"m/digest.yaml":  master("on-digest", "vllm/vllm-openai:latest", digest),
		},
		Inputs: in,
	})
	require.NoError(t, err)
	notes := strings.Join(rep.Notes, "\n")
	assert.Contains(t, notes, "warning: ModelMaster/on-latest (m/latest.yaml): runtime image vllm/vllm-openai:latest tag latest moves to every new build")
	assert.Contains(t, notes, "warning: ModelMaster/on-nightly (m/nightly.yaml): runtime image vllm/vllm-openai:nightly tag nightly")
	assert.NotContains(t, notes, "on-release")
	assert.NotContains(t, notes, "on-digest")
}
