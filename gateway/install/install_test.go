package install

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/e2e/kubeenv"
)

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

func TestManifests(t *testing.T) {
	objs, err := Manifests(Options{Domain: "inference.example.com", VClusterNamespaces: []string{"vcluster-acme"}})
	require.NoError(t, err)
	var kinds []string
	statefulSets := map[string]*appsv1.StatefulSet{}
	deployments := map[string]*appsv1.Deployment{}
	roles := map[string]*rbacv1.Role{}
	services := map[string]*corev1.Service{}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		kinds = append(kinds, kind+"/"+o.GetNamespace()+"/"+o.GetName())
		switch x := o.(type) {
		case *appsv1.StatefulSet:
			statefulSets[x.Name] = x
		case *appsv1.Deployment:
			deployments[x.Name] = x
		case *corev1.Service:
			services[x.Name] = x
		case *rbacv1.Role:
			roles[x.Namespace+"/"+x.Name] = x
			for _, r := range x.Rules {
				assert.Equal(t, []string{"get", "list", "watch"}, r.Verbs, "the gateway only reads")
			}
		}
		assert.NotContains(t, kind, "Cluster", "nothing cluster-wide: %s", kind)
	}
	assert.Equal(t, []string{
		"Namespace//inferplane-system",
		"ServiceAccount/inferplane-system/inferplane-gateway-xds",
		"ServiceAccount/inferplane-system/inferplane-gateway-envoy",
		"Role/inferplane-system/inferplane-gateway-xds", "RoleBinding/inferplane-system/inferplane-gateway-xds",
		"Role/argocd/inferplane-system-inferplane-gateway-clusters", "RoleBinding/argocd/inferplane-system-inferplane-gateway-clusters",
		"Role/vcluster-acme/inferplane-system-inferplane-gateway-clusters", "RoleBinding/vcluster-acme/inferplane-system-inferplane-gateway-clusters",
		"Service/inferplane-system/inferplane-gateway-xds", "Service/inferplane-system/inferplane-gateway-xds-pods",
		"ServiceAccount/inferplane-system/inferplane-gateway-redis", "StatefulSet/inferplane-system/inferplane-gateway-redis",
		"Service/inferplane-system/inferplane-gateway-redis",
		"StatefulSet/inferplane-system/inferplane-gateway-xds", "PodDisruptionBudget/inferplane-system/inferplane-gateway-xds",
		"ServiceAccount/inferplane-system/inferplane-gateway-keys",
		"Role/inferplane-system/inferplane-gateway-keys", "RoleBinding/inferplane-system/inferplane-gateway-keys",
		"Service/inferplane-system/inferplane-gateway-keys", "Deployment/inferplane-system/inferplane-gateway-keys",
		"PodDisruptionBudget/inferplane-system/inferplane-gateway-keys",
		"ServiceAccount/inferplane-system/inferplane-gateway-meter",
		"Service/inferplane-system/inferplane-gateway-meter", "StatefulSet/inferplane-system/inferplane-gateway-meter",
		"ConfigMap/inferplane-system/inferplane-gateway-envoy", "Deployment/inferplane-system/inferplane-gateway-envoy",
		"PodDisruptionBudget/inferplane-system/inferplane-gateway-envoy", "Service/inferplane-system/inferplane-gateway-envoy",
	}, kinds)

	sts := statefulSets["inferplane-gateway-xds"]
	require.NotNil(t, sts)
	xds := sts.Spec.Template.Spec.Containers[0]
	args := strings.Join(xds.Args, " ")
	for _, want := range []string{"xds serve --source clusters --domain inference.example.com",
		"--services-address inferplane-gateway-xds.inferplane-system.svc:18000", "--keys-namespace inferplane-system",
		"--key-check-address inferplane-gateway-keys.inferplane-system.svc:18001",
		"--tls-secret-namespace inferplane-system", "--vcluster-namespace vcluster-acme", "--usage-file /var/lib/inferplane/usage.json",
		"--last-known-good-file /var/lib/inferplane/known-good.json",
		"--limits-redis inferplane-gateway-redis.inferplane-system.svc:6379"} {
		assert.Contains(t, args, want)
	}
	for _, e := range xds.Env {
		assert.NotEqual(t, "INFERPLANE_KEYS_SECRET", e.Name, "the xDS servers check no key: they need no key secret")
	}
	assert.EqualValues(t, 2, *sts.Spec.Replicas)
	assert.Equal(t, "/readyz", xds.ReadinessProbe.HTTPGet.Path)
	assert.Len(t, sts.Spec.VolumeClaimTemplates, 1, "each xDS server keeps its usage ledger and last known good replicas on its own volume")
	assert.Len(t, roles["inferplane-system/inferplane-gateway-xds"].Rules, 2, "the xDS servers read Secrets and the APIKey objects (their limits)")

	// The key checks: several, each reading the APIKey objects only; Envoy resolves every
	// ready one through the headless Service.
	keysDep := deployments["inferplane-gateway-keys"]
	require.NotNil(t, keysDep)
	assert.EqualValues(t, 2, *keysDep.Spec.Replicas)
	kc := keysDep.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "keys serve --namespace inferplane-system --grpc-address :18001 --admin-address :9091 "+
		"--limits-redis inferplane-gateway-redis.inferplane-system.svc:6379 --log-format json", strings.Join(kc.Args, " "))
	assert.Equal(t, "inferplane-gateway-keys", kc.Env[0].ValueFrom.SecretKeyRef.Name)
	assert.Equal(t, "/readyz", kc.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, []string{"apikeys"}, roles["inferplane-system/inferplane-gateway-keys"].Rules[0].Resources)
	assert.Equal(t, corev1.ClusterIPNone, services["inferplane-gateway-keys"].Spec.ClusterIP)
	assert.False(t, services["inferplane-gateway-keys"].Spec.PublishNotReadyAddresses, "only ready key checks are resolved")

	// Envoy drains before it stops: its SIGTERM waits (a sleep, no shell needed) while the
	// drainer beside it drains it.
	envoy := deployments["inferplane-gateway-envoy"]
	pod := envoy.Spec.Template.Spec
	require.Len(t, pod.Containers, 2)
	ec, dc := pod.Containers[0], pod.Containers[1]
	assert.Contains(t, strings.Join(ec.Args, " "), "--service-node $(POD_NAME)")
	assert.Contains(t, strings.Join(ec.Args, " "), "--drain-time-s 15 --drain-strategy immediate")
	assert.EqualValues(t, 45, ec.Lifecycle.PreStop.Sleep.Seconds)
	assert.Equal(t, "gateway envoy-drainer --envoy-admin-address 127.0.0.1:9901 --min-wait 15s --max-wait 40s --log-format json", strings.Join(dc.Args, " "))
	assert.Greater(t, *pod.TerminationGracePeriodSeconds, ec.Lifecycle.PreStop.Sleep.Seconds, "the grace period outlasts the drain")

	// The meter: one writer of its records on a volume of its own, reading the registry the
	// xDS servers read (bound in Argo CD's and vCluster's namespaces, not in its own, whose
	// Secrets hold the API key secret) and the token counts of every xDS server by name.
	meter := statefulSets["inferplane-gateway-meter"]
	require.NotNil(t, meter)
	assert.EqualValues(t, 1, *meter.Spec.Replicas)
	assert.Len(t, meter.Spec.VolumeClaimTemplates, 1)
	assert.Equal(t, "meter serve --dir /var/lib/inferplane/meter --admin-address :9095 --argocd-namespace argocd --log-format json "+
		"--vcluster-namespace vcluster-acme "+
		"--server http://inferplane-gateway-xds-0.inferplane-gateway-xds-pods.inferplane-system.svc:9090 "+
		"--server http://inferplane-gateway-xds-1.inferplane-gateway-xds-pods.inferplane-system.svc:9090",
		strings.Join(meter.Spec.Template.Spec.Containers[0].Args, " "))
	for _, o := range objs {
		if b, ok := o.(*rbacv1.RoleBinding); ok {
			var names []string
			for _, s := range b.Subjects {
				names = append(names, s.Name)
			}
			if b.Namespace == "inferplane-system" {
				assert.NotContains(t, names, "inferplane-gateway-meter", "the meter reads no Secret of the gateway's namespace")
			} else {
				assert.Contains(t, names, "inferplane-gateway-meter", "the meter reads the registry in %s", b.Namespace)
			}
		}
	}
	assert.Equal(t, "http://inferplane-gateway-meter.inferplane-system.svc:9095", Options{Name: "inferplane-gateway", Namespace: "inferplane-system"}.MeterURL())

	without, err := Manifests(Options{Domain: "inference.example.com", NoMeter: true})
	require.NoError(t, err)
	for _, o := range without {
		assert.NotContains(t, o.GetName(), "meter", "NoMeter leaves the meter out")
		if b, ok := o.(*rbacv1.RoleBinding); ok {
			assert.Len(t, b.Subjects, 1, "NoMeter binds the xDS servers alone")
		}
	}
}

const tenantWithLimits = `apiVersion: inferplane.io/v1alpha1
kind: Tenant
metadata:
  name: acme
spec:
  tier: t
  limits:
    requestsPerMinute: {value: 60}
`

// TestManifestsTenantLimits: the tenants' limits in ConfigMaps under flat keys (<tenant>.yaml,
// tier.<tier>.yaml, <tenant>.jobs.<file>), each with its shard file, mounted through one
// projected volume without items as the flat folder that the xDS servers and the key checks
// read with --limits-tenants.
func TestManifestsTenantLimits(t *testing.T) {
	objs, err := Manifests(Options{Domain: "inference.example.com", TenantLimits: map[string][]byte{
		"acme": []byte(tenantWithLimits), "tiers/h100-dedicated": []byte("kind: Tier\n"),
		"platform/jobs/qwen.yaml": []byte("kind: ManagedInferenceJob\n")}})
	require.NoError(t, err)
	var cms []*corev1.ConfigMap
	var sts *appsv1.StatefulSet
	var kc *appsv1.Deployment
	for _, o := range objs {
		switch v := o.(type) {
		case *appsv1.Deployment:
			if v.Name == "inferplane-gateway-keys" {
				kc = v
			}
		case *corev1.ConfigMap:
			if v.Labels[LabelTenantLimits] == "inferplane-gateway" {
				cms = append(cms, v)
			}
		case *appsv1.StatefulSet:
			if v.Name == "inferplane-gateway-xds" {
				sts = v
			}
		}
	}
	require.Len(t, cms, 1)
	require.NotNil(t, sts)
	require.NotNil(t, kc)
	cm := cms[0]
	assert.Equal(t, "inferplane-gateway-tenant-limits-0", cm.Name)
	assert.Equal(t, tenantWithLimits, cm.Data["acme.yaml"])
	assert.Equal(t, "kind: Tier\n", cm.Data["tier.h100-dedicated.yaml"])
	assert.Equal(t, "kind: ManagedInferenceJob\n", cm.Data["platform.jobs.qwen.yaml"], "a provider's job keeps its file name")
	var shard limits.ShardFile
	require.NoError(t, json.Unmarshal([]byte(cm.Data[".shard-0"]), &shard))
	assert.Equal(t, 1, shard.Of)
	assert.Len(t, cm.Data, 4)
	for _, pod := range []corev1.PodSpec{sts.Spec.Template.Spec, kc.Spec.Template.Spec} {
		require.Len(t, pod.Volumes, 1)
		assert.Nil(t, pod.Volumes[0].ConfigMap)
		assert.Equal(t, []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}, pod.Volumes[0].Projected.Sources)
		assert.Equal(t, corev1.VolumeMount{Name: "tenant-limits", MountPath: "/etc/inferplane/tenants", ReadOnly: true},
			pod.Containers[0].VolumeMounts[len(pod.Containers[0].VolumeMounts)-1])
		assert.Contains(t, strings.Join(pod.Containers[0].Args, " "), "--limits-tenants /etc/inferplane/tenants")
	}
	without, err := Manifests(Options{Domain: "inference.example.com"})
	require.NoError(t, err)
	assert.Len(t, without, len(objs)-1, "no tenant limits, no ConfigMap")

	_, err = Manifests(Options{Domain: "inference.example.com", TenantLimits: map[string][]byte{
		"tier": []byte(tenantWithLimits), "tiers/jobs.x": []byte("kind: Tier\n")}})
	assert.ErrorContains(t, err, "tiers/jobs.x: its file tier.jobs.x.yaml of the tenant limits would be read as tier/jobs/x.yaml")
	_, err = Manifests(Options{Domain: "inference.example.com", TenantLimits: map[string][]byte{"acme": []byte(strings.Repeat("x", 300<<10))}})
	assert.ErrorContains(t, err, "acme.yaml is 307215 bytes as JSON: a ConfigMap of the tenant limits holds at most 204544")
}

func TestManifestsErrors(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "domain: required"},
		{Options{Domain: "x.test", Namespace: "Bad"}, `namespace "Bad"`},
		{Options{Domain: "x.test", VClusterNamespaces: []string{"a_b"}}, `vCluster namespace "a_b"`},
		{Options{Domain: "x.test", UsageSize: "lots"}, `usage volume size "lots"`},
		{Options{Domain: "x.test", Name: strings.Repeat("g", 41)}, "at most 40 characters"},
	} {
		_, err := Manifests(tc.o)
		assert.ErrorContains(t, err, tc.want)
	}
}

// TestManifestsPassStrictDryRun sends every object, as `inferplane gateway manifests` prints
// it and as `generate --gateway-dir` writes it (read back from the folder, built by kustomize),
// to the real API server as a strict server-side dry-run.
func TestManifestsPassStrictDryRun(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := Options{Domain: "inference.example.com", VClusterNamespaces: []string{"vcluster-acme"},
		LoadBalancerClass: "example.com/lb", ServiceAnnotations: map[string]string{"metallb.universe.tf/address-pool": "public"},
		TenantLimits: map[string][]byte{"acme": []byte(tenantWithLimits)}}
	printed, err := YAML(o)
	require.NoError(t, err)
	for _, ns := range []string{"inferplane-system", "argocd", "vcluster-acme"} {
		require.NoError(t, env.EnsureNamespace(ctx, ns))
	}
	for _, err := range env.DryRunYAML(ctx, printed) {
		t.Error(err)
	}

	dir := t.TempDir()
	changed, err := WriteDir(dir, o)
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = WriteDir(dir, o)
	require.NoError(t, err)
	assert.False(t, changed, "a second write of the same manifests changes nothing")
	written, err := os.ReadFile(filepath.Join(dir, FileManifests))
	require.NoError(t, err)
	assert.Equal(t, printed, written)
	built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "the folder builds with kustomize")
	y, err := built.AsYaml()
	require.NoError(t, err)
	for _, err := range env.DryRunYAML(ctx, y) {
		t.Error(err)
	}
	assert.True(t, slices.Contains(strings.Split(string(printed), "\n"), "kind: StatefulSet"))
}
