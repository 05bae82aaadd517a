package install

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	gwinstall "github.com/inferplane/inferplane/gateway/install"
)

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

var opts = Options{Domain: "models.example.com", Issuer: "https://login.example.com", ClientID: "inferplane",
	InputsRepo: "https://git.example.com/ops/inputs.git", AdminGroups: []string{"platform-ops"}, VClusterNamespaces: []string{"vcluster-acme"}}

func TestManifests(t *testing.T) {
	objs, err := Manifests(opts)
	require.NoError(t, err)
	var dep *appsv1.Deployment
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
		if d, ok := o.(*appsv1.Deployment); ok {
			dep = d
		}
		assert.NotEqual(t, "Secret", o.GetObjectKind().GroupVersionKind().Kind, "no secret in the manifests")
	}
	assert.Equal(t, map[string]int{"ServiceAccount": 1, "Role": 3, "RoleBinding": 3, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1}, kinds)
	require.NotNil(t, dep)
	assert.Equal(t, int32(2), *dep.Spec.Replicas)
	assert.Equal(t, gwinstall.DefaultImage, dep.Spec.Template.Spec.Containers[0].Image, "this build's image, as the gateway's")
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--in-cluster", "--oidc-issuer https://login.example.com", "--inputs-credentials-file " + inputsCredentials,
		"--keys-namespace inferplane-system", "--admin-group platform-ops",
		"--server http://inferplane-gateway-xds-0.inferplane-gateway-xds-pods.inferplane-system.svc:9090",
		"--server http://inferplane-gateway-xds-1.inferplane-gateway-xds-pods.inferplane-system.svc:9090"} {
		assert.Contains(t, args, want)
	}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		assert.Nil(t, e.ValueFrom, "credentials come from mounted files, not the environment")
	}
	_, err = Manifests(Options{Issuer: "nope", InputsRepo: "https://u:p@git.example.com/x.git"})
	require.Error(t, err)
	for _, want := range []string{"--domain", "--oidc-issuer", "--oidc-client-id", "--inputs-repo"} {
		assert.Contains(t, err.Error(), want)
	}
	var svc *corev1.Service
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			svc = s
		}
	}
	require.NotNil(t, svc)
	assert.Equal(t, int32(Port), svc.Spec.Ports[0].Port)
}

// The manifests as `api manifests` prints them and as `generate --gateway-dir` writes them
// (beside the gateway's, built by kustomize) pass a strict server-side dry-run in a real API
// server.
func TestManifestsPassStrictDryRun(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	printed, err := YAML(opts)
	require.NoError(t, err)
	for _, ns := range []string{"inferplane-system", "argocd", "vcluster-acme"} {
		require.NoError(t, env.EnsureNamespace(ctx, ns))
	}
	for _, err := range env.DryRunYAML(ctx, printed) {
		t.Error(err)
	}

	dir := t.TempDir()
	gw := gwinstall.Options{Domain: opts.Domain, VClusterNamespaces: opts.VClusterNamespaces}
	_, err = gwinstall.WriteDir(dir, gw, File)
	require.NoError(t, err)
	changed, err := WriteFile(dir, opts)
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = WriteFile(dir, opts)
	require.NoError(t, err)
	assert.False(t, changed, "the same manifests again change nothing")
	built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err)
	y, err := built.AsYaml()
	require.NoError(t, err)
	assert.Contains(t, string(y), "name: inferplane-api\n")
	assert.Contains(t, string(y), "kind: StatefulSet", "the gateway's objects too")
	for _, err := range env.DryRunYAML(ctx, y) {
		t.Error(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, File))
	require.NoError(t, err)
	assert.Equal(t, printed, data)
}
