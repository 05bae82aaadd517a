// Package problem collects what is wrong with the generator's inputs. A problem is an
// apimachinery field error (the path in the file, the kind of error, the value found, what is
// wrong and what would be right: the one error type of inferplane's refusals, worded by
// internal/fielderr) placed in an input file, at a line when known, so one run can report
// everything at once instead of making the operator fix one mistake per run.
package problem

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/internal/fielderr"
)

// Problem is one thing wrong with one field of one input file.
type Problem struct {
	// File is the input file, as the operator would type it (e.g. tenants/acme/tenant.yaml).
	File string
	// Line is the line of File the problem is at; 0 when not known.
	Line int
	// Err is what is wrong: Err.Field is the path of the offending field (spec.gpuCount), or
	// empty for the file itself; Err.Type and Err.BadValue classify it; Err.Detail says what
	// is wrong and what was expected.
	Err *field.Error
}

func (p Problem) Error() string {
	where := p.File
	if p.Line > 0 {
		where += ":" + strconv.Itoa(p.Line)
	}
	return where + ": " + fielderr.Describe(p.Err)
}

// Unwrap returns the field error, for errors.As.
func (p Problem) Unwrap() error { return p.Err }

// List is every problem of a run. The zero value is ready to use.
type List []Problem

// Add records a problem at path (nil: the file itself) that shows no value: the message
// (format, args), then what was expected ("" when the message says it all).
func (l *List) Add(file string, path *field.Path, expected, format string, args ...any) {
	*l = append(*l, Problem{File: file, Err: fielderr.Expected(path, expected, format, args...)})
}

// AddError records field errors found in file.
func (l *List) AddError(file string, errs ...*field.Error) {
	for _, e := range errs {
		*l = append(*l, Problem{File: file, Err: e})
	}
}

// Merge appends the problems of another list.
func (l *List) Merge(o List) { *l = append(*l, o...) }

// Err returns nil when the list is empty, else the list sorted by file, line, field and
// message with exact duplicates removed, as an error.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	out := slices.Clone(l)
	same := func(a, b Problem) bool {
		return a.File == b.File && a.Line == b.Line && a.Err.Field == b.Err.Field && fielderr.Describe(a.Err) == fielderr.Describe(b.Err)
	}
	slices.SortStableFunc(out, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Err.Field, b.Err.Field),
			cmp.Compare(fielderr.Describe(a.Err), fielderr.Describe(b.Err)))
	})
	return Errors(slices.CompactFunc(out, same))
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
