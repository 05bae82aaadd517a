package inputs

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/generator/internal/gentest"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// A master pins its image by an immutable tag or by spec.imageDigest; a digest must be one,
// belong to a named image, and be given once.
func TestLoadImagePin(t *testing.T) {
	pinned := strings.Replace(masterMistral, "  image: vllm/vllm-openai:v0.10.1\n",
		"  image: vllm/vllm-openai:v0.10.1\n  imageDigest: "+testDigest+"\n", 1)
	tree := validTree()
	tree["masters/mistral.yaml"] = &fstest.MapFile{Data: []byte(pinned)}
	in, err := Load(tree, "tenants")
	require.NoError(t, err)
	assert.Equal(t, testDigest, in.Masters[0].Object.Spec.ImageDigest)

	cases := []struct {
		name, from, to string
		want           gentest.Want
	}{
		{"not a digest", testDigest, "sha256:abc", gentest.Want{"tenants/masters/mistral.yaml", "spec.imageDigest", `is "sha256:abc"`, "64 lower-case hex"}},
		{"upper-case digest", testDigest, strings.ToUpper(testDigest), gentest.Want{"tenants/masters/mistral.yaml", "spec.imageDigest", "is", "sha256:"}},
		{"digest without an image", "  image: vllm/vllm-openai:v0.10.1\n", "", gentest.Want{"tenants/masters/mistral.yaml", "spec.image", "missing", "the image the digest"}},
		{"two digests", "image: vllm/vllm-openai:v0.10.1", "image: vllm/vllm-openai@" + testDigest,
			gentest.Want{"tenants/masters/mistral.yaml", "spec.imageDigest", "has a digest already", "in one place"}},
		{"an URL for an image", "image: vllm/vllm-openai:v0.10.1", "image: https://hub.docker.com/vllm",
			gentest.Want{"tenants/masters/mistral.yaml", "spec.image", "is not an image reference", "vllm/vllm-openai:v0.10.2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := validTree()
			tree["masters/mistral.yaml"] = &fstest.MapFile{Data: []byte(strings.Replace(pinned, tc.from, tc.to, 1))}
			_, err := Load(tree, "tenants")
			gentest.AssertProblems(t, err, []gentest.Want{tc.want})
		})
	}
}
