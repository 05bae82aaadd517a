// Package policy holds inferplane's admission rules as pure functions over typed objects. The
// webhook runs them on what the API server is asked to store, `inferplane validate` runs them
// offline on rendered manifests, and the generator runs them before it commits, so the three
// can never disagree.
//
// The rules only look at inferplane's workloads: objects that carry the inferplane.io/tenant
// label. Everything else passes untouched.
package policy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

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

// Result is the outcome of reviewing one object.
type Result struct {
	Ref Ref
	// Guarded is false for objects that are not inferplane's (no inferplane.io/tenant label):
	// they pass untouched.
	Guarded bool
	// Errors are the broken rules, one apimachinery field error each: Field is the path in the
	// reviewed object (spec.gpuCount, metadata.labels[inferplane.io/node-type]), BadValue the
	// value found there, Detail what the rule expected (with the limit it applies).
	Errors field.ErrorList
}

// Allowed reports whether the object may be stored.
func (r Result) Allowed() bool { return len(r.Errors) == 0 }

// Reasons joins the broken rules (Describe), "; " between them, without the object's name (the
// form `inferplane validate` prints after DENY <ref>:).
func (r Result) Reasons() string {
	parts := make([]string, len(r.Errors))
	for i, e := range r.Errors {
		parts[i] = Describe(e)
	}
	return strings.Join(parts, "; ")
}

// Message is the denial message the webhook returns: the object, then every broken rule.
func (r Result) Message() string {
	if r.Allowed() {
		return ""
	}
	return r.Ref.String() + ": " + r.Reasons()
}

// Describe words a field error the way the policy's denials read: "<field> is <value>:
// <detail>" (Value), or "<field>: <detail>" when the error shows no value.
func Describe(e *field.Error) string {
	if v := Value(e); v != "" {
		return e.Field + " is " + v + ": " + e.Detail
	}
	return e.Field + ": " + e.Detail
}

// Value is the value a field error found, as the denials show it: "missing" for a required
// field, strings quoted, numbers and lists as JSON, "" when the error shows no value.
func Value(e *field.Error) string {
	switch {
	case e.Type == field.ErrorTypeRequired:
		return "missing"
	case e.BadValue == omit || e.Type == field.ErrorTypeForbidden:
		return ""
	}
	if s, ok := e.BadValue.(string); ok {
		return strconv.Quote(s)
	}
	b, err := json.Marshal(e.BadValue)
	if err != nil {
		return fmt.Sprint(e.BadValue)
	}
	return string(b)
}

// omit is the BadValue of an error that shows no value (field.Invalid prints just its type).
var omit = field.OmitValueType{}

// Guarded reports whether labels mark an object as inferplane's.
func Guarded(labels map[string]string) bool {
	_, ok := labels[v1alpha1.LabelTenant]
	return ok
}
