package recipe

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	suggestpkg "github.com/inferplane/inferplane/internal/suggest"
)

// Kinds of derivation errors, for errors.Is.
var (
	ErrUnknownModel         = errors.New("unknown model")
	ErrUnknownVariant       = errors.New("unknown variant")
	ErrUnknownStrategy      = errors.New("unknown strategy")
	ErrIncompatibleStrategy = errors.New("incompatible strategy")
	ErrStrategyUnavailable  = errors.New("strategy not available in this recipes tree")
	ErrUnsupportedStrategy  = errors.New("strategy not supported by inferplane")
	ErrUnknownHardware      = errors.New("unknown hardware profile")
	ErrUnsupportedHardware  = errors.New("hardware not supported by the recipe")
	ErrUnknownFeature       = errors.New("unknown feature")
	ErrDoesNotFit           = errors.New("model does not fit")
	ErrUnsupportedRecipe    = errors.New("recipe not supported by inferplane")
	ErrUnsupportedFeature   = errors.New("feature not supported by inferplane")
	ErrUnknownKVOffload     = errors.New("unknown KV offload option")
	ErrUnsupportedKVOffload = errors.New("KV offload option not offered here")
	ErrArgsMismatch         = errors.New("serving args disagree with the layout")
)

// Error is a derivation error: an apimachinery field error (Err) whose Field is the request
// field it concerns ("model", "variant", "strategy", "hardware", "features", "nodes") and whose
// Detail names what is unknown and lists what exists; Kind says what went wrong (errors.Is
// matches it), and Suggestions are close model ids for an unknown model, as data.
type Error struct {
	Kind        error
	Err         *field.Error
	Suggestions []string
}

func (e *Error) Error() string   { return e.Err.Detail }
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// Field is the request field the error concerns.
func (e *Error) Field() string { return e.Err.Field }

func newError(kind error, field, format string, args ...any) *Error {
	typ := fieldErrorType(kind)
	return &Error{Kind: kind, Err: &fieldErr{Type: typ, Field: field, BadValue: omitValue, Detail: fmt.Sprintf(format, args...)}}
}

// fieldErr is field.Error under a name newError's parameter does not shadow.
type fieldErr = field.Error

var omitValue = field.OmitValueType{}

// fieldErrorType classifies a kind of derivation error: something unknown, or a request the
// recipe cannot serve.
func fieldErrorType(kind error) field.ErrorType {
	switch kind {
	case ErrUnknownModel, ErrUnknownVariant, ErrUnknownStrategy, ErrUnknownHardware, ErrUnknownFeature, ErrUnknownKVOffload:
		return field.ErrorTypeNotFound
	case ErrUnsupportedStrategy, ErrUnsupportedHardware, ErrUnsupportedRecipe, ErrStrategyUnavailable,
		ErrUnsupportedFeature, ErrUnsupportedKVOffload:
		return field.ErrorTypeNotSupported
	}
	return field.ErrorTypeInvalid
}

// list formats names for a message: "a, b, c", or "none".
func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// suggest returns up to three ids close to query (internal/suggest).
func suggest(query string, ids []string) []string { return suggestpkg.Close(query, ids) }
