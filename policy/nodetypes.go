package policy

import (
	"fmt"
	"strings"

	"github.com/inferplane/inferplane/api/v1alpha1"
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

// nodeTypeProblems checks that a node type can carry the rules' arithmetic at all. The CRD
// schema enforces the same minimums in a cluster; offline input has no schema to stop it.
func nodeTypeProblems(nt *v1alpha1.NodeType) []string {
	var out []string
	if nt.Spec.GPU.Count < 1 {
		out = append(out, fmt.Sprintf("spec.gpu.count is %d, must be at least 1", nt.Spec.GPU.Count))
	}
	if nt.Spec.GPU.ResourceName == "" {
		out = append(out, "spec.gpu.resourceName is empty")
	}
	return out
}
