// Package clusters is the registry of tenant clusters: which Kubernetes API serves each
// tenant's workloads, and the client configuration to reach it. It reads what Argo CD already
// uses (cluster Secrets labelled argocd.argoproj.io/secret-type: cluster, whose name is the
// tenant's destination) and the kubeconfig Secrets vCluster writes for each virtual cluster
// (vc-<name>, key config), so the gateway and the CLI reach a tenant cluster the way Argo CD
// syncs it.
//
// Read turns Secrets into clusters (pure); Registry watches a host cluster's Secrets and
// reports every change; List is the one-shot read of a command, and Find picks the cluster a
// tenant's Applications sync to.
package clusters

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/warning"
)

// Argo CD's cluster Secret format (its declarative setup).
const (
	ArgoCDNamespace       = "argocd"
	ArgoCDSecretTypeKey   = "argocd.argoproj.io/secret-type"
	ArgoCDSecretTypeValue = "cluster"
	ArgoCDKeyName         = "name"
	ArgoCDKeyServer       = "server"
	ArgoCDKeyConfig       = "config"

	// VClusterKeyConfig is the key of the kubeconfig in a vCluster Secret.
	VClusterKeyConfig = "config"
	// VClusterNamePrefix starts the name of the Secret vCluster writes: vc-<name>.
	VClusterNamePrefix = "vc-"
)

// Kinds of registry entry.
const (
	KindArgoCD   = "argocd"
	KindVCluster = "vcluster"
)

// Cluster is one tenant cluster.
type Cluster struct {
	// Tenant owns the cluster: the Secret's inferplane.io/tenant label, else Name.
	Tenant string
	// Name is the cluster's own name: (Argo CD) the name key, which an Application's
	// destination.name refers to, or (vCluster) the Secret's name after vc-.
	Name string
	// Kind says where the entry came from (KindArgoCD, KindVCluster); Secret names it
	// (namespace/name).
	Kind   string
	Secret string
	// Server is the API server's URL.
	Server string
	// Config reaches the API server with the Secret's credentials. It carries secrets: never
	// log or print it.
	Config *rest.Config `json:"-"`
	// Fingerprint changes whenever what Config was built from changes (a rotated token).
	Fingerprint string
	// created orders Secrets that claim the same tenant (the oldest wins).
	created int64
}

// Snapshot is the registry at one moment: one cluster per tenant, sorted by tenant.
type Snapshot struct {
	Clusters []Cluster
	Problems []warning.Warning // Secrets the registry could not use, or read with a warning
}

// Get returns the tenant's cluster.
func (s Snapshot) Get(tenant string) (Cluster, bool) {
	i, ok := slices.BinarySearchFunc(s.Clusters, tenant, func(c Cluster, t string) int { return cmp.Compare(c.Tenant, t) })
	if !ok {
		return Cluster{}, false
	}
	return s.Clusters[i], true
}

// Options select the Secrets that make up the registry.
type Options struct {
	// ArgoCDNamespace holds Argo CD's cluster Secrets (default "argocd"); "-" reads none.
	ArgoCDNamespace string
	// VClusterNamespaces are the host namespaces where vCluster writes its kubeconfig Secrets;
	// empty reads none.
	VClusterNamespaces []string
	// VClusterSelector, when set, selects vCluster Secrets by label; otherwise Secrets whose
	// name starts with vc- are read.
	VClusterSelector labels.Selector
}

func (o Options) argoNamespace() string { return cmp.Or(o.ArgoCDNamespace, ArgoCDNamespace) }

// Sources says which Secrets the options read, for messages.
func (o Options) Sources() string {
	var parts []string
	if ns := o.argoNamespace(); ns != "-" {
		parts = append(parts, "Argo CD cluster Secrets in namespace "+ns)
	}
	if len(o.VClusterNamespaces) > 0 {
		which := "vCluster kubeconfig Secrets vc-*"
		if o.VClusterSelector != nil {
			which = "vCluster kubeconfig Secrets selected by " + o.VClusterSelector.String()
		}
		parts = append(parts, which+" in namespaces "+strings.Join(o.VClusterNamespaces, ", "))
	}
	if len(parts) == 0 {
		return "no Secrets (no Argo CD namespace and no vCluster namespace)"
	}
	return strings.Join(parts, "; ")
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if ns := o.argoNamespace(); ns != "-" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("argo CD namespace %q: %s", ns, msgs[0]))
		}
	}
	for _, ns := range o.VClusterNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("vCluster namespace %q: %s", ns, msgs[0]))
		}
	}
	return errors.Join(errs...)
}

// selects says whether a Secret belongs to the registry, and as which kind.
func (o Options) selects(s *corev1.Secret) (kind string, ok bool) {
	if ns := o.argoNamespace(); ns != "-" && s.Namespace == ns && s.Labels[ArgoCDSecretTypeKey] == ArgoCDSecretTypeValue {
		return KindArgoCD, true
	}
	if !slices.Contains(o.VClusterNamespaces, s.Namespace) {
		return "", false
	}
	if o.VClusterSelector != nil {
		return KindVCluster, o.VClusterSelector.Matches(labels.Set(s.Labels))
	}
	return KindVCluster, strings.HasPrefix(s.Name, VClusterNamePrefix)
}

// Read turns Secrets into the registry: each selected Secret becomes a tenant's cluster, or a
// problem saying why not. Two Secrets that claim one tenant: the older one serves, the other is
// reported (a new Secret cannot take over a tenant's traffic). Read never fails.
func Read(secrets []corev1.Secret, o Options) Snapshot {
	var snap Snapshot
	byTenant := map[string]Cluster{}
	for i := range secrets {
		s := &secrets[i]
		kind, ok := o.selects(s)
		if !ok {
			continue
		}
		c, warnings, err := FromSecret(s, kind)
		ref := s.Namespace + "/" + s.Name
		for _, w := range warnings {
			snap.Problems = append(snap.Problems, warning.Warning{Object: "Secret/" + ref, Reason: w})
		}
		if err != nil {
			snap.Problems = append(snap.Problems, warning.Warning{Object: "Secret/" + ref, Reason: "skipped: " + err.Error()})
			continue
		}
		if prev, dup := byTenant[c.Tenant]; dup {
			keep, drop := prev, c
			if older(c, prev) {
				keep, drop = c, prev
			}
			byTenant[c.Tenant] = keep
			snap.Problems = append(snap.Problems, warning.Warning{Object: "Secret/" + drop.Secret, Reason: fmt.Sprintf(
				"skipped: tenant %s is already served by Secret %s (the older one wins)", c.Tenant, keep.Secret)})
			continue
		}
		byTenant[c.Tenant] = c
	}
	for _, c := range byTenant {
		snap.Clusters = append(snap.Clusters, c)
	}
	slices.SortFunc(snap.Clusters, func(a, b Cluster) int { return cmp.Compare(a.Tenant, b.Tenant) })
	slices.SortFunc(snap.Problems, func(a, b warning.Warning) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Reason, b.Reason))
	})
	return snap
}

func older(a, b Cluster) bool {
	return a.created < b.created || (a.created == b.created && a.Secret < b.Secret)
}

// FromSecret reads one Secret of the given kind. Warnings are things the cluster works with but
// an operator should know.
func FromSecret(s *corev1.Secret, kind string) (c Cluster, warnings []string, err error) {
	c = Cluster{Kind: kind, Secret: s.Namespace + "/" + s.Name, created: s.CreationTimestamp.Unix()}
	switch kind {
	case KindArgoCD:
		c.Name = string(s.Data[ArgoCDKeyName])
		c.Tenant = cmp.Or(s.Labels[v1alpha1.LabelTenant], c.Name)
		c.Config, warnings, err = argoCDConfig(s)
	case KindVCluster:
		c.Name = strings.TrimPrefix(s.Name, VClusterNamePrefix)
		c.Tenant = cmp.Or(s.Labels[v1alpha1.LabelTenant], c.Name)
		c.Config, warnings, err = vclusterConfig(s)
	default:
		return c, nil, fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return c, warnings, err
	}
	if msgs := validation.IsDNS1123Label(c.Tenant); len(msgs) > 0 {
		return c, warnings, fmt.Errorf("tenant %q (from %s): %s", c.Tenant, tenantSource(s, kind), msgs[0])
	}
	c.Server = c.Config.Host
	c.Config.UserAgent = "inferplane"
	c.Fingerprint = fingerprint(s, kind)
	return c, warnings, nil
}

func tenantSource(s *corev1.Secret, kind string) string {
	switch {
	case s.Labels[v1alpha1.LabelTenant] != "":
		return "label " + v1alpha1.LabelTenant
	case kind == KindArgoCD:
		return "key " + ArgoCDKeyName
	}
	return "the Secret's name"
}

// fingerprint hashes what the cluster's configuration is made of.
func fingerprint(s *corev1.Secret, kind string) string {
	h := sha256.New()
	keys := []string{VClusterKeyConfig}
	if kind == KindArgoCD {
		keys = []string{ArgoCDKeyServer, ArgoCDKeyConfig}
	}
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%d:", k, len(s.Data[k]))
		h.Write(s.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// argoConfig is the part of Argo CD's cluster config JSON the registry reads.
type argoConfig struct {
	BearerToken     string          `json:"bearerToken"`
	Username        string          `json:"username"`
	Password        string          `json:"password"`
	TLSClientConfig argoTLS         `json:"tlsClientConfig"`
	ProxyURL        string          `json:"proxyUrl"`
	ExecProvider    json.RawMessage `json:"execProviderConfig"`
	AWSAuth         json.RawMessage `json:"awsAuthConfig"`
}

type argoTLS struct {
	Insecure   bool   `json:"insecure"`
	ServerName string `json:"serverName"`
	CAData     []byte `json:"caData"`
	CertData   []byte `json:"certData"`
	KeyData    []byte `json:"keyData"`
}

// argoCDConfig builds the client configuration of an Argo CD cluster Secret.
func argoCDConfig(s *corev1.Secret) (*rest.Config, []string, error) {
	server, err := serverURL(string(s.Data[ArgoCDKeyServer]))
	if err != nil {
		return nil, nil, fmt.Errorf("key %s: %w", ArgoCDKeyServer, err)
	}
	raw := s.Data[ArgoCDKeyConfig]
	if len(raw) == 0 {
		return nil, nil, fmt.Errorf("key %s: missing (a JSON object with bearerToken and tlsClientConfig, as Argo CD reads it)", ArgoCDKeyConfig)
	}
	var ac argoConfig
	if err := json.Unmarshal(raw, &ac); err != nil {
		return nil, nil, fmt.Errorf("key %s: not Argo CD's cluster config JSON: %v", ArgoCDKeyConfig, err)
	}
	if len(ac.ExecProvider) > 0 && string(ac.ExecProvider) != "null" || len(ac.AWSAuth) > 0 && string(ac.AWSAuth) != "null" {
		return nil, nil, fmt.Errorf("key %s: execProviderConfig and awsAuthConfig are not supported (they run commands); give a bearerToken or a client certificate", ArgoCDKeyConfig)
	}
	rc := &rest.Config{
		Host:        server,
		BearerToken: ac.BearerToken,
		Username:    ac.Username,
		Password:    ac.Password,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure: ac.TLSClientConfig.Insecure, ServerName: ac.TLSClientConfig.ServerName,
			CAData: ac.TLSClientConfig.CAData, CertData: ac.TLSClientConfig.CertData, KeyData: ac.TLSClientConfig.KeyData,
		},
	}
	if ac.ProxyURL != "" {
		p, err := url.Parse(ac.ProxyURL)
		if err != nil {
			return nil, nil, fmt.Errorf("key %s: proxyUrl %q: %v", ArgoCDKeyConfig, ac.ProxyURL, err)
		}
		rc.Proxy = func(*http.Request) (*url.URL, error) { return p, nil }
	}
	var warnings []string
	if rc.BearerToken == "" && rc.Username == "" && len(rc.CertData) == 0 {
		warnings = append(warnings, "config has no credentials (bearerToken, username/password or certData): the API server sees an anonymous client")
	}
	if rc.Insecure {
		warnings = append(warnings, "tlsClientConfig.insecure is true: the API server's certificate is not checked")
	}
	return rc, warnings, nil
}

// vclusterConfig builds the client configuration of a vCluster kubeconfig Secret.
func vclusterConfig(s *corev1.Secret) (*rest.Config, []string, error) {
	raw := s.Data[VClusterKeyConfig]
	if len(raw) == 0 {
		return nil, nil, fmt.Errorf("key %s: missing (the kubeconfig vCluster writes)", VClusterKeyConfig)
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("key %s: not a kubeconfig: %v", VClusterKeyConfig, err)
	}
	for name, ai := range kc.AuthInfos {
		if ai.Exec != nil || ai.AuthProvider != nil || ai.TokenFile != "" || ai.ClientCertificate != "" || ai.ClientKey != "" {
			return nil, nil, fmt.Errorf("key %s: user %q reads files or runs commands; only inline credentials are supported", VClusterKeyConfig, name)
		}
	}
	for name, cl := range kc.Clusters {
		if cl.CertificateAuthority != "" {
			return nil, nil, fmt.Errorf("key %s: cluster %q reads its CA from a file; only inline data is supported", VClusterKeyConfig, name)
		}
	}
	rc, err := clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("key %s: %v", VClusterKeyConfig, err)
	}
	if _, err := serverURL(rc.Host); err != nil {
		return nil, nil, fmt.Errorf("key %s: server: %w", VClusterKeyConfig, err)
	}
	var warnings []string
	if u, err := url.Parse(rc.Host); err == nil && u.Hostname() == "localhost" {
		warnings = append(warnings, fmt.Sprintf("server %s is vCluster's default, reachable only inside its pod: set exportKubeConfig.server to an address the gateway reaches", rc.Host))
	}
	return rc, warnings, nil
}

// serverURL checks an API server URL.
func serverURL(s string) (string, error) {
	if s == "" {
		return "", errors.New("missing (the API server's URL)")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("%q: expected an http(s) URL such as https://10.0.0.1:6443", s)
	}
	return s, nil
}
