// Package install renders the product API's install manifests for the host cluster: a
// StatefulSet of `inferplane api serve` (2 replicas: the server keeps no state, but each replica
// has a name the others reach it at, to hand it their writes on a port of their own, which a
// NetworkPolicy keeps to the API's pods), its Services, PodDisruptionBudget,
// ServiceAccount and the Roles it needs (read the cluster registry and the
// Argo CD Applications, keep APIKey objects in its namespace), with the web console served as
// `api serve` serves it: at the console's URL, signing in with the provider, its sessions
// sealed with keys every replica reads from one Secret. It is pure: `inferplane api manifests`
// prints the objects and `generate --gateway-dir` writes them beside the gateway's.
package install

import (
	"bytes"
	"os"
	"path/filepath"

	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/auth/keys"
	gwinstall "github.com/inferplane/inferplane/gateway/install"
	"github.com/inferplane/inferplane/internal/fileutil"
	"github.com/inferplane/inferplane/internal/manifest"
)

// Defaults of Options.
const (
	DefaultName           = "inferplane-api"
	DefaultReplicas int32 = 2
	// Port is the customers' (the Service's); PeerPort the replicas' own, where they hand each
	// other writes (api serve --peer-listen), reached at each pod's name, never the Service.
	Port     = 8080
	PeerPort = 8081
)

// Where the Secrets are mounted in the pods.
const (
	inputsCredentials = "/etc/inferplane/inputs/credentials"
	tenantsDir        = "/etc/inferplane/tenant-git"
	keySecretFile     = "/etc/inferplane/keys/secret"
	consoleDir        = "/etc/inferplane/console"
	peerDir           = "/etc/inferplane/peers"
)

// PeerTokenKey is the key of the peers' Secret (Options.PeerSecret): the token the replicas
// share to hand writes to each other (openssl rand -hex 32).
const PeerTokenKey = "token"

// The keys of the console's Secret (Options.ConsoleSecret).
const (
	// SessionKeysKey holds the keys that seal the console's session cookies, one per line
	// (openssl rand -hex 32): every replica reads the same, so any replica opens a session
	// another sealed.
	SessionKeysKey = "session-keys"
	// ClientSecretKey holds the console's OIDC client secret (a confidential client only).
	ClientSecretKey = "client-secret"
)

// Options shape the install. Domain, Issuer, ClientID and InputsRepo are required.
type Options struct {
	// Namespace is the gateway's (default inferplane-system): the API keeps API keys there,
	// where the xDS servers watch them, and reaches the xDS servers' admin ports.
	Namespace string
	Name      string
	Image     string
	Replicas  int32
	// Domain: the API answers at api.<domain>, endpoints are <job>.<tenant>.<domain>.
	Domain string
	// Issuer and ClientID are the OIDC provider's; AdminGroups the operator's groups.
	Issuer, ClientID string
	AdminGroups      []string
	// InputsRepo and InputsBranch are the inputs repository; InputsSecret holds its
	// credentials (key "credentials"), TenantGitSecret the variables tenants' spec.git.auth
	// names (one key each), KeySecret the API key HMAC secret (key "secret", the gateway's).
	InputsRepo, InputsBranch                 string
	InputsSecret, TenantGitSecret, KeySecret string
	// Gateway is the gateway install's name (its xDS servers are <gateway>-xds-<i>) and
	// GatewayReplicas how many there are: usage is summed over each.
	Gateway         string
	GatewayReplicas int32
	// NoMeter: the gateway was installed without its GPU meter; otherwise api serve reads the
	// meter at <gateway>-meter (the usage route's GPU-seconds and what the quota leaves).
	NoMeter bool
	// ArgoCDNamespace and VClusterNamespaces are the cluster registry's namespaces.
	ArgoCDNamespace    string
	VClusterNamespaces []string

	// NoConsole serves the API only. Otherwise the console is served at ConsoleURL (default
	// https://api.<domain>, where the API answers), signing in as ConsoleClientID (default
	// ClientID), whose redirect URIs must hold <ConsoleURL>/auth/callback; a confidential
	// client (ConsoleConfidential) reads its secret from ConsoleSecret too.
	NoConsole           bool
	ConsoleURL          string
	ConsoleClientID     string
	ConsoleConfidential bool
	// ConsoleSecret holds the session keys (SessionKeysKey) and the client secret
	// (ClientSecretKey); default <name>-console.
	ConsoleSecret string
	// ConsoleGateway is where the playground sends the endpoints' requests (host:port of the
	// gateway's TLS listener); default the gateway's Envoy Service, <gateway>-envoy.<ns>.svc:443.
	ConsoleGateway string

	// PeerSecret holds the token (PeerTokenKey) with which the replicas hand their writes to
	// the one that pushed last (api serve --peer-url --peer-token-file); default <name>-peers.
	// One replica has no peers: it is then neither read nor needed.
	PeerSecret string
}

// peers says whether the replicas hand writes to each other: whenever there are several.
func (o Options) peers() bool { return o.Replicas > 1 }

// PeerURL is where the other replicas reach a replica: its pod's name (the POD_NAME variable
// the kubelet puts in its command line) under the headless Service, a name only that pod answers
// at, for as long as it runs, whatever its IP address.
func (o Options) PeerURL() string {
	return fmt.Sprintf("http://$(%s).%s.%s.svc:%d", podNameEnv, o.podsService(), o.Namespace, PeerPort)
}

// podsService is the headless Service that names each replica.
func (o Options) podsService() string { return o.Name + "-pods" }

// podNameEnv is the variable of the pod's own name (downward API).
const podNameEnv = "POD_NAME"

func (o *Options) defaults() error {
	o.Namespace = cmp.Or(o.Namespace, gwinstall.DefaultNamespace)
	o.Name = cmp.Or(o.Name, DefaultName)
	o.Image = cmp.Or(o.Image, gwinstall.DefaultImage)
	o.Replicas = cmp.Or(o.Replicas, DefaultReplicas)
	o.Gateway = cmp.Or(o.Gateway, gwinstall.DefaultName)
	o.GatewayReplicas = cmp.Or(o.GatewayReplicas, gwinstall.DefaultReplicas)
	o.ArgoCDNamespace = cmp.Or(o.ArgoCDNamespace, "argocd")
	o.InputsSecret = cmp.Or(o.InputsSecret, o.Name+"-inputs")
	o.TenantGitSecret = cmp.Or(o.TenantGitSecret, o.Name+"-tenant-git")
	o.KeySecret = cmp.Or(o.KeySecret, o.Gateway+"-keys")
	o.ConsoleURL = strings.TrimRight(cmp.Or(o.ConsoleURL, "https://api."+o.Domain), "/")
	o.ConsoleSecret = cmp.Or(o.ConsoleSecret, o.Name+"-console")
	o.PeerSecret = cmp.Or(o.PeerSecret, o.Name+"-peers")
	o.ConsoleGateway = cmp.Or(o.ConsoleGateway, net.JoinHostPort(o.Gateway+"-envoy."+o.Namespace+".svc", "443"))
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(o.Domain); o.Domain == "" || len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--domain %q: expected a DNS name such as models.example.com", o.Domain))
	}
	if u, err := url.Parse(o.Issuer); o.Issuer == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		errs = append(errs, fmt.Errorf("--oidc-issuer %q: expected the provider's issuer URL", o.Issuer))
	}
	if o.ClientID == "" {
		errs = append(errs, errors.New("--oidc-client-id: required (tokens are checked to be issued for it)"))
	}
	if u, err := url.Parse(o.InputsRepo); o.InputsRepo == "" || err != nil || u.User != nil {
		errs = append(errs, fmt.Errorf("--inputs-repo %q: expected an https:// URL without credentials (they go in Secret %s)", o.InputsRepo, o.InputsSecret))
	}
	if o.Replicas < 1 {
		errs = append(errs, fmt.Errorf("--replicas %d: at least 1", o.Replicas))
	}
	if !o.NoConsole {
		// Browsers keep the session cookie (Secure) only over https: a replica beyond
		// 127.0.0.1 is never reached over plain http.
		if u, err := url.Parse(o.ConsoleURL); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("--console-url %q: expected an https:// URL with no path, where browsers reach the console", o.ConsoleURL))
		}
		if _, port, err := net.SplitHostPort(o.ConsoleGateway); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("--console-gateway %q: expected host:port, the gateway's TLS listener", o.ConsoleGateway))
		}
	}
	return errors.Join(errs...)
}

func labels(o Options) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "inferplane", "app.kubernetes.io/component": "api",
		"app.kubernetes.io/instance": o.Name, "app.kubernetes.io/managed-by": "inferplane"}
}

func selector(o Options) map[string]string {
	return map[string]string{"app.kubernetes.io/component": "api", "app.kubernetes.io/instance": o.Name}
}

func meta(o Options, name, ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels(o)}
}

func ptr[T any](v T) *T { return &v }

// Manifests are the objects in apply order.
func Manifests(o Options) ([]client.Object, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	out := []client.Object{&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: meta(o, o.Name, o.Namespace), AutomountServiceAccountToken: ptr(true)}}
	out = append(out, rbac(o)...)
	out = append(out, statefulSet(o), service(o), podsService(o), pdb(o))
	if o.peers() {
		out = append(out, networkPolicy(o))
	}
	return out, nil
}

// rbac: Roles only, nothing cluster-wide. In its namespace: APIKey objects (create, revoke,
// list). In the registry's namespaces: read Secrets (the tenant clusters' credentials, as the
// gateway does) and, in Argo CD's, the Applications (the readiness stages).
func rbac(o Options) []client.Object {
	read := []string{"get", "list", "watch"}
	var out []client.Object
	grant := func(ns, name string, rules ...rbacv1.PolicyRule) {
		m := meta(o, name, ns)
		out = append(out,
			&rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"}, ObjectMeta: m, Rules: rules},
			&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"}, ObjectMeta: m,
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: o.Name}}})
	}
	grant(o.Namespace, o.Name, rbacv1.PolicyRule{APIGroups: []string{"inferplane.io"}, Resources: []string{"apikeys"},
		Verbs: []string{"get", "list", "watch", "create", "patch", "update"}})
	if ns := o.ArgoCDNamespace; ns != "-" {
		grant(ns, o.Namespace+"-"+o.Name,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: read},
			rbacv1.PolicyRule{APIGroups: []string{"argoproj.io"}, Resources: []string{"applications"}, Verbs: read})
	}
	for _, ns := range o.VClusterNamespaces {
		if ns != o.ArgoCDNamespace {
			grant(ns, o.Namespace+"-"+o.Name, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: read})
		}
	}
	return out
}

// Args is the api serve command line of the install.
func Args(o Options) []string {
	args := []string{"api", "serve", "--listen", ":" + strconv.Itoa(Port), "--in-cluster",
		"--oidc-issuer", o.Issuer, "--oidc-client-id", o.ClientID,
		"--inputs-repo", o.InputsRepo, "--inputs-credentials-file", inputsCredentials,
		"--tenant-credentials-dir", tenantsDir, "--work-dir", "/var/lib/inferplane-api",
		"--domain", o.Domain, "--argocd-namespace", o.ArgoCDNamespace,
		"--keys-namespace", o.Namespace, "--keys-secret-file", keySecretFile, "--log-format", "json"}
	if o.InputsBranch != "" {
		args = append(args, "--inputs-branch", o.InputsBranch)
	}
	for _, g := range o.AdminGroups {
		args = append(args, "--admin-group", g)
	}
	for _, ns := range o.VClusterNamespaces {
		args = append(args, "--vcluster-namespace", ns)
	}
	gw := gwinstall.Options{Name: o.Gateway, Namespace: o.Namespace, Replicas: o.GatewayReplicas}
	for _, u := range gw.XDSAdminURLs() {
		args = append(args, "--server", u)
	}
	if !o.NoMeter {
		args = append(args, "--meter", gw.MeterURL())
	}
	if o.peers() {
		args = append(args, "--peer-listen", ":"+strconv.Itoa(PeerPort), "--peer-url", o.PeerURL(), "--peer-token-file", peerDir+"/"+PeerTokenKey)
	}
	return append(args, consoleArgs(o)...)
}

// consoleArgs serve the console as api serve does beyond 127.0.0.1: at its URL (without one
// it would serve the API only), with the session keys of the Secret every replica mounts.
func consoleArgs(o Options) []string {
	if o.NoConsole {
		return []string{"--no-console"}
	}
	args := []string{"--console-url", o.ConsoleURL, "--console-session-keys", consoleDir + "/" + SessionKeysKey,
		"--console-gateway", o.ConsoleGateway}
	if o.ConsoleClientID != "" && o.ConsoleClientID != o.ClientID {
		args = append(args, "--console-client-id", o.ConsoleClientID)
	}
	if o.ConsoleConfidential {
		args = append(args, "--console-client-secret-file", consoleDir+"/"+ClientSecretKey)
	}
	return args
}

// consoleVolume is the console's Secret, with only the keys api serve reads: the pod does not
// start until the Secret holds them (a replica with keys of its own would sign out whoever
// reached another).
func consoleVolume(o Options) corev1.Volume {
	v := secretVolume("console", o.ConsoleSecret, false)
	v.Secret.Items = []corev1.KeyToPath{{Key: SessionKeysKey, Path: SessionKeysKey}}
	if o.ConsoleConfidential {
		v.Secret.Items = append(v.Secret.Items, corev1.KeyToPath{Key: ClientSecretKey, Path: ClientSecretKey})
	}
	return v
}

func secretVolume(name, secret string, optional bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secret, DefaultMode: ptr(int32(0o400)), Optional: ptr(optional)}}}
}

// statefulSet runs the replicas. A StatefulSet, not a Deployment, for the names: each replica
// is <name>-<i> under the headless Service, the peer URL the others hand it writes at (an IP
// address could pass to another pod, which would then be sent the peers' token). Pods start
// and stop in parallel, as a Deployment's would: no replica waits on another.
func statefulSet(o Options) *appsv1.StatefulSet {
	c := container(o)
	keysVol := secretVolume("keys", o.KeySecret, false)
	keysVol.Secret.Items = []corev1.KeyToPath{{Key: "secret", Path: "secret"}}
	inputsVol := secretVolume("inputs", o.InputsSecret, false)
	inputsVol.Secret.Items = []corev1.KeyToPath{{Key: "credentials", Path: "credentials"}}
	volumes := []corev1.Volume{inputsVol, secretVolume("tenant-git", o.TenantGitSecret, true), keysVol,
		{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if !o.NoConsole {
		volumes = append(volumes, consoleVolume(o))
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "console", MountPath: consoleDir, ReadOnly: true})
	}
	if o.peers() {
		// Not optional: a replica without the token could not start (api serve reads the file).
		peersVol := secretVolume("peers", o.PeerSecret, false)
		peersVol.Secret.Items = []corev1.KeyToPath{{Key: PeerTokenKey, Path: PeerTokenKey}}
		volumes = append(volumes, peersVol)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "peers", MountPath: peerDir, ReadOnly: true})
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "peers", ContainerPort: PeerPort})
	}
	var uid int64 = 65532
	return &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet"},
		ObjectMeta: meta(o, o.Name, o.Namespace),
		Spec: appsv1.StatefulSetSpec{
			Replicas: &o.Replicas, ServiceName: o.podsService(), PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: selector(o)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(o), Annotations: map[string]string{
					"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(Port)}},
				Spec: corev1.PodSpec{
					ServiceAccountName: o.Name, Containers: []corev1.Container{c},
					Volumes: volumes,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					TerminationGracePeriodSeconds: ptr(int64(30)),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: selector(o)}}},
				},
			},
		}}
}

// container is api serve's, with the mounts every replica has.
func container(o Options) corev1.Container {
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2}
	}
	return corev1.Container{
		Name: "api", Image: o.Image, Args: Args(o),
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: Port}},
		Env: []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "900MiB"},
			// The kubelet puts it in the command line's $(POD_NAME) (the peer URL).
			{Name: podNameEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		ReadinessProbe: probe("/readyz", 5, 3),
		LivenessProbe:  probe("/healthz", 10, 6),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "inputs", MountPath: "/etc/inferplane/inputs", ReadOnly: true},
			{Name: "tenant-git", MountPath: tenantsDir, ReadOnly: true},
			{Name: "keys", MountPath: "/etc/inferplane/keys", ReadOnly: true},
			{Name: "work", MountPath: "/var/lib/inferplane-api"},
			{Name: "tmp", MountPath: "/tmp"},
		},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
	}
}

func service(o Options) *corev1.Service {
	return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta(o, o.Name, o.Namespace),
		Spec: corev1.ServiceSpec{Selector: selector(o), Ports: []corev1.ServicePort{{Name: "http", Port: Port,
			TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}}}
}

// podsService is headless: a DNS name for each replica (<pod>.<name>-pods), the peer URLs, on
// the peer port when there are peers. Not-ready replicas keep theirs: a writer busy enough to
// miss a readiness probe is still the one the others hand writes to.
func podsService(o Options) *corev1.Service {
	ports := []corev1.ServicePort{{Name: "http", Port: Port, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}
	if o.peers() {
		ports = append(ports, corev1.ServicePort{Name: "peers", Port: PeerPort, TargetPort: intstr.FromString("peers"), Protocol: corev1.ProtocolTCP})
	}
	return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta(o, o.podsService(), o.Namespace),
		Spec: corev1.ServiceSpec{Selector: selector(o), ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true, Ports: ports}}
}

// networkPolicy lets only the API's own pods reach the peer port, and everyone the customers'
// port as before. Policies only add what they allow, so the customers' port is a rule of its
// own, open to any source, beside the peers' rule; once a policy selects the pods, nothing
// else reaches them (nothing else listens there).
func networkPolicy(o Options) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := func(p int32) []networkingv1.NetworkPolicyPort {
		n := intstr.FromInt32(p)
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &n}}
	}
	return &networkingv1.NetworkPolicy{TypeMeta: metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: meta(o, o.Name, o.Namespace),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector(o)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: port(Port)},
				{Ports: port(PeerPort), From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: selector(o)}}}},
			},
		}}
}

func pdb(o Options) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{TypeMeta: metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: meta(o, o.Name, o.Namespace),
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: selector(o)}}}
}

// YAML is the manifests as one YAML stream, with a header saying which Secrets to create (they
// never go to git).
func YAML(o Options) ([]byte, error) {
	objs, err := Manifests(o)
	if err != nil {
		return nil, err
	}
	_ = o.defaults()
	anys := make([]any, len(objs))
	for i, obj := range objs {
		anys[i] = obj
	}
	body, err := manifest.Encode(anys...)
	if err != nil {
		return nil, err
	}
	header := "# inferplane product API (api serve) for the host cluster, answering at api." + o.Domain + ".\n" +
		"# Before applying, create its Secrets (never stored in git):\n" +
		"#   kubectl -n " + o.Namespace + " create secret generic " + o.InputsSecret + " --from-file=credentials=<file: user:token of the inputs repository>\n" +
		"#   kubectl -n " + o.Namespace + " create secret generic " + o.TenantGitSecret + " --from-literal=<VARIABLE spec.git.auth names>=<token> ...\n" +
		consoleHeader(o) + peersHeader(o) +
		"# and the gateway's key secret " + o.KeySecret + " (key \"secret\", see gateway manifests): API keys minted here are\n" +
		"# APIKey objects in " + o.Namespace + ", hashed with it (" + keys.SecretEnv + ").\n" +
		"# An install that ran the API as a Deployment: delete it once this StatefulSet runs (kubectl -n " + o.Namespace + " delete deployment " + o.Name + ").\n"
	return append([]byte(header), body...), nil
}

// consoleHeader says how to make the console's Secret, and what the provider's client needs.
func consoleHeader(o Options) string {
	if o.NoConsole {
		return ""
	}
	secret := ""
	if o.ConsoleConfidential {
		secret = " --from-file=" + ClientSecretKey + "=<file: the client's secret>"
	}
	return "#   kubectl -n " + o.Namespace + " create secret generic " + o.ConsoleSecret + " --from-file=" + SessionKeysKey + "=<(openssl rand -hex 32)" + secret + "\n" +
		"# (the web console's: every replica seals and opens sessions with the same keys; rotate by putting a new line first),\n" +
		"# with " + o.ConsoleURL + "/auth/callback among the redirect URIs of the OIDC client " + cmp.Or(o.ConsoleClientID, o.ClientID) + ",\n"
}

// peersHeader says how to make the peers' Secret, when there are peers.
func peersHeader(o Options) string {
	if !o.peers() {
		return ""
	}
	return "#   kubectl -n " + o.Namespace + " create secret generic " + o.PeerSecret + " --from-file=" + PeerTokenKey + "=<(openssl rand -hex 32)\n" +
		"# (the token with which the replicas hand their writes to the one that pushed last, at " + o.PeerURL() + "),\n"
}

// File is the file of the API's manifests in an operator repository's gateway folder.
const File = "api.yaml"

// WriteFile writes the manifests to dir/api.yaml in one rename; changed is false when it held
// the same bytes.
func WriteFile(dir string, o Options) (changed bool, err error) {
	data, err := YAML(o)
	if err != nil {
		return false, err
	}
	path := filepath.Join(dir, File)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	return true, fileutil.WriteAtomic(path, data, 0o644)
}
