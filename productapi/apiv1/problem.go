package apiv1

import (
	"fmt"
	"strings"
)

// Problem is an error answer (RFC 9457, application/problem+json). A refused write carries the
// generator's own problems in Errors: the same file, field path and words `generate` prints.
type Problem struct {
	Type   string `json:"type,omitempty" doc:"A URI naming the kind of problem (about:blank when only the status says it)"`
	Title  string `json:"title" doc:"The status's text"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty" doc:"What went wrong, for people"`
	// Errors are every problem of the request, each placed at a file and field.
	Errors []FieldProblem `json:"errors,omitempty"`
}

// FieldProblem is one thing wrong, as `generate` reports it.
type FieldProblem struct {
	// File is the input file (tenants/acme/jobs/chat.yaml); empty for the request itself.
	File string `json:"file,omitempty"`
	// Field is the path of the offending field (spec.gpuCount), or of the request's (body.replicas).
	Field string `json:"field,omitempty"`
	// Type classifies it (apimachinery's field error types: FieldValueInvalid, ...).
	Type string `json:"type,omitempty"`
	// Value is the value found, as text.
	Value string `json:"value,omitempty"`
	// Detail says what is wrong and what was expected.
	Detail string `json:"detail"`
	// Message is the whole line `generate` prints for it.
	Message string `json:"message"`
}

// Error implements error: the detail, then each problem's message.
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, p.Title)
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for _, e := range p.Errors {
		b.WriteString("\n  " + e.Message)
	}
	return b.String()
}

// GetStatus is the HTTP status (huma's StatusError).
func (p *Problem) GetStatus() int { return p.Status }

// ContentType makes the answer application/problem+json (huma's ContentTypeFilter).
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" {
		return "application/problem+json"
	}
	return ct
}
