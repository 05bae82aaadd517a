// Package policy holds inferplane's admission rules as pure functions over typed objects. The
// webhook runs them on what the API server is asked to store, `inferplane validate` runs them
// offline on rendered manifests, and the generator runs them before it commits, so the three
// can never disagree.
//
// The rules only look at inferplane's workloads: objects that carry the inferplane.io/tenant
// label. Everything else passes untouched.
package policy

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// Ref names an object in messages: Kind/namespace/name, or Kind/name when cluster-scoped.
type Ref struct {
	Kind      string
	Namespace string
	Name      string
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// Result is the outcome of reviewing one object.
type Result struct {
	Ref Ref
	// Guarded is false for objects that are not inferplane's (no inferplane.io/tenant label):
	// they pass untouched.
	Guarded bool
	// Errors are the broken rules, one apimachinery field error each: Field is the path in the
	// reviewed object (spec.gpuCount, metadata.labels[inferplane.io/node-type]), BadValue the
	// value found there, Detail what the rule expected (with the limit it applies); fielderr
	// words them.
	Errors field.ErrorList
}

// Allowed reports whether the object may be stored.
func (r Result) Allowed() bool { return len(r.Errors) == 0 }

// Reasons joins the broken rules (fielderr.Describe), "; " between them, without the object's
// name (the form `inferplane validate` prints after DENY <ref>:).
func (r Result) Reasons() string { return fielderr.Join(r.Errors) }

// Message is the denial message the webhook returns: the object, then every broken rule.
func (r Result) Message() string {
	if r.Allowed() {
		return ""
	}
	return r.Ref.String() + ": " + r.Reasons()
}

// Guarded reports whether labels mark an object as inferplane's.
func Guarded(labels map[string]string) bool {
	_, ok := labels[v1alpha1.LabelTenant]
	return ok
}
