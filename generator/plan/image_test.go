package plan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/generator/internal/gentest"
)

// A master's imageDigest pins what the guest runs: image@digest.
func TestBuildImageDigestPins(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tree := gentest.Copy(t, "../../tenants")
	gentest.Edit(t, tree, "masters/mistral-small-24b.yaml", "  image: vllm/vllm-openai:v0.10.2\n",
		"  image: vllm/vllm-openai:v0.10.2\n  imageDigest: "+digest+"\n")
	p, err := build(t, tree, book(t))
	require.NoError(t, err)
	assert.Equal(t, "vllm/vllm-openai:v0.10.2@"+digest, findJob(t, p, "acme", "mistral-small").Image)
	assert.Equal(t, "vllm/vllm-openai:v0.27.1", findJob(t, p, "acme", "qwen3-32b").Image, "recipe masters keep the recipe's image")
}
