package recipe

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/suggest"
)

// Reasons a derivation is refused. A derivation error is an apimachinery field error whose
// Field is the request field it concerns ("model", "variant", "strategy", "hardware",
// "features", "featureModes", "kvOffload", "nodes"), whose Detail names what is unknown and
// lists what exists (with the closest names: "did you mean"), and whose Origin is one of these
// (Reason reads it).
const (
	ReasonUnknownModel         = "unknownModel"
	ReasonUnknownVariant       = "unknownVariant"
	ReasonUnknownStrategy      = "unknownStrategy"
	ReasonIncompatibleStrategy = "incompatibleStrategy"
	ReasonStrategyUnavailable  = "strategyUnavailable"
	ReasonUnsupportedStrategy  = "unsupportedStrategy"
	ReasonUnknownHardware      = "unknownHardware"
	ReasonUnsupportedHardware  = "unsupportedHardware"
	ReasonUnknownFeature       = "unknownFeature"
	ReasonDoesNotFit           = "doesNotFit"
	ReasonUnsupportedRecipe    = "unsupportedRecipe"
	ReasonUnsupportedFeature   = "unsupportedFeature"
	ReasonUnknownKVOffload     = "unknownKVOffload"
	ReasonUnsupportedKVOffload = "unsupportedKVOffload"
	ReasonArgsMismatch         = "argsMismatch"
)

// Reason is why err refuses a derivation (ReasonUnknownModel, ...); "" for any other error.
func Reason(err error) string {
	if fe := fieldError(err); fe != nil {
		return fe.Origin
	}
	return ""
}

// Field is the request field a derivation error concerns ("model", "variant", ...); "" for any
// other error.
func Field(err error) string {
	if fe := fieldError(err); fe != nil {
		return fe.Field
	}
	return ""
}

func fieldError(err error) *field.Error {
	var fe *field.Error
	if errors.As(err, &fe) && fe.Origin != "" {
		return fe
	}
	return nil
}

func newError(reason, request, format string, args ...any) error {
	return &field.Error{Type: errorType(reason), Field: request, BadValue: fielderr.Omit, Detail: fmt.Sprintf(format, args...), Origin: reason}
}

// errorType classifies a reason: something unknown, or a request the recipe cannot serve.
func errorType(reason string) field.ErrorType {
	switch reason {
	case ReasonUnknownModel, ReasonUnknownVariant, ReasonUnknownStrategy, ReasonUnknownHardware, ReasonUnknownFeature, ReasonUnknownKVOffload:
		return field.ErrorTypeNotFound
	case ReasonUnsupportedStrategy, ReasonUnsupportedHardware, ReasonUnsupportedRecipe, ReasonStrategyUnavailable,
		ReasonUnsupportedFeature, ReasonUnsupportedKVOffload:
		return field.ErrorTypeNotSupported
	}
	return field.ErrorTypeInvalid
}

// list formats names for a message: "a, b, c", or "none".
var list = fielderr.List

// didYouMean is "; did you mean a, b?" for the names close to q (internal/suggest), or "".
func didYouMean(q string, names []string) string {
	return suggest.DidYouMean(suggest.Close(q, names))
}
