package install

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/inferplane/inferplane/internal/version"
)

// containers of the install, by name.
func containers(t *testing.T, o Options) map[string]corev1.Container {
	t.Helper()
	objs, err := Manifests(o)
	require.NoError(t, err)
	out := map[string]corev1.Container{}
	for _, obj := range objs {
		var spec *corev1.PodSpec
		switch x := obj.(type) {
		case *appsv1.StatefulSet:
			spec = &x.Spec.Template.Spec
		case *appsv1.Deployment:
			spec = &x.Spec.Template.Spec
		default:
			continue
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			out[c.Name] = c
		}
	}
	return out
}

// The install runs this build's image, an exact Envoy release and an exact Redis release: never a
// tag that moves.
func TestImagesArePinned(t *testing.T) {
	cs := containers(t, Options{Domain: "inference.example.com"})
	require.Contains(t, cs, "xds")
	require.Contains(t, cs, "envoy")
	assert.Equal(t, version.Image(), cs["xds"].Image)
	assert.Equal(t, "ghcr.io/inferplane/inferplane:"+version.Version(), cs["xds"].Image)
	assert.Equal(t, "docker.io/envoyproxy/envoy:v1.36.13", cs["envoy"].Image)
	exact := regexp.MustCompile(`:(v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?|dev(-[0-9a-f]{12}(-dirty)?)?)$`) // v optional: Redis tags its releases 7.4.2
	for name, c := range cs {
		assert.Regexp(t, exact, c.Image, "container %s", name)
		assert.NotContains(t, c.Image, "latest", "container %s", name)
	}

	cs = containers(t, Options{Domain: "inference.example.com", Image: "registry.example.com/inferplane:v9.9.9",
		EnvoyImage: "registry.example.com/envoy:v1.37.11"})
	assert.Equal(t, "registry.example.com/inferplane:v9.9.9", cs["xds"].Image)
	assert.Equal(t, "registry.example.com/envoy:v1.37.11", cs["envoy"].Image)
}

// The xDS server listens on loopback unless told otherwise: the install says where, every
// interface of the pod, explicitly.
func TestXDSListensExplicitly(t *testing.T) {
	args := strings.Join(containers(t, Options{Domain: "inference.example.com"})["xds"].Args, " ")
	assert.Contains(t, args, "--grpc-address :18000")
	assert.Contains(t, args, "--admin-address :9090")
}
