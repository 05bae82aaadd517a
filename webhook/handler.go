// Package webhook is inferplane's validating admission webhook: one admission.Handler per kind
// the policy reviews (policy.Kinds: ManagedInferenceJob, ModelMaster, KubeVirt's VirtualMachine
// and VirtualMachineInstance) over the policy package's rules, behind an HTTP guard that bounds
// what it reads and decodes at once, and the server that runs them (TLS, health, metrics). Its
// install manifests are in webhook/install.
package webhook

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
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

// Handler is the admission.Handler of one reviewed kind (policy.Kinds): it checks that the
// request is for that kind and an operation the policy reviews, decodes the objects into the
// kind's Go type, applies the kind's rules and records the decision (metrics, log).
type Handler struct {
	Kind    policy.Kind
	Source  policy.Source
	Metrics *Metrics
	Log     logr.Logger
	decoder admission.Decoder
}

// NewHandler is the handler of kind k, reading policy data from src; m and log may be nil /
// zero. A kind without rules is an error.
func NewHandler(scheme *runtime.Scheme, k policy.Kind, src policy.Source, m *Metrics, log logr.Logger) (*Handler, error) {
	if k.Rules == nil {
		return nil, fmt.Errorf("webhook: %s has no rules to review it with", k.GroupKind())
	}
	return &Handler{Kind: k, Source: src, Metrics: m, Log: log, decoder: admission.NewDecoder(scheme)}, nil
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
	gk := h.Kind.GroupKind()
	if req.Kind.Group != gk.Group || req.Kind.Kind != gk.Kind {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint reviews %s, the request is for %q in group %q",
			gk, req.Kind.Kind, req.Kind.Group)), ResultError
	}
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	default:
		return admission.Allowed("only CREATE and UPDATE are reviewed"), ResultIgnored
	}
	obj, err := h.decode(req, req.Object)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), ResultError
	}
	if req.Operation == admissionv1.Update {
		old, err := h.decode(req, req.OldObject)
		if err != nil {
			return admission.Errored(http.StatusBadRequest, err), ResultError
		}
		// The object selector sees only metadata.labels: once the label is gone, later updates
		// would never reach the webhook. So the label cannot be dropped, only the object.
		if policy.Guarded(old.GetLabels()) && !policy.Guarded(obj.GetLabels()) {
			res := policy.Result{Ref: policy.RefOf(obj), Guarded: true, Errors: field.ErrorList{field.Forbidden(
				field.NewPath("metadata", "labels").Key(v1alpha1.LabelTenant),
				"is removed: an inferplane workload stays one; delete it instead")}}
			return denied(gk, res, fmt.Sprintf("%s: metadata.labels[%s] is removed: an inferplane workload stays one; delete it instead",
				res.Ref, v1alpha1.LabelTenant)), ResultDenied
		}
		if policy.IsGuarded(old) && h.Kind.Rules.Unchanged(old, obj) {
			return admission.Allowed(""), ResultAllowed
		}
	}
	res, err := h.Kind.Rules.Review(ctx, h.Source, obj)
	switch {
	case err != nil:
		st := apierrors.NewInternalError(fmt.Errorf("%s: policy data unavailable, refusing: %w", res.Ref, err))
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Result: &st.ErrStatus}}, ResultError
	case !res.Guarded:
		return admission.Allowed(""), ResultIgnored
	case !res.Allowed():
		return denied(gk, res, res.Message()), ResultDenied
	}
	return admission.Allowed(""), ResultAllowed
}

// decode reads raw into a new object of the handler's kind, with the request's namespace and
// name, which are authoritative (generateName leaves the name empty on create).
func (h *Handler) decode(req admission.Request, raw runtime.RawExtension) (client.Object, error) {
	obj := h.Kind.New()
	if err := h.decoder.DecodeRaw(raw, obj); err != nil {
		return nil, fmt.Errorf("decode %s %s/%s: %w", h.Kind.Kind, req.Namespace, req.Name, err)
	}
	if req.Namespace != "" {
		obj.SetNamespace(req.Namespace)
	}
	if obj.GetName() == "" {
		obj.SetName(req.Name)
	}
	return obj, nil
}

// denied is the denial the API server passes on: apimachinery's Invalid status (422) with one
// cause per broken rule (field and detail), and the policy's own message, which names the
// object and every rule the way `inferplane validate` does.
func denied(gk schema.GroupKind, res policy.Result, message string) admission.Response {
	st := apierrors.NewInvalid(gk, res.Ref.Name, res.Errors)
	st.ErrStatus.Message = message
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Result: &st.ErrStatus}}
}

// Handlers are the HTTP handlers of the admission endpoints, one per reviewed kind
// (policy.Reviewed) at its install.Path, each behind g.
func Handlers(g *Guard, src policy.Source, m *Metrics, log logr.Logger) (map[string]http.Handler, error) {
	s := Scheme()
	out := map[string]http.Handler{}
	for _, k := range policy.Reviewed() {
		h, err := NewHandler(s, k, src, m, log)
		if err != nil {
			return nil, err
		}
		wh, err := newWebhook(h, log)
		if err != nil {
			return nil, fmt.Errorf("webhook: the endpoint of %s: %w", k.GroupKind(), err)
		}
		out[install.Path(k)] = g.Wrap(wh)
	}
	return out, nil
}

// newWebhook is the HTTP handler of one endpoint: controller-runtime's AdmissionReview
// decoding and encoding around h (with panics turned into 500 responses). The webhook server
// adds its request metrics when the handler is registered.
func newWebhook(h admission.Handler, log logr.Logger) (http.Handler, error) {
	// Handler logs each decision with its fields; controller-runtime's per-request logger (its
	// fields built for every request, logged only at V(5)) is left bare.
	hook := &admission.Webhook{Handler: h, LogConstructor: func(base logr.Logger, _ *admission.Request) logr.Logger { return base }}
	return admission.StandaloneWebhook(hook, admission.StandaloneOptions{Logger: log})
}
