package recipe_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// TestDefaultImageServesTheCorpus: the pinned default vLLM image is no older than any bundled
// recipe that needs no nightly build asks for (min_vllm_version). A newer corpus that asks for
// more fails here until the pin moves with it.
func TestDefaultImageServesTheCorpus(t *testing.T) {
	b := bundled(t)
	_, tag, _ := strings.Cut(v1alpha1.DefaultVLLMImage, ":")
	pinned := versionParts(t, strings.TrimPrefix(tag, "v"))
	checked := 0
	for _, id := range b.Models() {
		r, _, ok := b.Model(id)
		require.True(t, ok, id)
		if r.Model.NightlyRequired || r.Model.MinVLLMVersion == "" {
			continue
		}
		checked++
		need := versionParts(t, r.Model.MinVLLMVersion)
		for i := range need {
			if need[i] != pinned[i] {
				require.Less(t, need[i], pinned[i], "%s needs vLLM %s, the default image is %s", id, r.Model.MinVLLMVersion, v1alpha1.DefaultVLLMImage)
				break
			}
		}
	}
	require.NotZero(t, checked)
}

func versionParts(t *testing.T, v string) [3]int {
	t.Helper()
	var p [3]int
	for i, s := range strings.SplitN(v, ".", 3) {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "version %q", v)
		p[i] = n
	}
	return p
}
