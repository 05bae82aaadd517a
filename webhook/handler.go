// Package webhook is inferplane's validating admission webhook: controller-runtime handlers
// over the policy package for ManagedInferenceJob, ModelMaster and KubeVirt's VirtualMachine
// and VirtualMachineInstance, the server that runs them (TLS, health, metrics), and the install
// manifests as typed objects.
package webhook

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Endpoint is one admission endpoint: the kind it reviews, its resource and its URL path.
type Endpoint struct {
	Kind     schema.GroupKind
	Version  string
	Resource string
	Path     string
	// Name is the webhook's name in the ValidatingWebhookConfiguration.
	Name string
}

// Endpoints are the four kinds the webhook reviews.
var Endpoints = []Endpoint{
	{policy.GroupKindJob, v1alpha1.GroupVersion.Version, "managedinferencejobs", "/validate/managedinferencejobs", "managedinferencejobs.policy.inferplane.io"},
	{policy.GroupKindMaster, v1alpha1.GroupVersion.Version, "modelmasters", "/validate/modelmasters", "modelmasters.policy.inferplane.io"},
	{policy.GroupKindVM, "v1", "virtualmachines", "/validate/virtualmachines", "virtualmachines.policy.inferplane.io"},
	{policy.GroupKindVMI, "v1", "virtualmachineinstances", "/validate/virtualmachineinstances", "virtualmachineinstances.policy.inferplane.io"},
}

// Results of a decision, the "result" label of the metrics.
const (
	ResultAllowed = "allowed" // a guarded object that passed every rule (or an update the rules do not read)
	ResultDenied  = "denied"  // a guarded object that broke a rule
	ResultIgnored = "ignored" // not inferplane's: passed untouched
	ResultError   = "error"   // a request that could not be decided (bad input, unreadable policy data)
)

// Handler is the admission.Handler of one kind.
type Handler struct {
	Kind   schema.GroupKind
	Source policy.Source
	// Metrics and Log may be nil / zero.
	Metrics *Metrics
	Log     logr.Logger
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
	obj, err := policy.Decode(h.Kind, req.Object.Raw, false)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode %s %s/%s: %w", h.Kind.Kind, req.Namespace, req.Name, err)), ResultError
	}
	// The request's coordinates are authoritative (generateName leaves the name empty on create).
	if req.Namespace != "" {
		obj.SetNamespace(req.Namespace)
	}
	if obj.GetName() == "" {
		obj.SetName(req.Name)
	}
	if req.Operation == admissionv1.Update {
		old, err := policy.Decode(h.Kind, req.OldObject.Raw, false)
		if err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the old %s %s/%s: %w", h.Kind.Kind, req.Namespace, req.Name, err)), ResultError
		}
		// The object selector sees only metadata.labels: once the label is gone, later updates
		// would never reach the webhook. So the label cannot be dropped, only the object.
		if policy.Guarded(old.GetLabels()) && !policy.Guarded(obj.GetLabels()) {
			return admission.Denied(fmt.Sprintf("%s: metadata.labels[%s] is removed: an inferplane workload stays one; delete it instead",
				policy.RefOf(obj), v1alpha1.LabelTenant)), ResultDenied
		}
		if policy.IsGuarded(old) {
			if policy.Unchanged(old, obj) {
				return admission.Allowed("no change to what the policy reads"), ResultAllowed
			}
		}
	}
	res, err := policy.Review(ctx, h.Source, obj)
	switch {
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("%s: policy data unavailable, refusing: %w", res.Ref, err)), ResultError
	case !res.Guarded:
		return admission.Allowed(""), ResultIgnored
	case !res.Allowed():
		return admission.Denied(res.Message()), ResultDenied
	}
	return admission.Allowed(""), ResultAllowed
}
