package install

import (
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// meterObjects run the GPU meter (`inferplane meter serve`) beside the xDS servers: one
// replica, since the meter is the one writer of its records, with a volume of its own for them
// and their checkpoint; a ServiceAccount that may only read the cluster Secrets (rbac binds it
// in the registry's namespaces; what it changes in a tenant cluster, the finalizer on each
// VMI, it changes with that cluster's own credentials); a Service for `api serve --meter`.
func meterObjects(o Options) []client.Object {
	name := o.Name + "-meter"
	m := meta(o, name, "meter")
	out := []client.Object{serviceAccount(o, name, true)}
	if o.ArgoCDNamespace == o.Namespace || slices.Contains(o.VClusterNamespaces, o.Namespace) {
		// The registry is in the gateway's own namespace, whose Secrets rbac grants the xDS
		// servers alone (they read its TLS Secrets too).
		out = append(out, &rbacv1.Role{TypeMeta: typeRole, ObjectMeta: m, Rules: []rbacv1.PolicyRule{readSecrets}},
			&rbacv1.RoleBinding{TypeMeta: typeRoleBinding, ObjectMeta: m,
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: name}}})
	}
	svc := &corev1.Service{TypeMeta: typeService, ObjectMeta: m, Spec: corev1.ServiceSpec{Selector: selector(o, "meter"),
		Ports: []corev1.ServicePort{{Name: "admin", Port: MeterAdmin, TargetPort: intstr.FromString("admin"), Protocol: corev1.ProtocolTCP}}}}
	return append(out, svc, meterStatefulSet(o))
}

// MeterURL is where `api serve --meter` reaches the meter.
func (o Options) MeterURL() string {
	return fmt.Sprintf("http://%s-meter.%s.svc:%d", o.Name, o.Namespace, MeterAdmin)
}

// meterArgs is the meter's command line: the registry of the xDS servers, and each xDS
// server's admin address by its own name, since the keys' token counts are summed over all.
func meterArgs(o Options) []string {
	args := []string{"meter", "serve", "--dir", meterMount, "--admin-address", ":" + strconv.Itoa(MeterAdmin),
		"--argocd-namespace", o.ArgoCDNamespace, "--log-format", "json"}
	for _, ns := range o.VClusterNamespaces {
		args = append(args, "--vcluster-namespace", ns)
	}
	for _, u := range o.XDSAdminURLs() {
		args = append(args, "--server", u)
	}
	return args
}

const meterMount = "/var/lib/inferplane/meter"

func meterStatefulSet(o Options) *appsv1.StatefulSet {
	var uid int64 = 65532
	c := corev1.Container{
		Name: "meter", Image: o.Image, Args: meterArgs(o),
		Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: MeterAdmin}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		ReadinessProbe:  httpProbe("/readyz", 10, 3),
		LivenessProbe:   httpProbe("/healthz", 10, 6),
		VolumeMounts:    []corev1.VolumeMount{{Name: "records", MountPath: meterMount}},
		SecurityContext: restricted(),
	}
	claim := volumeClaim(o, "records", "meter", o.MeterSize)
	one := int32(1)
	return &appsv1.StatefulSet{TypeMeta: typeStatefulSet, ObjectMeta: meta(o, o.Name+"-meter", "meter"),
		Spec: appsv1.StatefulSetSpec{
			// One writer of the records: OrderedReady never runs two meters on one volume.
			Replicas: &one, ServiceName: o.Name + "-meter",
			Selector: &metav1.LabelSelector{MatchLabels: selector(o, "meter")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(o, "meter"), Annotations: map[string]string{
					"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(MeterAdmin)}},
				Spec: corev1.PodSpec{
					ServiceAccountName: o.Name + "-meter", Containers: []corev1.Container{c},
					SecurityContext: podSecurity(uid, true),
					// The last records and the checkpoint are written on SIGTERM.
					TerminationGracePeriodSeconds: ptr(int64(30)),
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claim},
		}}
}
