package install

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	var dep *appsv1.StatefulSet
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
		if d, ok := o.(*appsv1.StatefulSet); ok {
			dep = d
		}
		assert.NotEqual(t, "Secret", o.GetObjectKind().GroupVersionKind().Kind, "no secret in the manifests")
	}
	assert.Equal(t, map[string]int{"ServiceAccount": 1, "Role": 3, "RoleBinding": 3, "StatefulSet": 1, "Service": 2, "PodDisruptionBudget": 1,
		"NetworkPolicy": 1}, kinds)
	require.NotNil(t, dep)
	assert.Equal(t, int32(2), *dep.Spec.Replicas)
	assert.Equal(t, gwinstall.DefaultImage, dep.Spec.Template.Spec.Containers[0].Image, "this build's image, as the gateway's")
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--in-cluster", "--oidc-issuer https://login.example.com", "--inputs-credentials-file " + inputsCredentials,
		"--keys-namespace inferplane-system", "--admin-group platform-ops",
		"--server http://inferplane-gateway-xds-0.inferplane-gateway-xds-pods.inferplane-system.svc:9090",
		"--server http://inferplane-gateway-xds-1.inferplane-gateway-xds-pods.inferplane-system.svc:9090",
		"--meter http://inferplane-gateway-meter.inferplane-system.svc:9095"} {
		assert.Contains(t, args, want)
	}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			assert.Nil(t, e.ValueFrom.SecretKeyRef, "credentials come from mounted files, not the environment")
		}
	}
	noMeter := opts
	noMeter.NoMeter = true
	objs, err = Manifests(noMeter)
	require.NoError(t, err)
	for _, o := range objs {
		if s, ok := o.(*appsv1.StatefulSet); ok {
			assert.NotContains(t, s.Spec.Template.Spec.Containers[0].Args, "--meter", "a gateway without its meter: no --meter")
		}
	}
	_, err = Manifests(Options{Issuer: "nope", InputsRepo: "https://u:p@git.example.com/x.git"})
	require.Error(t, err)
	for _, want := range []string{"--domain", "--oidc-issuer", "--oidc-client-id", "--inputs-repo"} {
		assert.Contains(t, err.Error(), want)
	}
	assertConsole(t, dep, "https://api.models.example.com", "inferplane-api-console", false)
	services, policies := objectsOf(t, opts)
	require.Contains(t, services, "inferplane-api")
	assert.Equal(t, []corev1.ServicePort{{Name: "http", Port: Port, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}},
		services["inferplane-api"].Spec.Ports, "the customers' Service carries the customers' port only, never the peers'")
	assert.Empty(t, services["inferplane-api"].Spec.ClusterIP, "the customers' Service balances over the replicas")
	assertPeers(t, dep, services["inferplane-api-pods"], "inferplane-api-peers")
	require.Len(t, policies, 1)
	assertPeersPolicy(t, dep, policies[0])
}

// objectsOf are the install's Services by name, and its NetworkPolicies.
func objectsOf(t *testing.T, o Options) (map[string]*corev1.Service, []*networkingv1.NetworkPolicy) {
	t.Helper()
	objs, err := Manifests(o)
	require.NoError(t, err)
	services := map[string]*corev1.Service{}
	var policies []*networkingv1.NetworkPolicy
	for _, obj := range objs {
		switch v := obj.(type) {
		case *corev1.Service:
			services[v.Name] = v
		case *networkingv1.NetworkPolicy:
			policies = append(policies, v)
		}
	}
	return services, policies
}

// assertPeersPolicy: the API's pods take the customers' port from anyone (as without the
// policy) and the peer port only from the API's own pods. A policy's rules only add, so each
// port is a rule of its own: a rule with both ports and the pods as its source would close the
// customers' port to everyone else.
func assertPeersPolicy(t *testing.T, sts *appsv1.StatefulSet, np *networkingv1.NetworkPolicy) {
	t.Helper()
	assert.Equal(t, sts.Namespace, np.Namespace)
	assert.Equal(t, sts.Spec.Selector.MatchLabels, np.Spec.PodSelector.MatchLabels, "the policy holds the API's pods")
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes, "what the pods send is not restricted")
	tcp := corev1.ProtocolTCP
	ports := func(p int) []networkingv1.NetworkPolicyPort {
		n := intstr.FromInt(p)
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &n}}
	}
	require.Len(t, np.Spec.Ingress, 2)
	assert.Equal(t, networkingv1.NetworkPolicyIngressRule{Ports: ports(Port)}, np.Spec.Ingress[0], "the customers' port: from anywhere")
	assert.Equal(t, networkingv1.NetworkPolicyIngressRule{Ports: ports(PeerPort), From: []networkingv1.NetworkPolicyPeer{
		{PodSelector: &metav1.LabelSelector{MatchLabels: sts.Spec.Selector.MatchLabels}}}}, np.Spec.Ingress[1],
		"the peer port: from the API's pods in its namespace only")
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			assert.Contains(t, []int32{Port, PeerPort}, p.ContainerPort, "a port the policy closes")
		}
	}
}

// assertPeers: every replica hands its writes to the others at its own pod's name under the
// headless Service (the StatefulSet's), with the token of the peers' Secret mounted as a file;
// the kubelet has every variable the command line names.
func assertPeers(t *testing.T, sts *appsv1.StatefulSet, pods *corev1.Service, secret string) {
	t.Helper()
	require.NotNil(t, pods, "no headless Service")
	assert.Equal(t, corev1.ClusterIPNone, pods.Spec.ClusterIP)
	assert.True(t, pods.Spec.PublishNotReadyAddresses, "a busy writer keeps its name")
	assert.Equal(t, sts.Spec.Selector.MatchLabels, pods.Spec.Selector)
	assert.Equal(t, pods.Name, sts.Spec.ServiceName, "pods are named under the headless Service")
	assert.Equal(t, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy)
	c := sts.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	assert.Contains(t, args, "--peer-url http://$(POD_NAME)."+pods.Name+"."+sts.Namespace+".svc:8081")
	assert.Contains(t, args, "--listen :8080")
	assert.Contains(t, args, "--peer-listen :8081", "the peer route on a port of its own")
	assert.Contains(t, c.Ports, corev1.ContainerPort{Name: "peers", ContainerPort: PeerPort})
	assert.Contains(t, pods.Spec.Ports, corev1.ServicePort{Name: "peers", Port: PeerPort, TargetPort: intstr.FromString("peers"), Protocol: corev1.ProtocolTCP},
		"the peer URLs' port")
	assert.Contains(t, args, "--peer-token-file "+peerDir+"/"+PeerTokenKey)
	assert.NotContains(t, args, "openssl", "no token in the command line")
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for _, m := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(args, -1) {
		assert.Contains(t, env, m[1], "the kubelet expands only the container's variables")
	}
	require.NotNil(t, env["POD_NAME"].ValueFrom)
	assert.Equal(t, "metadata.name", env["POD_NAME"].ValueFrom.FieldRef.FieldPath)
	vol := secretVolumeOf(t, sts, secret)
	assert.False(t, *vol.Secret.Optional, "api serve does not start without the token file")
	assert.Equal(t, []corev1.KeyToPath{{Key: PeerTokenKey, Path: PeerTokenKey}}, vol.Secret.Items)
	assert.Equal(t, int32(0o400), *vol.Secret.DefaultMode)
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: vol.Name, MountPath: peerDir, ReadOnly: true})
}

// secretVolumeOf is the pods' volume of a Secret.
func secretVolumeOf(t *testing.T, sts *appsv1.StatefulSet, secret string) *corev1.Volume {
	t.Helper()
	for i, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			return &sts.Spec.Template.Spec.Volumes[i]
		}
	}
	t.Fatalf("no volume of Secret %s", secret)
	return nil
}

// statefulSetOf is the install's StatefulSet.
func statefulSetOf(t *testing.T, o Options) *appsv1.StatefulSet {
	t.Helper()
	objs, err := Manifests(o)
	require.NoError(t, err)
	for _, obj := range objs {
		if s, ok := obj.(*appsv1.StatefulSet); ok {
			return s
		}
	}
	t.Fatal("no StatefulSet")
	return nil
}

// One replica has no peers: no peer flags, no Secret to make; several have, under the Secret
// named.
func TestManifestsPeers(t *testing.T) {
	one := opts
	one.Replicas = 1
	s := statefulSetOf(t, one)
	assert.Equal(t, int32(1), *s.Spec.Replicas)
	assert.NotContains(t, strings.Join(s.Spec.Template.Spec.Containers[0].Args, " "), "--peer-")
	for _, v := range s.Spec.Template.Spec.Volumes {
		assert.NotEqual(t, "peers", v.Name)
	}
	for _, p := range s.Spec.Template.Spec.Containers[0].Ports {
		assert.NotEqual(t, int32(PeerPort), p.ContainerPort, "one replica has no peer port")
	}
	services, policies := objectsOf(t, one)
	assert.Empty(t, policies, "one replica: no peer port to close")
	for _, svc := range services {
		for _, p := range svc.Spec.Ports {
			assert.NotEqual(t, int32(PeerPort), p.Port, svc.Name)
		}
	}
	y, err := YAML(one)
	require.NoError(t, err)
	assert.NotContains(t, string(y), "-peers --from-file")
	assert.NotContains(t, string(y), "NetworkPolicy")

	three := opts
	three.Replicas, three.Name, three.PeerSecret = 3, "api", "api-writers"
	services, policies = objectsOf(t, three)
	sts := statefulSetOf(t, three)
	assert.Equal(t, int32(3), *sts.Spec.Replicas)
	assertPeers(t, sts, services["api-pods"], "api-writers")
	require.Len(t, services["api"].Spec.Ports, 1, "the customers' Service: the customers' port only")
	assert.Equal(t, int32(Port), services["api"].Spec.Ports[0].Port)
	require.Len(t, policies, 1)
	assertPeersPolicy(t, sts, policies[0])
	y, err = YAML(three)
	require.NoError(t, err)
	assert.Contains(t, string(y), "create secret generic api-writers --from-file=token=<(openssl rand -hex 32)")
}

// assertConsole: the console is served at url, every replica reading its session keys (and
// the client's secret, when confidential) from the same Secret, mounted read-only; the pod
// does not start without it.
func assertConsole(t *testing.T, dep *appsv1.StatefulSet, url, secret string, confidential bool) {
	t.Helper()
	c := dep.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	assert.Contains(t, args, "--console-url "+url)
	assert.Contains(t, args, "--console-session-keys "+consoleDir+"/"+SessionKeysKey)
	assert.NotContains(t, args, "--no-console")
	assert.Equal(t, confidential, strings.Contains(args, "--console-client-secret-file "+consoleDir+"/"+ClientSecretKey))
	vol := secretVolumeOf(t, dep, secret)
	assert.False(t, *vol.Secret.Optional, "a replica must not start with session keys of its own")
	want := []corev1.KeyToPath{{Key: SessionKeysKey, Path: SessionKeysKey}}
	if confidential {
		want = append(want, corev1.KeyToPath{Key: ClientSecretKey, Path: ClientSecretKey})
	}
	assert.Equal(t, want, vol.Secret.Items)
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: vol.Name, MountPath: consoleDir, ReadOnly: true})
	assert.GreaterOrEqual(t, *dep.Spec.Replicas, int32(2))
}

// The console's options: where it is served, the client it signs in as, where the playground
// goes, or none; refused options name their flag.
func TestManifestsConsole(t *testing.T) {
	with := func(f func(*Options)) Options {
		o := opts
		f(&o)
		return o
	}
	t.Run("a console of its own", func(t *testing.T) {
		dep := statefulSetOf(t, with(func(o *Options) {
			o.ConsoleURL, o.ConsoleClientID, o.ConsoleConfidential, o.ConsoleSecret = "https://console.example.com/", "inferplane-console", true, "console-keys"
		}))
		assertConsole(t, dep, "https://console.example.com", "console-keys", true)
		args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
		assert.Contains(t, args, "--console-client-id inferplane-console")
		assert.Contains(t, args, "--console-gateway inferplane-gateway-envoy.inferplane-system.svc:443", "the gateway's Envoy Service")
	})
	t.Run("the API only", func(t *testing.T) {
		dep := statefulSetOf(t, with(func(o *Options) { o.NoConsole = true }))
		args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
		assert.Contains(t, args, "--no-console")
		assert.NotContains(t, args, "--console-")
		for _, v := range dep.Spec.Template.Spec.Volumes {
			assert.NotEqual(t, "console", v.Name)
		}
		y, err := YAML(with(func(o *Options) { o.NoConsole = true }))
		require.NoError(t, err)
		assert.NotContains(t, string(y), SessionKeysKey)
	})
	t.Run("the header says how to make the Secret", func(t *testing.T) {
		y, err := YAML(opts)
		require.NoError(t, err)
		assert.Contains(t, string(y), "create secret generic inferplane-api-console --from-file=session-keys=<(openssl rand -hex 32)")
		assert.Contains(t, string(y), "https://api.models.example.com/auth/callback among the redirect URIs of the OIDC client inferplane")
	})
	for _, tc := range []struct {
		name string
		f    func(*Options)
		want string
	}{
		{"plain http", func(o *Options) { o.ConsoleURL = "http://console.example.com" }, "--console-url"},
		{"a path", func(o *Options) { o.ConsoleURL = "https://example.com/console" }, "--console-url"},
		{"not a URL", func(o *Options) { o.ConsoleURL = "console.example.com" }, "--console-url"},
		{"a gateway without a port", func(o *Options) { o.ConsoleGateway = "envoy.example.com" }, "--console-gateway"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			_, err := Manifests(with(tc.f))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
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
	// The console's other shapes: its own host and confidential client; none.
	for _, o := range []Options{
		func() Options {
			o := opts
			o.ConsoleURL, o.ConsoleClientID, o.ConsoleConfidential = "https://console.example.com", "inferplane-console", true
			return o
		}(),
		func() Options { o := opts; o.NoConsole = true; return o }(),
		func() Options { o := opts; o.Replicas = 1; return o }(),
	} {
		y, err := YAML(o)
		require.NoError(t, err)
		for _, err := range env.DryRunYAML(ctx, y) {
			t.Error(err)
		}
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
