// Package install renders the admission webhook's install manifests as typed objects: the
// Namespace, RBAC, Service, Deployment, PodDisruptionBudget and ValidatingWebhookConfiguration.
// It is pure (no server, no client): the generator renders the same objects into each tenant's
// add-ons, `inferplane webhook manifests` prints them, and the webhook server takes its paths
// and ports from here.
package install

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/manifest"
	"github.com/inferplane/inferplane/internal/version"
	"github.com/inferplane/inferplane/policy"
)

// Defaults of ManifestOptions.
const (
	DefaultNamespace               = "inferplane-system"
	DefaultName                    = "inferplane-webhook"
	DefaultConfigurationName       = "inferplane-policy"
	DefaultReplicas          int32 = 2
	DefaultTimeoutSeconds    int32 = 5
)

// DefaultImage is this build's image, ghcr.io/inferplane/inferplane:<version> (what `make image`
// builds from the same tree; internal/version says what a development build's version is).
var DefaultImage = version.Image()

// The ports and drain time the server listens with by default and the Deployment exposes.
const (
	Port            = 9443
	MetricsPort     = 8080
	ProbePort       = 8081
	ShutdownTimeout = 30 * time.Second
)

// MemoryLimit is the webhook container's memory limit. The server bounds what it holds at once
// below it (webhook.MaxRequestBytes, webhook.MaxDecodeBytes), and GOMEMLIMIT is set a little
// under it so the Go runtime collects before the kernel would kill the pod.
const (
	MemoryLimit = "256Mi"
	goMemLimit  = "200MiB"
)

// Path is the URL path of the admission endpoint of a reviewed kind (policy.Reviewed).
func Path(k policy.Kind) string { return "/validate/" + k.Resource }

// webhookName is the name, in the ValidatingWebhookConfiguration, of a reviewed kind's webhook.
func webhookName(k policy.Kind) string { return k.Resource + ".policy.inferplane.io" }

// ManifestOptions shape the install manifests. The zero value installs the webhook in
// inferplane-system, two replicas, with a certificate it keeps in a Secret itself.
type ManifestOptions struct {
	Namespace string
	// Name names the Deployment, Service, ServiceAccount, RBAC objects and the TLS Secret
	// (<name>-tls).
	Name string
	// ConfigurationName names the ValidatingWebhookConfiguration.
	ConfigurationName string
	Image             string
	Replicas          int32
	// TimeoutSeconds is how long the API server waits for a decision (1 to 30) before it fails
	// the request closed.
	TimeoutSeconds int32
	// URL, when set, points the API server at a webhook outside the cluster (e.g.
	// `inferplane webhook serve --dev` on a workstation) instead of the in-cluster Service;
	// only the ValidatingWebhookConfiguration is rendered, with CABundle.
	URL      string
	CABundle []byte
}

func (o *ManifestOptions) defaults() error {
	o.Namespace = cmp.Or(o.Namespace, DefaultNamespace)
	o.Name = cmp.Or(o.Name, DefaultName)
	o.ConfigurationName = cmp.Or(o.ConfigurationName, DefaultConfigurationName)
	o.Image = cmp.Or(o.Image, DefaultImage)
	o.Replicas = cmp.Or(o.Replicas, DefaultReplicas)
	o.TimeoutSeconds = cmp.Or(o.TimeoutSeconds, DefaultTimeoutSeconds)
	var errs []error
	for _, f := range []struct{ field, v string }{{"namespace", o.Namespace}, {"name", o.Name}} {
		if msgs := validation.IsDNS1123Label(f.v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", f.field, f.v, msgs[0]))
		}
	}
	if msgs := validation.IsDNS1123Subdomain(o.ConfigurationName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("configuration name %q: %s", o.ConfigurationName, msgs[0]))
	}
	if o.Replicas < 1 {
		errs = append(errs, fmt.Errorf("replicas is %d, must be at least 1", o.Replicas))
	}
	if o.TimeoutSeconds < 1 || o.TimeoutSeconds > 30 {
		errs = append(errs, fmt.Errorf("timeout is %ds, must be 1 to 30 (the API server's limit)", o.TimeoutSeconds))
	}
	if o.URL != "" {
		u, err := url.Parse(o.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("url %q: must be https://host[:port] without user, query or fragment", o.URL))
		}
		if len(o.CABundle) == 0 {
			errs = append(errs, errors.New("a webhook URL needs the CA bundle that signed its certificate"))
		}
	}
	return errors.Join(errs...)
}

// labels every object of the install carries.
func installLabels(name string) map[string]string {
	return map[string]string{
		v1alpha1.LabelManagedBy:       v1alpha1.ManagedByValue,
		"app.kubernetes.io/name":      name,
		"app.kubernetes.io/component": "webhook",
	}
}

// Manifests returns the webhook's install objects, typed and in apply order: Namespace,
// ServiceAccount, ClusterRole and binding (read the policy data, fill in the caBundle), Role and
// binding (the TLS Secret), Service, Deployment, PodDisruptionBudget and the
// ValidatingWebhookConfiguration. With o.URL, only the configuration.
func Manifests(o ManifestOptions) ([]client.Object, error) {
	if err := o.defaults(); err != nil {
		return nil, fmt.Errorf("webhook manifests: %w", err)
	}
	if o.URL != "" {
		return []client.Object{configuration(o)}, nil
	}
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: installLabels(o.Name)},
	}
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: o.meta(o.Name)}
	objs := append([]client.Object{ns, sa}, rbac(o)...)
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: o.meta(o.Name),
		Spec: corev1.ServiceSpec{
			Selector: o.selector(),
			Ports: []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromString("webhook"), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: MetricsPort, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP}},
		},
	}
	pdb := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: o.meta(o.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: o.selector()},
		},
	}
	return append(objs, svc, deployment(o), pdb, configuration(o)), nil
}

func (o ManifestOptions) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: installLabels(o.Name)}
}

func (o ManifestOptions) selector() map[string]string {
	return map[string]string{"app.kubernetes.io/name": o.Name, "app.kubernetes.io/component": "webhook"}
}

func (o ManifestOptions) secretName() string { return o.Name + "-tls" }

// rbac lets the webhook read the policy data, list what a tenant runs (for its quota), fill in
// its configuration's caBundle and keep its TLS Secret; nothing more.
func rbac(o ManifestOptions) []client.Object {
	labels := installLabels(o.Name)
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: o.Name}}
	clusterRole := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Labels: labels},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"tenants", "nodetypes", "modelmasters"},
				Verbs: []string{"get", "list", "watch"}},
			// What a tenant runs, counted for its quota (policy.Counter): listed, never watched.
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"managedinferencejobs"}, Verbs: []string{"list"}},
			{APIGroups: []string{policy.GroupKindVM.Group}, Resources: []string{"virtualmachines", "virtualmachineinstances"},
				Verbs: []string{"list"}},
			{APIGroups: []string{admissionregistrationv1.GroupName}, Resources: []string{"validatingwebhookconfigurations"},
				ResourceNames: []string{o.ConfigurationName}, Verbs: []string{"get", "update"}},
		},
	}
	clusterBinding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: o.Name},
		Subjects:   subjects,
	}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: o.meta(o.Name),
		Rules: []rbacv1.PolicyRule{
			// create cannot be limited by name; get and update can.
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{o.secretName()}, Verbs: []string{"get", "update"}},
		},
	}
	roleBinding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: o.meta(o.Name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: o.Name},
		Subjects:   subjects,
	}
	return []client.Object{clusterRole, clusterBinding, role, roleBinding}
}

// deployment runs the webhook: non-root, read-only root, spread over nodes, drained on stop.
func deployment(o ManifestOptions) *appsv1.Deployment {
	certDir := "/var/run/inferplane/webhook-certs"
	trueV := true
	var uid int64 = 65532
	grace := int64(ShutdownTimeout.Seconds()) + 10
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: o.meta(o.Name),
		Spec: appsv1.DeploymentSpec{
			Replicas: &o.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: o.selector()},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr(intstr.FromInt32(0)), MaxSurge: ptr(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: installLabels(o.Name), Annotations: map[string]string{
					"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(MetricsPort),
				}},
				Spec: corev1.PodSpec{
					ServiceAccountName:            o.Name,
					TerminationGracePeriodSeconds: &grace,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: &trueV, RunAsUser: &uid, RunAsGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					// Spread replicas so that losing a node leaves one deciding.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: o.selector()},
					}},
					Containers: []corev1.Container{container(o, certDir)},
					Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
						Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("1Mi")),
					}}}},
				},
			},
		},
	}
}

func container(o ManifestOptions, certDir string) corev1.Container {
	falseV, trueV := false, true
	return corev1.Container{
		Name:  "webhook",
		Image: o.Image,
		Args: []string{
			"webhook", "serve",
			"--port=" + strconv.Itoa(Port),
			"--cert-dir=" + certDir,
			"--tls-secret=" + o.Namespace + "/" + o.secretName(),
			"--service=" + o.Namespace + "/" + o.Name,
			"--webhook-configuration=" + o.ConfigurationName,
			"--metrics-bind-address=:" + strconv.Itoa(MetricsPort),
			"--health-probe-bind-address=:" + strconv.Itoa(ProbePort),
		},
		Env: []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: goMemLimit}},
		Ports: []corev1.ContainerPort{
			{Name: "webhook", ContainerPort: Port, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
			{Name: "probes", ContainerPort: ProbePort, Protocol: corev1.ProtocolTCP},
		},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/readyz", Port: intstr.FromString("probes")}}, PeriodSeconds: 5},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromString("probes")}}, PeriodSeconds: 10, FailureThreshold: 3},
		// Keep serving while the endpoint is removed from the Service, then drain.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(MemoryLimit)},
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: &falseV, ReadOnlyRootFilesystem: &trueV,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: certDir}},
	}
}

// policyChangeCEL is true for a CREATE and for an UPDATE that changes what the policy reads:
// the spec or an inferplane.io/ label or annotation. A VMI's status, KubeVirt's own labels and
// finalizers are written through the main resource; without this condition each of those
// writes would call the webhook (and fail closed while it is down). policy's Rules.Unchanged is the
// same test in Go (policy.Rules.Unchanged).
const policyChangeCEL = `request.operation != 'UPDATE' ||
(has(object.spec) ? object.spec : {}) != (has(oldObject.spec) ? oldObject.spec : {}) ||
(has(object.metadata.labels) ? object.metadata.labels : {}).exists(k, k.startsWith('inferplane.io/') &&
  !(has(oldObject.metadata.labels) && k in oldObject.metadata.labels && oldObject.metadata.labels[k] == object.metadata.labels[k])) ||
(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}).exists(k, k.startsWith('inferplane.io/') &&
  !(has(object.metadata.labels) && k in object.metadata.labels)) ||
(has(object.metadata.annotations) ? object.metadata.annotations : {}).exists(k, k.startsWith('inferplane.io/') &&
  !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k])) ||
(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}).exists(k, k.startsWith('inferplane.io/') &&
  !(has(object.metadata.annotations) && k in object.metadata.annotations))`

func configuration(o ManifestOptions) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	namespaced, cluster := admissionregistrationv1.NamespacedScope, admissionregistrationv1.ClusterScope
	var hooks []admissionregistrationv1.ValidatingWebhook
	for _, k := range policy.Reviewed() {
		cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
		if o.URL != "" {
			u := o.URL + Path(k)
			cc.URL = &u
		} else {
			cc.Service = &admissionregistrationv1.ServiceReference{Namespace: o.Namespace, Name: o.Name, Path: ptr(Path(k)), Port: ptr(int32(443))}
		}
		scope := &cluster
		if k.Namespaced {
			scope = &namespaced
		}
		hooks = append(hooks, admissionregistrationv1.ValidatingWebhook{
			Name:         webhookName(k),
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{k.Group}, APIVersions: []string{k.Version},
					Resources: []string{k.Resource}, Scope: scope},
			}},
			// Only inferplane's workloads: the webhook guards them, not the whole cluster.
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: v1alpha1.LabelTenant, Operator: metav1.LabelSelectorOpExists,
			}}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "policy-relevant-change", Expression: policyChangeCEL}},
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			SideEffects:             &none,
			TimeoutSeconds:          &o.TimeoutSeconds,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: o.ConfigurationName, Labels: installLabels(o.Name)},
		Webhooks:   hooks,
	}
}

func ptr[T any](v T) *T { return &v }

// YAML encodes objects as one YAML stream (what `inferplane webhook manifests` prints), without
// the empty fields typed structs carry (creationTimestamp: null, status: {}).
func YAML(objs []client.Object) ([]byte, error) {
	docs := make([]any, 0, len(objs))
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, err
		}
		for _, md := range []map[string]any{nested(u, "metadata"), nested(u, "spec", "template", "metadata")} {
			if md != nil && md["creationTimestamp"] == nil {
				delete(md, "creationTimestamp")
			}
		}
		if st, ok := u["status"].(map[string]any); ok && len(st) == 0 {
			delete(u, "status")
		}
		docs = append(docs, u)
	}
	return manifest.Encode(docs...)
}

func nested(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return m
}
