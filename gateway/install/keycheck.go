package install

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/auth/keys"
)

// keyCheckObjects run the key checks (`inferplane keys serve`) apart from the xDS servers, so
// that losing one xDS server, one Envoy or the host API server leaves requests unaffected:
// a Deployment of KeyCheckReplicas, each watching the APIKey objects itself, a headless
// Service that Envoy's inferplane_services cluster resolves to every ready one (it spreads
// checks over them and health-checks each over gRPC), a PodDisruptionBudget, and a
// ServiceAccount that may only read the APIKey objects.
func keyCheckObjects(o Options, limitShards int) []client.Object {
	name := o.Name + "-keys"
	role := &rbacv1.Role{TypeMeta: typeRole, ObjectMeta: meta(o, name, "keys"), Rules: []rbacv1.PolicyRule{readAPIKeys}}
	binding := &rbacv1.RoleBinding{TypeMeta: typeRoleBinding, ObjectMeta: meta(o, name, "keys"),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: name}}}
	svc := &corev1.Service{TypeMeta: typeService, ObjectMeta: meta(o, name, "keys"),
		Spec: corev1.ServiceSpec{Selector: selector(o, "keys"), ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{
			{Name: "grpc", Port: KeysGRPCPort, TargetPort: intstr.FromString("grpc"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr("kubernetes.io/h2c")},
		}}}
	return []client.Object{serviceAccount(o, name, true), role, binding, svc, keyCheckDeployment(o, limitShards), pdb(o, "keys")}
}

func keyCheckDeployment(o Options, limitShards int) *appsv1.Deployment {
	var uid int64 = 65532
	c := corev1.Container{
		Name: "keys", Image: o.Image,
		Args:  keyCheckArgs(o),
		Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: KeysGRPCPort}, {Name: "admin", ContainerPort: KeysAdmin}},
		Env: []corev1.EnvVar{{Name: keys.SecretEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.KeySecret}, Key: keySecretKey}}}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		// Ready once the keys are read; Envoy's own gRPC health checks decide where checks go.
		ReadinessProbe:  httpProbe("/readyz", 5, 2),
		LivenessProbe:   httpProbe("/healthz", 10, 6),
		SecurityContext: restricted(),
	}
	var volumes []corev1.Volume
	mountTenantLimits(o, limitShards, &c, &volumes)
	return &appsv1.Deployment{TypeMeta: typeDeployment, ObjectMeta: meta(o, o.Name+"-keys", "keys"),
		Spec: appsv1.DeploymentSpec{
			Replicas: &o.KeyCheckReplicas,
			Selector: &metav1.LabelSelector{MatchLabels: selector(o, "keys")},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr(intstr.FromInt32(0)), MaxSurge: ptr(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(o, "keys"), Annotations: map[string]string{
					"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(KeysAdmin)}},
				Spec: corev1.PodSpec{
					ServiceAccountName: o.Name + "-keys", Containers: []corev1.Container{c}, Volumes: volumes,
					SecurityContext: podSecurity(uid, false),
					// The drain (5 s) and the checks in flight (10 s at most).
					TerminationGracePeriodSeconds: ptr(int64(30)),
					TopologySpreadConstraints:     spread(o, "keys"),
				},
			},
		}}
}

// readAPIKeys reads the APIKey objects of the gateway's namespace.
var readAPIKeys = rbacv1.PolicyRule{APIGroups: []string{"inferplane.io"}, Resources: []string{"apikeys"}, Verbs: []string{"get", "list", "watch"}}

// keyCheckArgs is the key check's command line: its keys, and the rate limits and token
// budgets it enforces, counted in the Redis the xDS servers share (they add the tokens of the
// access logs).
func keyCheckArgs(o Options) []string {
	args := []string{"keys", "serve", "--namespace", o.Namespace,
		"--grpc-address", ":" + strconv.Itoa(KeysGRPCPort), "--admin-address", ":" + strconv.Itoa(KeysAdmin),
		"--limits-redis", o.RedisAddress(), "--log-format", "json"}
	if len(o.TenantLimits) > 0 {
		args = append(args, "--limits-tenants", tenantsMount)
	}
	return args
}
