// Package problem collects what is wrong with the generator's inputs. Every problem names the
// file, the field and what was expected, so one run can report everything at once instead of
// making the operator fix one mistake per run.
package problem

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Problem is one thing wrong with one field of one input file.
type Problem struct {
	// File is the input file, as the operator would type it (e.g. tenants/acme/tenant.yaml).
	File string
	// Field is the path of the offending field (spec.gpuCount), or empty for the file itself.
	Field string
	// Message says what is wrong.
	Message string
	// Expected says what would have been right; empty when the message says it all.
	Expected string
}

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Field != "" {
		b.WriteString(": ")
		b.WriteString(p.Field)
	}
	b.WriteString(": ")
	b.WriteString(p.Message)
	if p.Expected != "" {
		b.WriteString("; expected ")
		b.WriteString(p.Expected)
	}
	return b.String()
}

// List is every problem of a run. The zero value is ready to use.
type List []Problem

// Add records a problem.
func (l *List) Add(file, field, expected, format string, args ...any) {
	*l = append(*l, Problem{File: file, Field: field, Message: fmt.Sprintf(format, args...), Expected: expected})
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
	slices.SortFunc(out, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Field, b.Field),
			cmp.Compare(a.Message, b.Message), cmp.Compare(a.Expected, b.Expected))
	})
	return Errors(slices.Compact(out))
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
