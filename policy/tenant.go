package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// CheckTenant is the rules on a Tenant that the node-type and GPU rules read: allowedNodeTypes
// entries that NodeTypeAllowed understands, each once, and a GPU quota of 0 (none) or more.
func CheckTenant(t *v1alpha1.Tenant) field.ErrorList {
	var out field.ErrorList
	seen := map[string]bool{}
	for i, a := range t.Spec.AllowedNodeTypes {
		path := specPath.Child("allowedNodeTypes").Index(i)
		if !validAllowedEntry(a) {
			out = append(out, field.Invalid(path, a, "must be a node type name (metal3.gpu-h100) or a provider wildcard (metal3.*)"))
		}
		if seen[a] {
			e := field.Duplicate(path, a)
			e.Detail = "must be listed once"
			out = append(out, e)
		}
		seen[a] = true
	}
	if t.Spec.GPUQuota < 0 {
		out = append(out, field.Invalid(specPath.Child("gpuQuota"), t.Spec.GPUQuota, "must be 0 (no quota) or more"))
	}
	return out
}

// CheckQuota holds a tenant's jobs together to its GPU quota: replicas x gpuCount summed over
// jobs at most spec.gpuQuota (0: no quota).
func CheckQuota(t *v1alpha1.Tenant, jobs []*v1alpha1.ManagedInferenceJob) field.ErrorList {
	q := t.Spec.GPUQuota
	if q <= 0 {
		return nil
	}
	var gpus int64
	parts := make([]string, 0, len(jobs))
	for _, j := range jobs {
		gpus += int64(j.Spec.Replicas) * int64(j.Spec.GPUCount)
		parts = append(parts, fmt.Sprintf("%s %dx%d", j.Name, j.Spec.Replicas, j.Spec.GPUCount))
	}
	if gpus <= int64(q) {
		return nil
	}
	return field.ErrorList{field.Invalid(specPath.Child("gpuQuota"), q, fmt.Sprintf(
		"must be at least %d, the GPUs the tenant's jobs request (replicas x gpuCount: %s), or the jobs must request fewer",
		gpus, strings.Join(parts, ", ")))}
}

// validAllowedEntry accepts a node type name or "<provider>.*".
func validAllowedEntry(s string) bool {
	if provider, ok := strings.CutSuffix(s, ".*"); ok {
		return len(validation.IsDNS1123Label(provider)) == 0
	}
	return validNodeTypeName(s)
}

// validNodeTypeName is a name that is both an object name (a DNS-1123 subdomain) and a label
// value (it is carried in the inferplane.io/node-type label).
func validNodeTypeName(s string) bool {
	return len(validation.IsDNS1123Subdomain(s)) == 0 && len(content.IsLabelValue(s)) == 0
}
