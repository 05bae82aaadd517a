package install

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/xds/bootstrap"
)

var (
	typeNamespace      = metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}
	typeServiceAccount = metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}
	typeService        = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	typeConfigMap      = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	typeRole           = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"}
	typeRoleBinding    = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"}
	typeStatefulSet    = metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet"}
	typeDeployment     = metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"}
	typePDB            = metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"}
)

// readSecrets reads the Secrets of one namespace.
var readSecrets = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}

func namespace(o Options) *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: typeNamespace, ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: labels(o, "")}}
}

func serviceAccount(o Options, name string, token bool) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{TypeMeta: typeServiceAccount, ObjectMeta: meta(o, name, ""), AutomountServiceAccountToken: &token}
}

// rbac lets the xDS server read, and only read: the cluster Secrets (Argo CD's namespace and
// vCluster's), the APIKey objects (for the keys' limits: the tokens of the access logs count
// against them here; it holds no key secret and checks no key) and the TLS Secrets of its own
// namespace. Roles, not ClusterRoles: nothing cluster-wide.
func rbac(o Options) []client.Object {
	var out []client.Object
	// The registry's namespaces are read by the xDS servers and, when it runs, the meter.
	readers := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: o.Name + "-xds"}}
	if !o.NoMeter {
		readers = append(readers, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: o.Name + "-meter"})
	}
	grant := func(ns, name string, subjects []rbacv1.Subject, rules ...rbacv1.PolicyRule) {
		m := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels(o, "xds")}
		out = append(out,
			&rbacv1.Role{TypeMeta: typeRole, ObjectMeta: m, Rules: rules},
			&rbacv1.RoleBinding{TypeMeta: typeRoleBinding, ObjectMeta: m,
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: subjects})
	}
	grant(o.Namespace, o.Name+"-xds", readers[:1], readSecrets, readAPIKeys)
	if o.ArgoCDNamespace != "-" && o.ArgoCDNamespace != o.Namespace {
		grant(o.ArgoCDNamespace, o.Namespace+"-"+o.Name+"-clusters", readers, readSecrets)
	}
	for _, ns := range o.VClusterNamespaces {
		if ns != o.Namespace && ns != o.ArgoCDNamespace {
			grant(ns, o.Namespace+"-"+o.Name+"-clusters", readers, readSecrets)
		}
	}
	return out
}

// xdsServices: one Service that Envoy and its access logs use (any replica answers), and a
// headless one that names each replica (`inferplane keys usage --server` asks every one).
func xdsServices(o Options) []client.Object {
	ports := []corev1.ServicePort{
		{Name: "grpc", Port: GRPCPort, TargetPort: intstr.FromString("grpc"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr("kubernetes.io/h2c")},
		{Name: "admin", Port: AdminPort, TargetPort: intstr.FromString("admin"), Protocol: corev1.ProtocolTCP},
	}
	return []client.Object{
		&corev1.Service{TypeMeta: typeService, ObjectMeta: meta(o, o.Name+"-xds", "xds"),
			Spec: corev1.ServiceSpec{Selector: selector(o, "xds"), Ports: ports}},
		&corev1.Service{TypeMeta: typeService, ObjectMeta: meta(o, o.Name+"-xds-pods", "xds"),
			Spec: corev1.ServiceSpec{Selector: selector(o, "xds"), Ports: ports, ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true}},
	}
}

// xdsArgs is the xDS server's command line.
func xdsArgs(o Options) []string {
	// Every interface, said explicitly (the server listens on loopback only by default): Envoy
	// and its key checks reach the gRPC port through the Service, the kubelet's probes and
	// Prometheus the admin port at the pod's IP, kubectl port-forward at the pod's loopback.
	args := []string{"xds", "serve", "--source", "clusters", "--domain", o.Domain,
		"--grpc-address", ":" + strconv.Itoa(GRPCPort), "--admin-address", ":" + strconv.Itoa(AdminPort),
		"--argocd-namespace", o.ArgoCDNamespace,
		"--key-check-address", o.KeyCheckAddress(), "--keys-namespace", o.Namespace, "--usage-file", "/var/lib/inferplane/usage.json",
		"--last-known-good-file", "/var/lib/inferplane/known-good.json",
		"--services-address", o.XDSAddress(),
		"--limits-redis", o.RedisAddress(),
		"--tls-secret-namespace", o.Namespace,
		"--listener-port", strconv.Itoa(HTTPPort), "--tls-listener-port", strconv.Itoa(HTTPSPort),
		"--log-format", "json"}
	for _, ns := range o.VClusterNamespaces {
		args = append(args, "--vcluster-namespace", ns)
	}
	if len(o.TenantLimits) > 0 {
		args = append(args, "--limits-tenants", tenantsMount)
	}
	return args
}

// xdsStatefulSet runs the xDS servers. A StatefulSet, so that each replica keeps its own usage
// ledger and its tenant clusters' last known good replicas on its own volume across restarts
// (usage is what tenants are billed from; the replicas are what it serves when a tenant's API
// server is down as it starts: the volume is there exactly when an API server is not), and
// has a name `keys usage` can address.
func xdsStatefulSet(o Options, limitShards int) *appsv1.StatefulSet {
	var uid int64 = 65532
	c := corev1.Container{
		Name: "xds", Image: o.Image, Args: xdsArgs(o),
		Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: GRPCPort}, {Name: "admin", ContainerPort: AdminPort}},
		Env: []corev1.EnvVar{
			// About twice the steady heap in use, well under the memory limit (docs/xds.md, Memory).
			{Name: "GOMEMLIMIT", Value: "400MiB"},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		ReadinessProbe:  httpProbe("/readyz", 5, 3),
		LivenessProbe:   httpProbe("/healthz", 10, 6),
		VolumeMounts:    []corev1.VolumeMount{{Name: "usage", MountPath: "/var/lib/inferplane"}},
		SecurityContext: restricted(),
	}
	claim := volumeClaim(o, "usage", "xds", o.UsageSize)
	var volumes []corev1.Volume
	mountTenantLimits(o, limitShards, &c, &volumes)
	return &appsv1.StatefulSet{TypeMeta: typeStatefulSet, ObjectMeta: meta(o, o.Name+"-xds", "xds"),
		Spec: appsv1.StatefulSetSpec{
			Replicas: &o.Replicas, ServiceName: o.Name + "-xds-pods", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: selector(o, "xds")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(o, "xds"), Annotations: map[string]string{
					"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(AdminPort)}},
				Spec: corev1.PodSpec{
					ServiceAccountName: o.Name + "-xds", Containers: []corev1.Container{c},
					SecurityContext:               podSecurity(uid, true),
					TerminationGracePeriodSeconds: ptr(int64(30)),
					TopologySpreadConstraints:     spread(o, "xds"),
					Volumes:                       volumes,
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claim},
		}}
}

// volumeClaim is a StatefulSet's claim of one volume per replica, in the install's storage
// class.
func volumeClaim(o Options, name, component, size string) corev1.PersistentVolumeClaim {
	claim := corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(o, component)},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
	}
	if o.StorageClass != "" {
		claim.Spec.StorageClassName = &o.StorageClass
	}
	return claim
}

func httpProbe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("admin")}},
		PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2}
}

// podSecurity runs a pod as uid, never as root, under the runtime's seccomp profile; with
// volumes, the volumes are the uid's group's (fsGroup) so it can write them.
func podSecurity(uid int64, volumes bool) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: &uid, RunAsGroup: &uid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if volumes {
		sc.FSGroup = &uid
	}
	return sc
}

func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

// spread places the replicas on different nodes where it can.
func spread(o Options, component string) []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: selector(o, component)}}}
}

func pdb(o Options, component string) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{TypeMeta: typePDB, ObjectMeta: meta(o, o.Name+"-"+component, component),
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: selector(o, component)}}}
}

// envoyObjects are Envoy's bootstrap ConfigMap, Deployment, PodDisruptionBudget and Service.
func envoyObjects(o Options) ([]client.Object, error) {
	boot, err := bootstrap.YAML(bootstrap.Options{NodeID: o.Name + "-envoy", NodeCluster: o.Name, XDSAddress: o.XDSAddress(),
		AdminAddress: "127.0.0.1:" + strconv.Itoa(EnvoyAdmin), Delta: true})
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	cm := &corev1.ConfigMap{TypeMeta: typeConfigMap, ObjectMeta: meta(o, o.Name+"-envoy", "envoy"),
		Data: map[string]string{"envoy.yaml": string(boot)}}
	svc := &corev1.Service{TypeMeta: typeService, ObjectMeta: meta(o, o.Name+"-envoy", "envoy"),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: selector(o, "envoy"),
			// Local: the client's address reaches Envoy (it is the edge and sets X-Forwarded-For).
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "https", Port: 443, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP},
			},
		}}
	if o.LoadBalancerClass != "" {
		svc.Spec.LoadBalancerClass = &o.LoadBalancerClass
	}
	if len(o.ServiceAnnotations) > 0 {
		svc.Annotations = map[string]string{}
		for _, k := range sortedKeys(o.ServiceAnnotations) {
			svc.Annotations[k] = o.ServiceAnnotations[k]
		}
	}
	return []client.Object{cm, envoyDeployment(o), pdb(o, "envoy"), svc}, nil
}

// Envoy's drain on termination (docs/xds.md, "Rolling updates"): Envoy stops at once on
// SIGTERM, so its container sleeps envoyStopDelay before it gets it, while the drainer beside
// it has Envoy ask every client to go elsewhere (for envoyDrainTime, the listeners still
// accepting) and waits for the requests in flight.
const (
	envoyDrainTime   = 15 // --drain-time-s
	envoyDrainWait   = 40 // the drainer's --max-wait
	envoyStopDelay   = 45 // Envoy's preStop sleep
	envoyGracePeriod = 60 // terminationGracePeriodSeconds
)

// envoyDeployment runs Envoy from the bootstrap; --service-node gives each pod its own node id.
func envoyDeployment(o Options) *appsv1.Deployment {
	var uid int64 = 101 // the envoy image's user
	c := corev1.Container{
		Name: "envoy", Image: o.EnvoyImage,
		Args: []string{"-c", "/etc/envoy/envoy.yaml", "--service-node", "$(POD_NAME)", "--service-cluster", o.Name,
			"--disable-hot-restart", "--drain-time-s", strconv.Itoa(envoyDrainTime), "--drain-strategy", "immediate"},
		// A sleep needs no shell (the Envoy image has no HTTP client for a drain of its own).
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: envoyStopDelay}}},
		Env:       []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: HTTPPort}, {Name: "https", ContainerPort: HTTPSPort}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
		},
		// The plain listener exists once Envoy has its configuration from the xDS server.
		ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}, PeriodSeconds: 5},
		VolumeMounts:    []corev1.VolumeMount{{Name: "bootstrap", MountPath: "/etc/envoy", ReadOnly: true}},
		SecurityContext: restricted(),
	}
	return &appsv1.Deployment{TypeMeta: typeDeployment, ObjectMeta: meta(o, o.Name+"-envoy", "envoy"),
		Spec: appsv1.DeploymentSpec{
			Replicas: &o.EnvoyReplicas,
			Selector: &metav1.LabelSelector{MatchLabels: selector(o, "envoy")},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr(intstr.FromInt32(0)), MaxSurge: ptr(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(o, "envoy")},
				Spec: corev1.PodSpec{
					ServiceAccountName: o.Name + "-envoy", Containers: []corev1.Container{c, envoyDrainer(o)},
					TerminationGracePeriodSeconds: ptr(int64(envoyGracePeriod)),
					SecurityContext:               podSecurity(uid, false),
					Volumes: []corev1.Volume{{Name: "bootstrap", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: o.Name + "-envoy"}}}}},
					TopologySpreadConstraints: spread(o, "envoy"),
				},
			},
		}}
}

// envoyDrainer drains Envoy when the pod is deleted (`inferplane gateway envoy-drainer`).
func envoyDrainer(o Options) corev1.Container {
	return corev1.Container{
		Name: "drain", Image: o.Image,
		Args: []string{"gateway", "envoy-drainer", "--envoy-admin-address", "127.0.0.1:" + strconv.Itoa(EnvoyAdmin),
			"--min-wait", strconv.Itoa(envoyDrainTime) + "s", "--max-wait", strconv.Itoa(envoyDrainWait) + "s", "--log-format", "json"},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: restricted(),
	}
}
