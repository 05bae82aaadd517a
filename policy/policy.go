// Package policy holds inferplane's admission rules as pure functions over typed objects. The
// webhook runs them on what the API server is asked to store, `inferplane validate` runs them
// offline on rendered manifests, and the generator runs them before it commits, so the three
// can never disagree.
//
// The rules only look at inferplane's workloads: objects that carry the inferplane.io/tenant
// label. Everything else passes untouched.
package policy

import (
	"fmt"
	"strings"

	"github.com/inferplane/inferplane/api/v1alpha1"
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

// Violation is one broken rule: the field of the reviewed object, the value found there, and
// what the rule expected (with the limit it applies).
type Violation struct {
	// Field is a path in the reviewed object, e.g. spec.gpuCount or
	// metadata.labels[inferplane.io/node-type].
	Field string
	// Value is the value found, already formatted: `4`, `"aws.h100"`, `missing`.
	Value string
	// Reason says what was expected and why.
	Reason string
}

func (v Violation) String() string {
	return v.Field + " is " + v.Value + ": " + v.Reason
}

// Result is the outcome of reviewing one object.
type Result struct {
	Ref Ref
	// Guarded is false for objects that are not inferplane's (no inferplane.io/tenant label):
	// they pass untouched.
	Guarded    bool
	Violations []Violation
}

// Allowed reports whether the object may be stored.
func (r Result) Allowed() bool { return len(r.Violations) == 0 }

// Reasons joins the violations, "; " between them, without the object's name (the form
// `inferplane validate` prints after DENY <ref>:).
func (r Result) Reasons() string {
	parts := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}

// Message is the denial message the webhook returns: the object, then every violation.
func (r Result) Message() string {
	if r.Allowed() {
		return ""
	}
	return r.Ref.String() + ": " + r.Reasons()
}

// labelField is the path of a label in messages.
func labelField(prefix, key string) string {
	return prefix + "[" + key + "]"
}

// quote formats a string value for messages.
func quote(s string) string { return fmt.Sprintf("%q", s) }

// Guarded reports whether labels mark an object as inferplane's.
func Guarded(labels map[string]string) bool {
	_, ok := labels[v1alpha1.LabelTenant]
	return ok
}
