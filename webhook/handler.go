// Package webhook is inferplane's validating admission webhook: one controller-runtime typed
// validator per kind it reviews (ManagedInferenceJob, ModelMaster, KubeVirt's VirtualMachine and
// VirtualMachineInstance) over the policy package's rules, behind an HTTP guard that bounds what
// it reads and decodes at once, and the server that runs them (TLS, health, metrics). Its install
// manifests are in webhook/install.
package webhook

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/webhook/install"
)

// Results of a decision, the "result" label of the metrics.
const (
	ResultAllowed = "allowed" // a guarded object that passed every rule (or an update the rules do not read)
	ResultDenied  = "denied"  // a guarded object that broke a rule
	ResultIgnored = "ignored" // not inferplane's: passed untouched
	ResultError   = "error"   // a request that could not be decided (bad input, unreadable policy data)
)

// validator is the typed admission.Validator of one kind: controller-runtime decodes the
// request's objects into T, and the policy's Rules for T decide.
type validator[T client.Object] struct {
	rules  policy.Rules[T]
	source policy.Source
}

var _ admission.Validator[*v1alpha1.ModelMaster] = validator[*v1alpha1.ModelMaster]{}

// ValidateCreate implements admission.Validator.
func (v validator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	coordinates(ctx, obj)
	return nil, v.review(ctx, obj)
}

// ValidateUpdate implements admission.Validator.
func (v validator[T]) ValidateUpdate(ctx context.Context, old, obj T) (admission.Warnings, error) {
	coordinates(ctx, obj)
	// The object selector sees only metadata.labels: once the label is gone, later updates
	// would never reach the webhook. So the label cannot be dropped, only the object.
	if policy.Guarded(old.GetLabels()) && !policy.Guarded(obj.GetLabels()) {
		setOutcome(ctx, ResultDenied)
		res := policy.Result{Ref: policy.RefOf(obj), Guarded: true, Errors: field.ErrorList{field.Forbidden(
			field.NewPath("metadata", "labels").Key(v1alpha1.LabelTenant),
			"is removed: an inferplane workload stays one; delete it instead")}}
		return nil, invalid(v.rules.Kind, res, fmt.Sprintf("%s: metadata.labels[%s] is removed: an inferplane workload stays one; delete it instead",
			res.Ref, v1alpha1.LabelTenant))
	}
	if policy.IsGuarded(old) && v.rules.Unchanged(old, obj) {
		setOutcome(ctx, ResultAllowed)
		return nil, nil
	}
	return nil, v.review(ctx, obj)
}

// ValidateDelete implements admission.Validator; the configuration never sends deletes.
func (v validator[T]) ValidateDelete(ctx context.Context, _ T) (admission.Warnings, error) {
	setOutcome(ctx, ResultIgnored)
	return nil, nil
}

func (v validator[T]) review(ctx context.Context, obj T) error {
	res, err := v.rules.Review(ctx, v.source, obj)
	switch {
	case err != nil:
		setOutcome(ctx, ResultError)
		return apierrors.NewInternalError(fmt.Errorf("%s: policy data unavailable, refusing: %w", res.Ref, err))
	case !res.Guarded:
		setOutcome(ctx, ResultIgnored)
		return nil
	case !res.Allowed():
		setOutcome(ctx, ResultDenied)
		return invalid(v.rules.Kind, res, res.Message())
	}
	setOutcome(ctx, ResultAllowed)
	return nil
}

// invalid is the denial the API server passes on: apimachinery's Invalid status (422) with one
// cause per broken rule (field and detail), and the policy's own message, which names the
// object and every rule the way `inferplane validate` does.
func invalid(gk schema.GroupKind, res policy.Result, message string) error {
	st := apierrors.NewInvalid(gk, res.Ref.Name, res.Errors)
	st.ErrStatus.Message = message
	return st
}

// coordinates takes the request's namespace and name, which are authoritative (generateName
// leaves the name empty on create).
func coordinates(ctx context.Context, obj client.Object) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return
	}
	if req.Namespace != "" {
		obj.SetNamespace(req.Namespace)
	}
	if obj.GetName() == "" {
		obj.SetName(req.Name)
	}
}

type outcomeKey struct{}

// setOutcome records the decision for the metrics and the log (see Handler).
func setOutcome(ctx context.Context, result string) {
	if p, ok := ctx.Value(outcomeKey{}).(*string); ok {
		*p = result
	}
}

// Handler is the admission.Handler of one kind: it checks that the request is for that kind
// and an operation the policy reviews, runs the kind's typed validator, and records the
// decision (metrics, log).
type Handler struct {
	Kind      schema.GroupKind
	validator admission.Handler
	Metrics   *Metrics
	Log       logr.Logger
}

// NewHandler is the handler of rules' kind, reading policy data from src; m and log may be
// nil / zero.
func NewHandler[T client.Object](scheme *runtime.Scheme, rules policy.Rules[T], src policy.Source, m *Metrics, log logr.Logger) *Handler {
	hook := admission.WithValidator[T](scheme, validator[T]{rules: rules, source: src})
	return &Handler{Kind: rules.Kind, validator: hook.Handler, Metrics: m, Log: log}
}

var _ admission.Handler = (*Handler)(nil)

// Handle decides one AdmissionRequest and records the decision.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, result := h.decide(ctx, req)
	h.Metrics.observe(h.Kind.Kind, result, time.Since(start))
	if h.Log.GetSink() != nil {
		switch result {
		case ResultDenied, ResultError:
			h.Log.Info("admission", "kind", h.Kind.Kind, "namespace", req.Namespace, "name", req.Name,
				"operation", req.Operation, "dryRun", req.DryRun != nil && *req.DryRun, "result", result,
				"user", req.UserInfo.Username, "message", resp.Result.Message)
		default:
			h.Log.V(1).Info("admission", "kind", h.Kind.Kind, "namespace", req.Namespace, "name", req.Name,
				"operation", req.Operation, "result", result)
		}
	}
	return resp
}

func (h *Handler) decide(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Kind.Group != h.Kind.Group || req.Kind.Kind != h.Kind.Kind {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint reviews %s, the request is for %q in group %q",
			h.Kind, req.Kind.Kind, req.Kind.Group)), ResultError
	}
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	default:
		return admission.Allowed("only CREATE and UPDATE are reviewed"), ResultIgnored
	}
	result := ""
	resp := h.validator.Handle(context.WithValue(ctx, outcomeKey{}, &result), req)
	if result == "" { // the validator never ran: the objects did not decode
		result = ResultError
		if resp.Result != nil {
			resp.Result.Message = fmt.Sprintf("decode %s %s/%s: %s", h.Kind.Kind, req.Namespace, req.Name, resp.Result.Message)
		}
	}
	return resp, result
}

// Handlers are the HTTP handlers of the four admission endpoints (install.Endpoints) by path,
// each behind g.
func Handlers(g *Guard, src policy.Source, m *Metrics, log logr.Logger) map[string]http.Handler {
	s := Scheme()
	out := map[string]http.Handler{}
	for _, ep := range install.Endpoints {
		out[ep.Path] = g.Wrap(newWebhook(handlerFor(s, ep.Kind, src, m, log), log))
	}
	return out
}

// handlerFor is the typed handler of one of the kinds install.Endpoints lists.
func handlerFor(s *runtime.Scheme, gk schema.GroupKind, src policy.Source, m *Metrics, log logr.Logger) *Handler {
	switch gk {
	case policy.GroupKindJob:
		return NewHandler(s, policy.JobRules, src, m, log)
	case policy.GroupKindMaster:
		return NewHandler(s, policy.MasterRules, src, m, log)
	case policy.GroupKindVM:
		return NewHandler(s, policy.VMRules, src, m, log)
	case policy.GroupKindVMI:
		return NewHandler(s, policy.VMIRules, src, m, log)
	}
	panic(fmt.Sprintf("webhook: no rules for %s", gk)) // install.Endpoints is a static list
}

// newWebhook is the HTTP handler of one endpoint: controller-runtime's AdmissionReview
// decoding and encoding around h (with panics turned into 500 responses). The webhook server
// adds its request metrics when the handler is registered.
func newWebhook(h admission.Handler, log logr.Logger) http.Handler {
	// Handler logs each decision with its fields; controller-runtime's per-request logger (its
	// fields built for every request, logged only at V(5)) is left bare.
	hook := &admission.Webhook{Handler: h, LogConstructor: func(base logr.Logger, _ *admission.Request) logr.Logger { return base }}
	wh, err := admission.StandaloneWebhook(hook, admission.StandaloneOptions{Logger: log})
	if err != nil {
		return hook // only a metrics path can make it fail
	}
	return wh
}

// Mux serves the four endpoints behind g (nil: DefaultGuard) without TLS, a manager or a
// cache: for tests and benchmarks.
func Mux(src policy.Source, m *Metrics, g *Guard) *http.ServeMux {
	if g == nil {
		g = NewGuard(GuardOptions{})
	}
	mux := http.NewServeMux()
	// A logger with a sink: with none (logr.Discard), controller-runtime falls back to its global
	// logger, which complains with a stack trace that it was never set.
	quiet := funcr.New(func(string, string) {}, funcr.Options{})
	for path, h := range Handlers(g, src, m, quiet) {
		mux.Handle(path, h)
	}
	return mux
}
