package inputs

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/policy"
)

// The checks below are the ones the CRDs in config/crd would make (required fields, minimums,
// enums) on what the rendered objects take from a file (names become labels, namespaces,
// resources of VMs). The rules the webhook holds objects to as well (a NodeType's GPUs, a
// ModelMaster's parallelism, a Tenant's allowed node types) are the policy's: each file is
// checked with them here, and cross-object rules (a job's master, node type, GPUs, name) are
// checked by the plan, with the policy's job rules.

const (
	expectLabelName   = "a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters"
	expectDottedName  = "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 characters"
	expectQuantity    = "a positive Kubernetes quantity, e.g. 200Gi"
	expectEnvVarName  = "an environment variable name: letters, digits and '_', not starting with a digit"
	expectLabelKey    = "a label key, e.g. topology.kubernetes.io/zone"
	expectLabelValue  = "a label value: at most 63 letters, digits, '-', '_' or '.'"
	expectRuntimeEnum = `"vllm" or "parakeet"` // a job's; a master's runtime is the policy's
)

// Paths the checks name often.
var (
	specPath = field.NewPath("spec")
	metaPath = field.NewPath("metadata")
)

// metadataFields are the metadata fields an input file may set.
var metadataFields = []string{"annotations", "labels", "name"}

// dns1123Label returns why s is not a DNS-1123 label, or "".
func dns1123Label(s string) string {
	if len(validation.IsDNS1123Label(s)) == 0 {
		return ""
	}
	return "it must be lower-case letters, digits and '-', start and end with a letter or digit, and be at most 63 characters"
}

// validDottedName is a name that is both a DNS-1123 subdomain (an object name) and a label
// value (master names are carried in labels).
func validDottedName(s string) bool {
	return len(validation.IsDNS1123Subdomain(s)) == 0 && len(content.IsLabelValue(s)) == 0
}

func (l *loader) checkMeta(p string, kind string, m *metaView, allowNamespace string) {
	if m.name == "" {
		l.add(p, metaPath.Child("name"), "the "+kind+"'s name", "missing")
	}
	if m.namespace != "" && m.namespace != allowNamespace {
		if allowNamespace == "" {
			l.add(p, metaPath.Child("namespace"), "no namespace: a "+kind+" is cluster-scoped", "is %q", m.namespace)
		} else {
			l.add(p, metaPath.Child("namespace"), fmt.Sprintf("%q (the tenant's folder) or nothing", allowNamespace), "is %q", m.namespace)
		}
	}
	for _, f := range m.serverSet {
		l.add(p, metaPath.Child(f), "only name, labels and annotations in metadata", "is set by the API server, not in input files")
	}
	l.checkLabels(p, metaPath.Child("labels"), m.labels)
}

// checkLabels checks the keys and values of a label map (labels, a node selector).
func (l *loader) checkLabels(p string, path *field.Path, labels map[string]string) {
	for k, v := range labels {
		if len(content.IsLabelKey(k)) > 0 {
			l.add(p, path, expectLabelKey, "key %q is not a valid label key", k)
		}
		if len(content.IsLabelValue(v)) > 0 {
			l.add(p, path.Key(k), expectLabelValue, "value %q is not a valid label value", v)
		}
	}
}

// metaView is the part of ObjectMeta the checks look at.
type metaView struct {
	name, namespace string
	labels          map[string]string
	serverSet       []string
}

func metaOf(o metav1.Object) *metaView {
	v := &metaView{name: o.GetName(), namespace: o.GetNamespace(), labels: o.GetLabels()}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"generateName", o.GetGenerateName() != ""}, {"uid", o.GetUID() != ""},
		{"resourceVersion", o.GetResourceVersion() != ""}, {"generation", o.GetGeneration() != 0},
		{"ownerReferences", len(o.GetOwnerReferences()) > 0}, {"finalizers", len(o.GetFinalizers()) > 0},
		{"managedFields", len(o.GetManagedFields()) > 0}, {"deletionTimestamp", o.GetDeletionTimestamp() != nil},
	} {
		if f.set {
			v.serverSet = append(v.serverSet, f.name)
		}
	}
	return v
}

func (l *loader) checkNodeType(p string, nt *v1alpha1.NodeType) {
	l.checkMeta(p, "NodeType", metaOf(nt), "")
	l.addErrors(p, policy.CheckNodeType(nt))
	s := &nt.Spec
	gpu := specPath.Child("gpu")
	if s.GPU.MemoryGB < 1 {
		l.add(p, gpu.Child("memoryGB"), "the memory of one GPU in GB, at least 1", "is %d", s.GPU.MemoryGB)
	}
	if s.HardwareProfile != "" && !profileRE.MatchString(s.HardwareProfile) {
		l.add(p, specPath.Child("hardwareProfile"), "a recipes taxonomy profile name such as h100 or h200", "%q is not a profile name", s.HardwareProfile)
	}
	if s.CPU < 1 {
		l.add(p, specPath.Child("cpu"), "the vCPU cores of a VM that takes a whole node, at least 1", "is %d", s.CPU)
	}
	l.checkQuantity(p, specPath.Child("memory"), s.Memory, "the guest memory of a VM that takes a whole node, e.g. 1800Gi")
	l.checkLabels(p, specPath.Child("nodeSelector"), s.NodeSelector)
	if s.RackLabel != "" && len(content.IsLabelKey(s.RackLabel)) > 0 {
		l.add(p, specPath.Child("rackLabel"), expectLabelKey, "%q is not a valid label key", s.RackLabel)
	}
	if ib := s.InfiniBand; ib != nil {
		path := specPath.Child("infiniBand")
		const expected = "a device-plugin resource name, e.g. nvidia.com/mlnx_sriov_rdma"
		if ib.ResourceName == "" {
			l.add(p, path.Child("resourceName"), expected, "missing")
		} else if len(content.IsPrefixedLabelKey(ib.ResourceName)) > 0 {
			l.add(p, path.Child("resourceName"), expected, "%q is not a resource name", ib.ResourceName)
		}
		if ib.Count < 1 {
			l.add(p, path.Child("count"), "the number of InfiniBand functions a multi-node VM takes, at least 1", "is %d", ib.Count)
		}
		if ib.Network != "" && !validNetworkName(ib.Network) {
			l.add(p, path.Child("network"), "a NetworkAttachmentDefinition as <name> or <namespace>/<name>", "%q is not valid", ib.Network)
		}
	}
}

var profileRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_]*$`)

func validNetworkName(s string) bool {
	ns, name, found := strings.Cut(s, "/")
	if !found {
		return len(validation.IsDNS1123Subdomain(s)) == 0
	}
	return len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0
}

func (l *loader) checkQuantity(p string, path *field.Path, v, expected string) {
	if v == "" {
		l.add(p, path, expected, "missing")
		return
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		l.add(p, path, expected, "%q is not a quantity", v)
		return
	}
	if q.Sign() <= 0 {
		l.add(p, path, expected, "%q is not positive", v)
	}
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// checkImage checks the runtime image and its pin: a digest belongs to a named image, and
// only once.
func (l *loader) checkImage(p string, s *v1alpha1.ModelMasterSpec) {
	image, digest := specPath.Child("image"), specPath.Child("imageDigest")
	if s.Image != "" && (strings.ContainsAny(s.Image, " \t\n") || strings.Contains(s.Image, "://")) {
		l.add(p, image, "an image reference such as vllm/vllm-openai:v0.10.2", "%q is not an image reference", s.Image)
	}
	if s.ImageDigest == "" {
		return
	}
	switch {
	case !digestRE.MatchString(s.ImageDigest):
		l.add(p, digest, "sha256: and 64 lower-case hex digits (the image's manifest digest)", "is %q", s.ImageDigest)
	case s.Image == "":
		l.add(p, image, "the image the digest in spec.imageDigest belongs to", "missing")
	case strings.Contains(s.Image, "@"):
		l.add(p, digest, "the digest in one place: spec.image or spec.imageDigest", "is set, but spec.image %q has a digest already", s.Image)
	}
}

func (l *loader) checkMaster(p string, m *v1alpha1.ModelMaster) {
	l.checkMeta(p, "ModelMaster", metaOf(m), "")
	if m.Name != "" && !validDottedName(m.Name) {
		l.add(p, metaPath.Child("name"), expectDottedName+", e.g. mistral-small-24b", "%q is not a valid master name", m.Name)
	}
	s := &m.Spec
	l.addErrors(p, policy.CheckMaster(m))
	l.checkImage(p, s)
	seen := map[string]bool{}
	for i, e := range s.Env {
		path := specPath.Child("env").Index(i).Child("name")
		if len(validation.IsEnvVarName(e.Name)) > 0 {
			l.add(p, path, expectEnvVarName, "%q is not a valid name", e.Name)
		}
		if seen[e.Name] {
			l.add(p, path, "each variable once", "%q is set twice", e.Name)
		}
		seen[e.Name] = true
		if e.SecretKey == "" {
			continue
		}
		keyPath := specPath.Child("env").Index(i).Child("secretKey")
		if e.Value != "" {
			l.add(p, keyPath, "a value or a secretKey, not both (a secret's value is never written in a master)", "%q has both", e.Name)
		}
		if len(validation.IsConfigMapKey(e.SecretKey)) > 0 || e.SecretKey == "token" {
			l.add(p, keyPath, "a key of the tenant's model-server Secret: letters, digits, '-', '_' and '.', not \"token\" (the Hugging Face token's own key)", "%q", e.SecretKey)
		}
	}
	for i, a := range s.Args {
		if a == "" {
			l.add(p, specPath.Child("args").Index(i), "a non-empty argument", "is empty")
		}
	}
}

func (l *loader) checkTier(p string, t *v1alpha1.Tier) {
	l.checkMeta(p, "Tier", metaOf(t), "")
	if t.Name != "" && !validDottedName(t.Name) {
		l.add(p, metaPath.Child("name"), expectDottedName+" (tenants name it in spec.tier), e.g. h100-dedicated", "%q is not a valid tier name", t.Name)
	}
	if t.Spec.NodeTypes == nil {
		l.add(p, specPath.Child("nodeTypes"), "the node types the tier's tenants may claim: names or <provider>.* ([] for none)", "missing")
	}
	l.addErrors(p, policy.CheckTier(t))
	l.checkLimits(p, "limits", t.Spec.Limits)
	l.addErrors(p, limits.ValidateRateLimits(t.Spec.KeyLimits, specPath.Child("keyLimits")))
}

// checkLimits holds a tenant's or tier's limits (spec.<name>) to what the gateway reads.
func (l *loader) checkLimits(p, name string, tl *v1alpha1.TenantLimits) {
	l.addErrors(p, limits.ValidateTenantLimits(tl, specPath.Child(name)))
}

func (l *loader) checkTenant(p string, t *v1alpha1.Tenant) {
	l.checkMeta(p, "Tenant", metaOf(t), "")
	s := &t.Spec
	if s.Tier == "" {
		l.add(p, specPath.Child("tier"), "the product tier, e.g. h100-dedicated", "missing")
	} else if len(content.IsLabelValue(s.Tier)) > 0 {
		l.add(p, specPath.Child("tier"), expectLabelValue+" (the name of a Tier)", "%q is not valid", s.Tier)
	}
	l.addErrors(p, policy.CheckTenant(t))
	l.checkLimits(p, "limits", s.Limits)
	l.checkGit(p, &s.Git)
	if ns := s.ArgoCD.Namespace; ns != "" && dns1123Label(ns) != "" {
		l.add(p, specPath.Child("argoCD", "namespace"), expectLabelName, "%q is not a namespace name", ns)
	}
	if d := s.ArgoCD.Destination; d != "" && len(validation.IsDNS1123Subdomain(d)) > 0 {
		l.add(p, specPath.Child("argoCD", "destination"), "an Argo CD cluster name (a DNS-1123 subdomain)", "%q is not valid", d)
	}
	l.checkAccess(p, s.Access)
}

// checkAccess holds spec.access to what the CRD says (one of group and user, a known role) and
// refuses an entry listed twice, which would leave the member's role to the order of the list.
func (l *loader) checkAccess(p string, access []v1alpha1.TenantAccess) {
	seen := map[string]bool{}
	for i, a := range access {
		field := specPath.Child("access").Index(i)
		key := ""
		switch {
		case a.Group == "" && a.User == "":
			l.add(p, field, "exactly one of group and user", "has neither")
		case a.Group != "" && a.User != "":
			l.add(p, field, "exactly one of group and user", "has both")
		case a.Group != "":
			key = "group " + a.Group
		default:
			key = "user " + strings.ToLower(a.User)
			if !strings.Contains(a.User, "@") {
				l.add(p, field.Child("user"), "an email address (the identity provider's verified email claim)", "%q is not one", a.User)
			}
		}
		if !slices.Contains(v1alpha1.TenantRoles, a.Role) {
			l.add(p, field.Child("role"), `"viewer", "developer" or "admin"`, "is %q", a.Role)
		}
		if key != "" && seen[key] {
			l.add(p, field, "each group and user once", "%s is listed twice", key)
		}
		if key != "" {
			seen[key] = true
		}
	}
}

// checkGit checks where a tenant's repository is pushed and the credentials it is pushed with.
func (l *loader) checkGit(p string, g *v1alpha1.TenantGit) {
	path := specPath.Child("git")
	if g.URL != "" {
		l.checkGitURL(p, g.URL)
	} else if g.Auth != nil {
		l.add(p, path.Child("auth"), "spec.git.url set as well (credentials are only used to push to a remote)", "is set without a remote URL")
	}
	if g.Branch != "" && !validBranch(g.Branch) {
		l.add(p, path.Child("branch"), "a git branch name, e.g. main", "%q is not a valid branch name", g.Branch)
	}
	if g.Auth == nil {
		return
	}
	for _, f := range []struct{ field, v string }{{"usernameEnv", g.Auth.UsernameEnv}, {"passwordEnv", g.Auth.PasswordEnv}} {
		if f.v != "" && len(validation.IsEnvVarName(f.v)) > 0 {
			l.add(p, path.Child("auth", f.field), expectEnvVarName+" (the name of the variable, not its value)", "%q is not a variable name", f.v)
		}
	}
	if g.Auth.PasswordEnv == "" {
		l.add(p, path.Child("auth", "passwordEnv"), "the name of the environment variable that holds the password or token", "missing")
	}
}

var branchRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)

func validBranch(b string) bool {
	return branchRE.MatchString(b) && !strings.Contains(b, "..") && !strings.HasSuffix(b, "/") &&
		!strings.HasSuffix(b, ".lock") && !strings.Contains(b, "//") && !strings.HasSuffix(b, ".")
}

// scpLikeRE is git's short ssh form, user@host:path.
var scpLikeRE = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/].*$`)

func (l *loader) checkGitURL(p, raw string) {
	const expected = "a remote URL with scheme https://, http://, ssh:// or file://, or user@host:path"
	if scpLikeRE.MatchString(raw) {
		return
	}
	path := specPath.Child("git", "url")
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse echoes the URL, which may carry a secret: do not repeat it.
		l.add(p, path, expected, "is not a URL")
		return
	}
	switch u.Scheme {
	case "https", "http", "ssh", "file":
	default:
		l.add(p, path, expected, "has scheme %q", u.Scheme)
		return
	}
	if _, hasPassword := u.User.Password(); hasPassword {
		l.add(p, path, "no credentials in the URL: name environment variables in spec.git.auth instead (the tenant file is committed)",
			"contains a password")
	}
	if u.Scheme != "file" && u.Host == "" {
		l.add(p, path, expected, "has no host")
	}
	if u.Scheme == "file" && u.Path == "" {
		l.add(p, path, expected, "has no path")
	}
}

// checkJob checks what a job file says on its own. The rules on its name, replicas, GPUs and
// node type are the policy's job rules, which the plan applies with the job's master.
func (l *loader) checkJob(p, tenant string, j *v1alpha1.ManagedInferenceJob) {
	l.checkMeta(p, "ManagedInferenceJob", metaOf(j), tenant)
	if v, ok := j.Labels[v1alpha1.LabelTenant]; ok && v != tenant {
		l.add(p, metaPath.Child("labels").Key(v1alpha1.LabelTenant), fmt.Sprintf("%q (the tenant folder the job is in) or nothing", tenant), "is %q", v)
	}
	s := &j.Spec
	switch s.Runtime {
	case "", v1alpha1.RuntimeVLLM, v1alpha1.RuntimeParakeet:
	default:
		l.add(p, specPath.Child("runtime"), expectRuntimeEnum+" (default vllm)", "is %q", s.Runtime)
	}
	if s.ModelCacheSize != "" {
		l.checkQuantity(p, specPath.Child("modelCacheSize"), s.ModelCacheSize, expectQuantity)
	}
	for name := range s.Features {
		if name == "" {
			l.add(p, specPath.Child("features"), "recipe feature names, e.g. tool_calling", "has an empty name")
		}
	}
	for i, a := range s.ExtraArgs {
		if a == "" {
			l.add(p, specPath.Child("extraArgs").Index(i), "a non-empty argument", "is empty")
		}
	}
}
