package install

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/inferplane/inferplane/internal/version"
)

// The webhook runs this build's image (ghcr.io/inferplane/inferplane:<version>), never a tag
// that moves, unless the operator names another.
func TestDefaultImageIsThisBuild(t *testing.T) {
	for _, tc := range []struct{ image, want string }{
		{"", version.Image()},
		{"registry.example.com/inferplane:v9.9.9", "registry.example.com/inferplane:v9.9.9"},
	} {
		objs, err := Manifests(ManifestOptions{Image: tc.image})
		require.NoError(t, err)
		var found bool
		for _, o := range objs {
			if d, ok := o.(*appsv1.Deployment); ok {
				found = true
				require.Len(t, d.Spec.Template.Spec.Containers, 1)
				assert.Equal(t, tc.want, d.Spec.Template.Spec.Containers[0].Image)
				assert.NotContains(t, d.Spec.Template.Spec.Containers[0].Image, "latest")
			}
		}
		assert.True(t, found, "no Deployment in the install")
	}
	assert.Equal(t, "ghcr.io/inferplane/inferplane:"+version.Version(), version.Image())
}
