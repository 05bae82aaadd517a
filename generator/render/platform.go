package render

import (
	"maps"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// ProjectAPIVersion and ProjectKind are vCluster Platform's project.
const (
	ProjectAPIVersion = "management.loft.sh/v1"
	ProjectKind       = "Project"
)

// Project is the part of vCluster Platform's Project inferplane sets.
type Project = object[ProjectSpec]

// ProjectSpec limits which node types the tenant's project may claim.
type ProjectSpec struct {
	DisplayName string `json:"displayName,omitempty"`
	// AllowedNodeTypes is a pointer so that "absent" (every node type) and "[]" (none) stay
	// different, exactly as the tenant wrote them.
	AllowedNodeTypes *[]ProjectNodeType `json:"allowedNodeTypes,omitempty"`
}

// ProjectNodeType is an exact node type name or a "<provider>.*" wildcard.
type ProjectNodeType struct {
	Name string `json:"name"`
}

func project(t *tenant) Project {
	p := Project{
		APIVersion: ProjectAPIVersion,
		Kind:       ProjectKind,
		Metadata:   meta{Name: t.name, Labels: maps.Clone(t.labels)},
		Spec:       ProjectSpec{DisplayName: t.spec.DisplayName},
	}
	if t.spec.AllowedNodeTypes != nil {
		list := make([]ProjectNodeType, 0, len(t.spec.AllowedNodeTypes))
		for _, n := range t.spec.AllowedNodeTypes {
			list = append(list, ProjectNodeType{Name: n})
		}
		p.Spec.AllowedNodeTypes = &list
	}
	return p
}

// tenantSpec keeps "allowedNodeTypes absent" and "allowedNodeTypes: []" apart: the v1alpha1
// field has no omitempty (null means all), so a nil list is left out rather than written as
// null, and an empty one is written as [].
type tenantSpec struct {
	v1alpha1.TenantSpec
	AllowedNodeTypes *[]string `json:"allowedNodeTypes,omitempty"`
}

// tenantObject is the Tenant the webhook reads in the tenant cluster.
func tenantObject(t *tenant) object[tenantSpec] {
	s := tenantSpec{TenantSpec: *t.spec}
	if t.spec.AllowedNodeTypes != nil {
		l := append([]string{}, t.spec.AllowedNodeTypes...)
		s.AllowedNodeTypes = &l
	}
	return object[tenantSpec]{
		APIVersion: v1alpha1.APIVersion,
		Kind:       v1alpha1.KindTenant,
		Metadata:   meta{Name: t.name, Labels: maps.Clone(t.labels), Annotations: policyDataWave()},
		Spec:       s,
	}
}

// nodeTypeObjects are the node types the tenant's jobs use, for the webhook.
func nodeTypeObjects(t *tenant) []any {
	out := make([]any, 0, len(t.nodeTypes))
	for i := range t.nodeTypes {
		nt := &t.nodeTypes[i]
		out = append(out, object[v1alpha1.NodeTypeSpec]{
			APIVersion: v1alpha1.APIVersion,
			Kind:       v1alpha1.KindNodeType,
			Metadata: meta{Name: nt.Name, Labels: map[string]string{
				v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue,
			}, Annotations: policyDataWave()},
			Spec: nt.Spec,
		})
	}
	return out
}
