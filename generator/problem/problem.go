// Package problem collects what is wrong with the generator's inputs. Every problem is an
// apimachinery field error (the path in the file, the kind of error, the value found, what is
// wrong) placed in an input file, with what would have been right, so one run can report
// everything at once instead of making the operator fix one mistake per run.
package problem

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Problem is one thing wrong with one field of one input file.
type Problem struct {
	// File is the input file, as the operator would type it (e.g. tenants/acme/tenant.yaml).
	File string
	// Err is what is wrong: Err.Field is the path of the offending field (spec.gpuCount), or
	// empty for the file itself; Err.Detail says what is wrong; Err.Type and Err.BadValue
	// classify it (field.ErrorTypeNotFound for a name that matches nothing).
	Err *field.Error
	// Expected says what would have been right; empty when the detail says it all.
	Expected string
	// Suggestions are close names for a name that matches nothing ("did you mean"), as data.
	Suggestions []string
}

// New is a problem with a free-form message (field.ErrorTypeInvalid, no value shown).
func New(file, path, expected, message string) Problem {
	return Problem{File: file, Err: &field.Error{Type: field.ErrorTypeInvalid, Field: path, BadValue: field.OmitValueType{},
		Detail: message}, Expected: expected}
}

// Field is the path of the offending field, or "" for the file itself.
func (p Problem) Field() string { return p.Err.Field }

// Message says what is wrong.
func (p Problem) Message() string { return p.Err.Detail }

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Err.Field != "" {
		b.WriteString(": ")
		b.WriteString(p.Err.Field)
	}
	b.WriteString(": ")
	b.WriteString(p.Err.Detail)
	if p.Expected != "" {
		b.WriteString("; expected ")
		b.WriteString(p.Expected)
	}
	return b.String()
}

// Unwrap returns the field error, for errors.As.
func (p Problem) Unwrap() error { return p.Err }

// List is every problem of a run. The zero value is ready to use.
type List []Problem

// Add records a problem.
func (l *List) Add(file, field, expected, format string, args ...any) {
	*l = append(*l, New(file, field, expected, fmt.Sprintf(format, args...)))
}

// AddError records a field error found in file.
func (l *List) AddError(file string, err *field.Error, expected string) {
	*l = append(*l, Problem{File: file, Err: err, Expected: expected})
}

// AddNotFound records a name that matches nothing known, with the close names as suggestions.
func (l *List) AddNotFound(file, path, name, expected string, suggestions []string, format string, args ...any) {
	e := field.NotFound(field.NewPath(path), name)
	e.Detail = fmt.Sprintf(format, args...)
	*l = append(*l, Problem{File: file, Err: e, Expected: expected, Suggestions: suggestions})
}

// Merge appends the problems of another list.
func (l *List) Merge(o List) { *l = append(*l, o...) }

// Err returns nil when the list is empty, else the list sorted by file, field and message with
// exact duplicates removed, as an error.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	out := slices.Clone(l)
	key := func(p Problem) [4]string { return [4]string{p.File, p.Err.Field, p.Err.Detail, p.Expected} }
	slices.SortStableFunc(out, func(a, b Problem) int {
		ka, kb := key(a), key(b)
		return cmp.Or(cmp.Compare(ka[0], kb[0]), cmp.Compare(ka[1], kb[1]), cmp.Compare(ka[2], kb[2]), cmp.Compare(ka[3], kb[3]))
	})
	return Errors(slices.CompactFunc(out, func(a, b Problem) bool { return key(a) == key(b) }))
}

// Errors is a sorted, non-empty list of problems returned as one error.
type Errors []Problem

func (e Errors) Error() string {
	if len(e) == 1 {
		return e[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(e))
	for _, p := range e {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// FieldErrors returns the problems' field errors, for callers that speak apimachinery.
func (e Errors) FieldErrors() field.ErrorList {
	out := make(field.ErrorList, len(e))
	for i, p := range e {
		out[i] = p.Err
	}
	return out
}

// Problems returns the problems inside err (an Errors or a single Problem, possibly wrapped),
// or nil.
func Problems(err error) []Problem {
	var list Errors
	if errors.As(err, &list) {
		return list
	}
	var one Problem
	if errors.As(err, &one) {
		return []Problem{one}
	}
	return nil
}
