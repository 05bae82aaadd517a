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

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// The checks below are the ones the CRDs in config/crd would make (required fields, minimums,
// enums) plus the naming rules the rendered objects need (names become labels, namespaces,
// VM and Service names). Cross-object rules live in the plan.

const (
	expectLabelName   = "a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters"
	expectDottedName  = "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 characters"
	expectResource    = "a device-plugin resource name with a vendor prefix, e.g. nvidia.com/GH100_H100_SXM5_80GB"
	expectQuantity    = "a positive Kubernetes quantity, e.g. 200Gi"
	expectEnvVarName  = "an environment variable name: letters, digits and '_', not starting with a digit"
	expectLabelKey    = "a label key, e.g. topology.kubernetes.io/zone"
	expectLabelValue  = "a label value: at most 63 letters, digits, '-', '_' or '.'"
	expectRuntimeEnum = `"vllm" or "parakeet"`
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
// value (node type and master names are carried in labels).
func validDottedName(s string) bool {
	return len(validation.IsDNS1123Subdomain(s)) == 0 && len(content.IsLabelValue(s)) == 0
}

func (l *loader) checkMeta(p string, kind string, m *metaView, allowNamespace string) {
	if m.name == "" {
		l.add(p, "metadata.name", "the "+kind+"'s name", "missing")
	}
	if m.namespace != "" && m.namespace != allowNamespace {
		if allowNamespace == "" {
			l.add(p, "metadata.namespace", "no namespace: a "+kind+" is cluster-scoped", "is %q", m.namespace)
		} else {
			l.add(p, "metadata.namespace", fmt.Sprintf("%q (the tenant's folder) or nothing", allowNamespace), "is %q", m.namespace)
		}
	}
	for _, f := range m.serverSet {
		l.add(p, "metadata."+f, "only name, labels and annotations in metadata", "is set by the API server, not in input files")
	}
	for k, v := range m.labels {
		if len(content.IsLabelKey(k)) > 0 {
			l.add(p, "metadata.labels", expectLabelKey, "key %q is not a valid label key", k)
		}
		if len(content.IsLabelValue(v)) > 0 {
			l.add(p, "metadata.labels."+k, expectLabelValue, "value %q is not a valid label value", v)
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
	if nt.Name != "" && !validDottedName(nt.Name) {
		l.add(p, "metadata.name", expectDottedName+", e.g. metal3.gpu-h100", "%q is not a valid node type name", nt.Name)
	}
	s := &nt.Spec
	if s.GPU.ResourceName == "" {
		l.add(p, "spec.gpu.resourceName", expectResource, "missing")
	} else if len(content.IsPrefixedLabelKey(s.GPU.ResourceName)) > 0 {
		l.add(p, "spec.gpu.resourceName", expectResource, "%q is not a resource name", s.GPU.ResourceName)
	}
	if s.GPU.Count < 1 {
		l.add(p, "spec.gpu.count", "the number of GPUs on one node, at least 1", "is %d", s.GPU.Count)
	}
	if s.GPU.MemoryGB < 1 {
		l.add(p, "spec.gpu.memoryGB", "the memory of one GPU in GB, at least 1", "is %d", s.GPU.MemoryGB)
	}
	if s.HardwareProfile != "" && !profileRE.MatchString(s.HardwareProfile) {
		l.add(p, "spec.hardwareProfile", "a recipes taxonomy profile name such as h100 or h200", "%q is not a profile name", s.HardwareProfile)
	}
	if s.CPU < 1 {
		l.add(p, "spec.cpu", "the vCPU cores of a VM that takes a whole node, at least 1", "is %d", s.CPU)
	}
	l.checkQuantity(p, "spec.memory", s.Memory, "the guest memory of a VM that takes a whole node, e.g. 1800Gi")
	for k, v := range s.NodeSelector {
		if len(content.IsLabelKey(k)) > 0 {
			l.add(p, "spec.nodeSelector", expectLabelKey, "key %q is not a valid label key", k)
		}
		if len(content.IsLabelValue(v)) > 0 {
			l.add(p, "spec.nodeSelector."+k, expectLabelValue, "value %q is not a valid label value", v)
		}
	}
	if s.RackLabel != "" && len(content.IsLabelKey(s.RackLabel)) > 0 {
		l.add(p, "spec.rackLabel", expectLabelKey, "%q is not a valid label key", s.RackLabel)
	}
	if ib := s.InfiniBand; ib != nil {
		if ib.ResourceName == "" {
			l.add(p, "spec.infiniBand.resourceName", "a device-plugin resource name, e.g. nvidia.com/mlnx_sriov_rdma", "missing")
		} else if len(content.IsPrefixedLabelKey(ib.ResourceName)) > 0 {
			l.add(p, "spec.infiniBand.resourceName", "a device-plugin resource name, e.g. nvidia.com/mlnx_sriov_rdma", "%q is not a resource name", ib.ResourceName)
		}
		if ib.Count < 1 {
			l.add(p, "spec.infiniBand.count", "the number of InfiniBand functions a multi-node VM takes, at least 1", "is %d", ib.Count)
		}
		if ib.Network != "" && !validNetworkName(ib.Network) {
			l.add(p, "spec.infiniBand.network", "a NetworkAttachmentDefinition as <name> or <namespace>/<name>", "%q is not valid", ib.Network)
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

func (l *loader) checkQuantity(p, field, v, expected string) {
	if v == "" {
		l.add(p, field, expected, "missing")
		return
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		l.add(p, field, expected, "%q is not a quantity", v)
		return
	}
	if q.Sign() <= 0 {
		l.add(p, field, expected, "%q is not positive", v)
	}
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// checkImage checks the runtime image and its pin: a digest belongs to a named image, and
// only once.
func (l *loader) checkImage(p string, s *v1alpha1.ModelMasterSpec) {
	if s.Image != "" && (strings.ContainsAny(s.Image, " \t\n") || strings.Contains(s.Image, "://")) {
		l.add(p, "spec.image", "an image reference such as vllm/vllm-openai:v0.10.2", "%q is not an image reference", s.Image)
	}
	if s.ImageDigest == "" {
		return
	}
	switch {
	case !digestRE.MatchString(s.ImageDigest):
		l.add(p, "spec.imageDigest", "sha256: and 64 lower-case hex digits (the image's manifest digest)", "is %q", s.ImageDigest)
	case s.Image == "":
		l.add(p, "spec.image", "the image the digest in spec.imageDigest belongs to", "missing")
	case strings.Contains(s.Image, "@"):
		l.add(p, "spec.imageDigest", "the digest in one place: spec.image or spec.imageDigest", "is set, but spec.image %q has a digest already", s.Image)
	}
}

func (l *loader) checkMaster(p string, m *v1alpha1.ModelMaster) {
	l.checkMeta(p, "ModelMaster", metaOf(m), "")
	if m.Name != "" && !validDottedName(m.Name) {
		l.add(p, "metadata.name", expectDottedName+", e.g. mistral-small-24b", "%q is not a valid master name", m.Name)
	}
	s := &m.Spec
	switch s.Runtime {
	case v1alpha1.RuntimeVLLM, v1alpha1.RuntimeParakeet:
	case "":
		l.add(p, "spec.runtime", expectRuntimeEnum, "missing")
	default:
		l.add(p, "spec.runtime", expectRuntimeEnum, "is %q", s.Runtime)
	}
	if s.Model == "" {
		l.add(p, "spec.model", "the model id the server loads, e.g. mistralai/Mistral-Small-3.1-24B-Instruct-2503", "missing")
	}
	if s.PerReplicaGPUCount < 1 {
		l.add(p, "spec.perReplicaGPUCount", "the number of GPUs one replica claims, at least 1", "is %d", s.PerReplicaGPUCount)
	}
	l.checkImage(p, s)
	if s.TensorParallelSize < 0 {
		l.add(p, "spec.tensorParallelSize", "at least 1, or left out", "is %d", s.TensorParallelSize)
	}
	if s.PipelineParallelSize < 0 {
		l.add(p, "spec.pipelineParallelSize", "at least 1, or left out", "is %d", s.PipelineParallelSize)
	}
	seen := map[string]bool{}
	for i, e := range s.Env {
		field := fmt.Sprintf("spec.env[%d].name", i)
		if len(validation.IsEnvVarName(e.Name)) > 0 {
			l.add(p, field, expectEnvVarName, "%q is not a valid name", e.Name)
		}
		if seen[e.Name] {
			l.add(p, field, "each variable once", "%q is set twice", e.Name)
		}
		seen[e.Name] = true
	}
	for i, a := range s.Args {
		if a == "" {
			l.add(p, fmt.Sprintf("spec.args[%d]", i), "a non-empty argument", "is empty")
		}
	}
}

func (l *loader) checkTenant(p string, t *v1alpha1.Tenant) {
	l.checkMeta(p, "Tenant", metaOf(t), "")
	s := &t.Spec
	if s.Tier == "" {
		l.add(p, "spec.tier", "the product tier, e.g. h100-dedicated", "missing")
	} else if len(content.IsLabelValue(s.Tier)) > 0 {
		l.add(p, "spec.tier", expectLabelValue+" (it is carried as a label)", "%q is not valid", s.Tier)
	}
	seen := map[string]bool{}
	for i, a := range s.AllowedNodeTypes {
		field := fmt.Sprintf("spec.allowedNodeTypes[%d]", i)
		if !validAllowedEntry(a) {
			l.add(p, field, "a node type name (metal3.gpu-h100) or a provider wildcard (metal3.*)", "%q is not valid", a)
		}
		if seen[a] {
			l.add(p, field, "each entry once", "%q is listed twice", a)
		}
		seen[a] = true
	}
	if s.GPUQuota < 0 {
		l.add(p, "spec.gpuQuota", "0 (no quota) or more", "is %d", s.GPUQuota)
	}
	g := &s.Git
	if g.URL != "" {
		l.checkGitURL(p, g.URL)
	} else if g.Auth != nil {
		l.add(p, "spec.git.auth", "spec.git.url set as well (credentials are only used to push to a remote)", "is set without a remote URL")
	}
	if g.Branch != "" && !validBranch(g.Branch) {
		l.add(p, "spec.git.branch", "a git branch name, e.g. main", "%q is not a valid branch name", g.Branch)
	}
	if g.Auth != nil {
		for _, f := range []struct{ field, v string }{{"usernameEnv", g.Auth.UsernameEnv}, {"passwordEnv", g.Auth.PasswordEnv}} {
			if f.v != "" && len(validation.IsEnvVarName(f.v)) > 0 {
				l.add(p, "spec.git.auth."+f.field, expectEnvVarName+" (the name of the variable, not its value)", "%q is not a variable name", f.v)
			}
		}
		if g.Auth.PasswordEnv == "" {
			l.add(p, "spec.git.auth.passwordEnv", "the name of the environment variable that holds the password or token", "missing")
		}
	}
	if ns := s.ArgoCD.Namespace; ns != "" && dns1123Label(ns) != "" {
		l.add(p, "spec.argoCD.namespace", expectLabelName, "%q is not a namespace name", ns)
	}
	if d := s.ArgoCD.Destination; d != "" && len(validation.IsDNS1123Subdomain(d)) > 0 {
		l.add(p, "spec.argoCD.destination", "an Argo CD cluster name (a DNS-1123 subdomain)", "%q is not valid", d)
	}
	l.checkAccess(p, s.Access)
}

// checkAccess holds spec.access to what the CRD says (one of group and user, a known role) and
// refuses an entry listed twice, which would leave the member's role to the order of the list.
func (l *loader) checkAccess(p string, access []v1alpha1.TenantAccess) {
	seen := map[string]bool{}
	for i, a := range access {
		field := fmt.Sprintf("spec.access[%d]", i)
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
				l.add(p, field+".user", "an email address (the identity provider's verified email claim)", "%q is not one", a.User)
			}
		}
		if !slices.Contains(v1alpha1.TenantRoles, a.Role) {
			l.add(p, field+".role", `"viewer", "developer" or "admin"`, "is %q", a.Role)
		}
		if key != "" && seen[key] {
			l.add(p, field, "each group and user once", "%s is listed twice", key)
		}
		if key != "" {
			seen[key] = true
		}
	}
}

// validAllowedEntry accepts a node type name or "<provider>.*".
func validAllowedEntry(s string) bool {
	if provider, ok := strings.CutSuffix(s, ".*"); ok {
		return dns1123Label(provider) == ""
	}
	return validDottedName(s)
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
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse echoes the URL, which may carry a secret: do not repeat it.
		l.add(p, "spec.git.url", expected, "is not a URL")
		return
	}
	switch u.Scheme {
	case "https", "http", "ssh", "file":
	default:
		l.add(p, "spec.git.url", expected, "has scheme %q", u.Scheme)
		return
	}
	if _, hasPassword := u.User.Password(); hasPassword {
		l.add(p, "spec.git.url", "no credentials in the URL: name environment variables in spec.git.auth instead (the tenant file is committed)",
			"contains a password")
	}
	if u.Scheme != "file" && u.Host == "" {
		l.add(p, "spec.git.url", expected, "has no host")
	}
	if u.Scheme == "file" && u.Path == "" {
		l.add(p, "spec.git.url", expected, "has no path")
	}
}

func (l *loader) checkJob(p, tenant string, j *v1alpha1.ManagedInferenceJob) {
	l.checkMeta(p, "ManagedInferenceJob", metaOf(j), tenant)
	if j.Name != "" && len(validation.IsDNS1035Label(j.Name)) > 0 {
		l.add(p, "metadata.name", "a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, e.g. qwen3-32b",
			"%q is not a valid job name", j.Name)
	}
	if v, ok := j.Labels[v1alpha1.LabelTenant]; ok && v != tenant {
		l.add(p, "metadata.labels."+v1alpha1.LabelTenant, fmt.Sprintf("%q (the tenant folder the job is in) or nothing", tenant), "is %q", v)
	}
	s := &j.Spec
	switch s.Runtime {
	case "", v1alpha1.RuntimeVLLM, v1alpha1.RuntimeParakeet:
	default:
		l.add(p, "spec.runtime", expectRuntimeEnum+" (default vllm)", "is %q", s.Runtime)
	}
	if s.Replicas < 1 {
		l.add(p, "spec.replicas", "the number of replicas, at least 1", "is %d", s.Replicas)
	}
	if s.GPUCount < 1 {
		l.add(p, "spec.gpuCount", "the number of GPUs per replica, at least 1", "is %d", s.GPUCount)
	}
	if s.NodeType == "" {
		l.add(p, "spec.nodeType", "the name of a NodeType, e.g. metal3.gpu-h100", "missing")
	}
	if s.ModelCacheSize != "" {
		l.checkQuantity(p, "spec.modelCacheSize", s.ModelCacheSize, expectQuantity)
	}
	for name := range s.Features {
		if name == "" {
			l.add(p, "spec.features", "recipe feature names, e.g. tool_calling", "has an empty name")
		}
	}
	for i, a := range s.ExtraArgs {
		if a == "" {
			l.add(p, fmt.Sprintf("spec.extraArgs[%d]", i), "a non-empty argument", "is empty")
		}
	}
}
