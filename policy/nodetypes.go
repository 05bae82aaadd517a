package policy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/suggest"
)

// NodeTypeAllowed reports whether a tenant whose spec.allowedNodeTypes is allowed may use the
// node type named nodeType. A nil list (the field absent or null) allows every node type; an
// empty list allows none. An entry is an exact node type name or "<provider>.*", which allows
// every node type whose provider (v1alpha1.Provider, the part before the first dot) is
// <provider>. The generator and the webhook both call this, so they agree on every tenant.
func NodeTypeAllowed(allowed []string, nodeType string) bool {
	if allowed == nil {
		return true
	}
	if nodeType == "" {
		return false
	}
	for _, entry := range allowed {
		if entry == nodeType {
			return true
		}
		if p, ok := strings.CutSuffix(entry, ".*"); ok && p != "" && !strings.Contains(p, ".") &&
			strings.HasPrefix(nodeType, p+".") {
			return true
		}
	}
	return false
}

// AllowedNodeTypes are those of names the tenant may use, sorted (all of them when t is nil).
func AllowedNodeTypes(t *v1alpha1.Tenant, names []string) []string {
	var out []string
	for _, n := range names {
		if t == nil || NodeTypeAllowed(t.Spec.AllowedNodeTypes, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// describeAllowed renders a tenant's allowedNodeTypes for a denial message.
func describeAllowed(allowed []string) string {
	switch {
	case allowed == nil:
		return "absent (every node type)"
	case len(allowed) == 0:
		return "[] (no node type)"
	}
	return "[" + strings.Join(allowed, ", ") + "]"
}

// checkNodeTypeRef reports a node type that is not named, not in the policy data, unusable
// or not the tenant's to use, and returns it when it can be used. Each refusal offers the
// node types the tenant may use instead (offerNodeTypes).
func checkNodeTypeRef(out *field.ErrorList, name string, path *field.Path, d Data) *v1alpha1.NodeType {
	var e *field.Error
	switch {
	case name == "":
		e = field.Required(path, "must name a NodeType"+offerNodeTypes("", d))
	case d.NodeType == nil:
		e = field.NotFound(path, name)
		e.Detail = fmt.Sprintf("no %s %q in the policy data", v1alpha1.KindNodeType, name) + offerNodeTypes(name, d)
	case d.Tenant != nil && !NodeTypeAllowed(d.Tenant.Spec.AllowedNodeTypes, name):
		e = field.Invalid(path, name, fmt.Sprintf("not allowed for Tenant %s (allowedNodeTypes: %s)",
			d.Tenant.Name, describeAllowed(d.Tenant.Spec.AllowedNodeTypes))+offerNodeTypes("", d))
	}
	if e != nil {
		*out = append(*out, e)
	}
	if d.NodeType == nil || name == "" {
		return nil
	}
	if errs := CheckNodeType(d.NodeType); len(errs) > 0 {
		for _, ne := range errs {
			*out = append(*out, field.Invalid(path, name, "NodeType "+name+" is unusable: "+fielderr.Describe(ne)))
		}
		return nil
	}
	if e != nil {
		return nil
	}
	return d.NodeType
}

// offerNodeTypes is what a refusal of a node type offers instead, the one place that makes the
// offer: the node types of the policy data the tenant may use ("; did you mean a?" for those
// closest to an unknown name, else "; Tenant acme may use: a, b"), or that it may use none.
// Nothing when the policy data lists no node types (Data.NodeTypes nil).
func offerNodeTypes(name string, d Data) string {
	if d.NodeTypes == nil {
		return ""
	}
	usable := slices.DeleteFunc(AllowedNodeTypes(d.Tenant, d.NodeTypes), func(n string) bool { return n == name })
	who := "the tenant"
	if d.Tenant != nil {
		who = "Tenant " + d.Tenant.Name
	}
	switch {
	case len(d.NodeTypes) == 0:
		return "; there is no NodeType"
	case len(usable) == 0 && d.Tenant != nil && d.Tenant.Spec.AllowedNodeTypes != nil && len(d.Tenant.Spec.AllowedNodeTypes) == 0:
		return "; " + who + " may use no node type (allowedNodeTypes: [])"
	case len(usable) == 0:
		return "; " + who + " may use none of them"
	}
	if close := suggest.Close(name, usable); name != "" && len(close) > 0 {
		return suggest.DidYouMean(close)
	}
	return "; " + who + " may use: " + strings.Join(usable, ", ")
}

// CheckNodeType is the rules on a NodeType that the GPU and layout rules count on: a name the
// workload labels can carry, whole GPUs on every node, passed through by a device-plugin
// resource.
func CheckNodeType(nt *v1alpha1.NodeType) field.ErrorList {
	var out field.ErrorList
	if nt.Name != "" && !validNodeTypeName(nt.Name) {
		out = append(out, field.Invalid(metaName, nt.Name, "must be lower-case letters, digits, '-' and '.', starting and ending "+
			"with a letter or digit, at most 63 characters, e.g. metal3.gpu-h100 (it is carried in the "+v1alpha1.LabelNodeType+" label)"))
	}
	gpu := field.NewPath("spec", "gpu")
	if nt.Spec.GPU.Count < 1 {
		out = append(out, field.Invalid(gpu.Child("count"), nt.Spec.GPU.Count, "must be at least 1 (the GPUs of one node)"))
	}
	switch rn := nt.Spec.GPU.ResourceName; {
	case rn == "":
		out = append(out, field.Required(gpu.Child("resourceName"), "must name the GPU's device-plugin resource, e.g. nvidia.com/GH100_H100_SXM5_80GB"))
	case len(content.IsPrefixedLabelKey(rn)) > 0:
		out = append(out, field.Invalid(gpu.Child("resourceName"), rn,
			"must be a device-plugin resource name with a vendor prefix, e.g. nvidia.com/GH100_H100_SXM5_80GB"))
	}
	return out
}

// JobNameMaxLength is the longest a job's name may be when it has at most 10 replicas of at most
// 10 nodes: it names the job's VMs, <job>-r<replica>-n<node> (VMName), which are DNS labels of
// at most 63 characters, and "-r9-n9" takes 6. More replicas or nodes take more.
const JobNameMaxLength = validation.DNS1123LabelMaxLength - len("-r9-n9")

// CheckJobName is the rule on a job's name, path being where the name is: a DNS-1035 label
// (it names Services) short enough that the name of the job's last VM, of replica replicas-1
// and node nodes-1, is a DNS label too. The generator, the CLI's arguments and the webhook
// all check names with it, so the limit a user is told is the one that holds.
func CheckJobName(path *field.Path, name string, replicas, nodes int32) field.ErrorList {
	suffix := fmt.Sprintf("-r%d-n%d", max(replicas, 1)-1, max(nodes, 1)-1)
	limit := validation.DNS1123LabelMaxLength - len(suffix)
	var out field.ErrorList
	if !dns1035Shape(name) {
		out = append(out, field.Invalid(path, name,
			"must be lower-case letters, digits and '-', starting with a letter and ending with a letter or digit (it names the job's Services and VMs)"))
	}
	if len(name) > limit {
		out = append(out, field.Invalid(path, name, fmt.Sprintf(
			"must be at most %d characters (it has %d): it names the job's VMs, <job>-r<replica>-n<node>, up to <job>%s, and a VM name is at most %d",
			limit, len(name), suffix, validation.DNS1123LabelMaxLength)))
	}
	return out
}

// dns1035Shape is a DNS-1035 label without its length limit: [a-z]([-a-z0-9]*[a-z0-9])?.
func dns1035Shape(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
