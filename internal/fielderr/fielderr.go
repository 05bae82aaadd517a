// Package fielderr words apimachinery's field errors, the one error type of inferplane's
// refusals (the policy's denials, the generator's problems, the recipes' derivation errors),
// the one way they are shown: by the webhook, `validate`, `generate`, the jobs commands and,
// through field paths, the product API. It also builds the errors whose words are shared:
// a detail that says it all, and a name that matches nothing with its closest known names.
package fielderr

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/internal/suggest"
)

// Omit is the BadValue of an error that shows no value (its detail says it all).
var Omit = field.OmitValueType{}

// Describe words e: "<field> is <value>: <detail>", "<field>: <detail>" when the error shows no
// value, and the detail alone when it concerns no field (a whole file).
func Describe(e *field.Error) string {
	v := Value(e)
	switch {
	case e.Field == "" && v == "":
		return e.Detail
	case e.Field == "":
		return "is " + v + ": " + e.Detail
	case v == "":
		return e.Field + ": " + e.Detail
	}
	return e.Field + " is " + v + ": " + e.Detail
}

// Value is the value an error found, as Describe shows it: "missing" for a required field,
// strings quoted, numbers and lists as JSON, "" when the error shows no value.
func Value(e *field.Error) string {
	switch {
	case e.Type == field.ErrorTypeRequired:
		return "missing"
	case e.BadValue == Omit || e.Type == field.ErrorTypeForbidden:
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

// Join is the errors described (Describe), "; " between them.
func Join(errs field.ErrorList) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = Describe(e)
	}
	return strings.Join(parts, "; ")
}

// Err is errs as one error worded as Join, nil when there are none: for callers that report a
// refusal as an error rather than placing each field error (a store's, a reader's).
func Err(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return errors.New(Join(errs))
}

// List words names for a message: "a, b, c", or "none".
func List(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Errorf is an invalid field that shows no value: the detail (format, args) says it all.
func Errorf(path *field.Path, format string, args ...any) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, Field: pathString(path), BadValue: Omit, Detail: fmt.Sprintf(format, args...)}
}

// Expected is Errorf that ends with what was expected: "<detail>; expected <expected>" (the
// detail alone when expected is empty).
func Expected(path *field.Path, expected, format string, args ...any) *field.Error {
	e := Errorf(path, format, args...)
	if expected != "" {
		e.Detail += "; expected " + expected
	}
	return e
}

// NotFound is name, at path, matching nothing: detail says what was looked for, and the names
// of known closest to it follow ("; did you mean a, b?"), the one place suggestions are made.
func NotFound(path *field.Path, name, detail string, known []string) *field.Error {
	e := field.NotFound(path, name)
	e.Detail = detail + suggest.DidYouMean(suggest.Close(name, known))
	return e
}

func pathString(p *field.Path) string {
	if p == nil {
		return ""
	}
	return p.String()
}
