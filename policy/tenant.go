package policy

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// CheckTenant is the rules on a Tenant that the node-type, model and quota rules read:
// allowedNodeTypes entries that NodeTypeAllowed understands, each once; models entries that
// ModelOffered understands, each once; quota figures of 0 (the tier's) or more.
func CheckTenant(t *v1alpha1.Tenant) field.ErrorList {
	out := checkNodeTypeList(specPath.Child("allowedNodeTypes"), t.Spec.AllowedNodeTypes)
	out = append(out, checkModelList(specPath.Child("models"), t.Spec.Models)...)
	return append(out, checkQuotaFigures(specPath.Child("quota"), t.Spec.Quota, "0 (the tier's figure) or more")...)
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
