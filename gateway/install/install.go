// Package install renders the gateway's install manifests for the host cluster: the xDS
// server (a StatefulSet of `inferplane xds serve --source clusters`, its RBAC, Services and
// PodDisruptionBudget), the key checks (a Deployment of `inferplane keys serve`, its RBAC,
// headless Service and PodDisruptionBudget) and Envoy (a Deployment started from `inferplane
// xds bootstrap`'s bootstrap in a ConfigMap, drained on termination by `inferplane gateway
// envoy-drainer` beside it, its PodDisruptionBudget and a Service of type LoadBalancer). It
// is pure: `inferplane gateway manifests` prints the objects and `generate --gateway-dir`
// writes them.
package install

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/version"
	"github.com/inferplane/inferplane/xds/resources"
)

// Defaults of Options.
const (
	DefaultNamespace        = "inferplane-system"
	DefaultName             = "inferplane-gateway"
	DefaultEnvoyImage       = "docker.io/envoyproxy/envoy:v1.36.13" // an exact release, never a tag that moves
	DefaultReplicas   int32 = 2
	DefaultUsageSize        = "1Gi"
	DefaultMeterSize        = "10Gi"

	// Ports inside the pods. Envoy listens on unprivileged ports; its Service maps 80 and 443.
	GRPCPort     = 18000
	AdminPort    = 9090
	KeysGRPCPort = 18001
	KeysAdmin    = 9091
	HTTPPort     = 8080
	HTTPSPort    = 8443
	EnvoyAdmin   = 9901
	MeterAdmin   = 9095
	keySecretKey = "secret"
)

// DefaultImage is this build's image, ghcr.io/inferplane/inferplane:<version> (what `make image`
// builds from the same tree; internal/version says what a development build's version is).
var DefaultImage = version.Image()

// Options shape the install. Domain is required; the zero value of the rest installs two xDS
// servers and two Envoys in inferplane-system, reading Argo CD's cluster Secrets in argocd, API
// keys (APIKey objects) and TLS certificates (kubernetes.io/tls Secrets) in its own namespace.
type Options struct {
	Namespace string
	// Name prefixes every object: <name>-xds, <name>-envoy.
	Name       string
	Domain     string
	Image      string
	EnvoyImage string
	// RedisImage runs the limits store (rate limits and token budgets shared by the xDS
	// servers and the key checks).
	RedisImage string
	// Replicas of the xDS server, of Envoy and of the key check.
	Replicas         int32
	EnvoyReplicas    int32
	KeyCheckReplicas int32
	// ArgoCDNamespace holds Argo CD's cluster Secrets ("-": none); VClusterNamespaces are where
	// vCluster writes kubeconfig Secrets. The xDS server may read Secrets there and nowhere
	// else.
	ArgoCDNamespace    string
	VClusterNamespaces []string
	// KeySecret names the Secret (key "secret") holding the API key secret, which is never
	// rendered: create it with `inferplane keys secret`.
	KeySecret string
	// UsageSize is the volume of each xDS server's usage ledger.
	UsageSize    string
	StorageClass string
	// NoMeter leaves the GPU meter out; MeterSize is the volume of its records (93 days of
	// them by default).
	NoMeter   bool
	MeterSize string
	// TenantLimits are the tenant.yaml files of the tenants with limits, by tenant, and the
	// files of the tiers they name, by "tiers/<tier>" (limits.TenantFilesWithLimits): spread
	// over ConfigMaps mounted as one flat folder, the --limits-tenants folder of the xDS servers
	// and the key checks (none: keys' own limits only).
	TenantLimits map[string][]byte
	// LoadBalancerClass and ServiceAnnotations shape Envoy's Service.
	LoadBalancerClass  string
	ServiceAnnotations map[string]string
}

func (o *Options) defaults() error {
	o.Namespace = cmp.Or(o.Namespace, DefaultNamespace)
	o.Name = cmp.Or(o.Name, DefaultName)
	o.Image = cmp.Or(o.Image, DefaultImage)
	o.EnvoyImage = cmp.Or(o.EnvoyImage, DefaultEnvoyImage)
	o.RedisImage = cmp.Or(o.RedisImage, DefaultRedisImage)
	o.Replicas = cmp.Or(o.Replicas, DefaultReplicas)
	o.EnvoyReplicas = cmp.Or(o.EnvoyReplicas, DefaultReplicas)
	o.KeyCheckReplicas = cmp.Or(o.KeyCheckReplicas, DefaultReplicas)
	o.ArgoCDNamespace = cmp.Or(o.ArgoCDNamespace, clusters.ArgoCDNamespace)
	o.KeySecret = cmp.Or(o.KeySecret, o.Name+"-keys")
	o.UsageSize = cmp.Or(o.UsageSize, DefaultUsageSize)
	o.MeterSize = cmp.Or(o.MeterSize, DefaultMeterSize)
	var errs []error
	if err := resources.DefaultConfig(o.Domain).Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct{ field, v string }{{"namespace", o.Namespace}, {"name", o.Name}} {
		if msgs := validation.IsDNS1123Label(f.v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", f.field, f.v, msgs[0]))
		}
	}
	if len(o.Name) > 40 {
		errs = append(errs, fmt.Errorf("name %q: at most 40 characters (objects are named <name>-envoy and so on)", o.Name))
	}
	if err := (clusters.Options{ArgoCDNamespace: o.ArgoCDNamespace, VClusterNamespaces: o.VClusterNamespaces}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Replicas < 1 || o.EnvoyReplicas < 1 || o.KeyCheckReplicas < 1 {
		errs = append(errs, fmt.Errorf("replicas %d, %d and %d: at least 1 each", o.Replicas, o.EnvoyReplicas, o.KeyCheckReplicas))
	}
	if _, err := resource.ParseQuantity(o.UsageSize); err != nil {
		errs = append(errs, fmt.Errorf("usage volume size %q: %v", o.UsageSize, err))
	}
	if _, err := resource.ParseQuantity(o.MeterSize); err != nil {
		errs = append(errs, fmt.Errorf("meter volume size %q: %v", o.MeterSize, err))
	}
	return errors.Join(errs...)
}

// Manifests returns the gateway's install objects, typed, in apply order.
func Manifests(o Options) ([]client.Object, error) {
	if err := o.defaults(); err != nil {
		return nil, fmt.Errorf("gateway manifests: %w", err)
	}
	objs := []client.Object{namespace(o), serviceAccount(o, o.Name+"-xds", true), serviceAccount(o, o.Name+"-envoy", false)}
	objs = append(objs, rbac(o)...)
	objs = append(objs, xdsServices(o)...)
	objs = append(objs, redisObjects(o)...)
	shards, err := tenantLimitsConfigMaps(o)
	if err != nil {
		return nil, fmt.Errorf("gateway manifests: %w", err)
	}
	for _, cm := range shards {
		objs = append(objs, cm)
	}
	objs = append(objs, xdsStatefulSet(o, len(shards)), pdb(o, "xds"))
	objs = append(objs, keyCheckObjects(o, len(shards))...)
	if !o.NoMeter {
		objs = append(objs, meterObjects(o)...)
	}
	envoy, err := envoyObjects(o)
	if err != nil {
		return nil, err
	}
	return append(objs, envoy...), nil
}

// XDSAddress is where Envoy (and its access logs) reach the xDS servers.
func (o Options) XDSAddress() string {
	return net.JoinHostPort(o.Name+"-xds."+o.Namespace+".svc", strconv.Itoa(GRPCPort))
}

// XDSAdminURLs are the admin addresses of each xDS server by its own name under the headless
// Service (<name>-xds-<i>.<name>-xds-pods): what sums over every replica (the keys' token
// counts, usage) reads.
func (o Options) XDSAdminURLs() []string {
	urls := make([]string, o.Replicas)
	for i := range o.Replicas {
		urls[i] = fmt.Sprintf("http://%s-xds-%d.%s-xds-pods.%s.svc:%d", o.Name, i, o.Name, o.Namespace, AdminPort)
	}
	return urls
}

// KeyCheckAddress is where Envoy reaches the key checks: their headless Service, whose name
// resolves to every ready one.
func (o Options) KeyCheckAddress() string {
	return net.JoinHostPort(o.Name+"-keys."+o.Namespace+".svc", strconv.Itoa(KeysGRPCPort))
}

// labels of every object; component is xds or envoy ("" for shared objects).
func labels(o Options, component string) map[string]string {
	l := map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, "app.kubernetes.io/name": o.Name}
	if component != "" {
		l["app.kubernetes.io/component"] = component
	}
	return l
}

func selector(o Options, component string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": o.Name, "app.kubernetes.io/component": component}
}

func meta(o Options, name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: labels(o, component)}
}

func ptr[T any](v T) *T { return &v }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
