package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
	"github.com/inferplane/inferplane/webhook/webhooktest"
)

// request builds an AdmissionRequest for obj (and old, on UPDATE) the way the API server does.
func request(t testing.TB, op admissionv1.Operation, obj, old client.Object) admissionv1.AdmissionRequest {
	t.Helper()
	gvk := obj.GetObjectKind().GroupVersionKind()
	req := admissionv1.AdmissionRequest{
		UID:       types.UID("uid-1"),
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Namespace: obj.GetNamespace(), Name: obj.GetName(), Operation: op,
		Object: runtime.RawExtension{Raw: mustJSON(t, obj)},
	}
	if old != nil {
		req.OldObject = runtime.RawExtension{Raw: mustJSON(t, old)}
	}
	return req
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func reviewBody(t testing.TB, req admissionv1.AdmissionRequest) []byte {
	return mustJSON(t, admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
}

// post sends an AdmissionReview body to path and decodes the answer.
func post(t testing.TB, h http.Handler, path, contentType string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	h.ServeHTTP(rec, r)
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	require.NotNil(t, out.Response)
	return out.Response
}

type brokenSource struct{ policy.Source }

func (brokenSource) Master(context.Context, string) (*v1alpha1.ModelMaster, error) {
	return nil, errors.New("connection refused")
}

func TestHandler(t *testing.T) {
	qwen := pt.Master("qwen-4", 4)
	goodVM := pt.VM("chat", 0, 0, qwen, pt.H100())
	badVM := pt.VM("chat", 0, 0, qwen, pt.H100())
	badVM.Spec.Template.Spec.Domain.Devices.GPUs = badVM.Spec.Template.Spec.Domain.Devices.GPUs[:1]
	unlabelled := pt.VM("chat", 0, 0, qwen, pt.H100())
	unlabelled.Labels, unlabelled.Spec.Template.ObjectMeta.Labels = nil, nil
	finalized := badVM.DeepCopy()
	finalized.Finalizers = []string{"kubevirt.io/virtualMachineControllerFinalize"}
	finalized.Labels["kubevirt.io/created-by"] = "x" // not an inferplane.io/ label
	metaUnlabelled := goodVM.DeepCopy()
	delete(metaUnlabelled.Labels, v1alpha1.LabelTenant) // the template keeps it
	relabelled := badVM.DeepCopy()
	relabelled.Labels[v1alpha1.LabelJob] = "other"
	badJob := pt.Job("chat", qwen, "aws.h100")
	badJob.Spec.GPUCount = 8
	badMaster := pt.Master("odd", 8)
	badMaster.Spec.PerReplicaGPUCount = 6

	cases := []struct {
		name     string
		src      policy.Source
		req      admissionv1.AdmissionRequest
		path     string
		allowed  bool
		code     int32
		contains string
	}{
		{name: "allowed VM", req: request(t, admissionv1.Create, goodVM, nil), allowed: true, code: 200},
		{name: "denied VM", req: request(t, admissionv1.Create, badVM, nil), code: 422,
			contains: "VirtualMachine/acme/chat-r0-n0: spec.template.spec.domain.devices.gpus is 1: must be 4"},
		{name: "denied job", req: request(t, admissionv1.Create, badJob, nil), code: 422,
			contains: "ManagedInferenceJob/acme/chat: spec.gpuCount is 8: must equal perReplicaGPUCount 4 of ModelMaster qwen-4"},
		{name: "denied master", req: request(t, admissionv1.Create, badMaster, nil), code: 422,
			contains: "ModelMaster/odd: spec.perReplicaGPUCount is 6"},
		{name: "allowed VMI", req: request(t, admissionv1.Create, pt.VMI("chat", 0, 0, qwen, pt.H100()), nil), allowed: true, code: 200},
		{name: "unlabelled passes", req: request(t, admissionv1.Create, unlabelled, nil), allowed: true, code: 200},
		{name: "delete is not reviewed", req: request(t, admissionv1.Delete, badVM, nil), allowed: true, code: 200},
		{name: "update that the policy does not read", req: request(t, admissionv1.Update, finalized, badVM), allowed: true, code: 200},
		{name: "update of an inferplane label", req: request(t, admissionv1.Update, relabelled, badVM), code: 422, contains: "gpus is 1: must be 4"},
		{name: "update that removes the tenant label", req: request(t, admissionv1.Update, unlabelled, goodVM), code: 422,
			contains: "VirtualMachine/acme/chat-r0-n0: metadata.labels[inferplane.io/tenant] is removed"},
		{name: "update that removes the tenant label from the VM only", req: request(t, admissionv1.Update, metaUnlabelled, goodVM), code: 422,
			contains: "metadata.labels[inferplane.io/tenant] is removed"},
		{name: "update that fixes a bad VM", req: request(t, admissionv1.Update, goodVM, badVM), allowed: true, code: 200},
		{name: "kind sent to the wrong endpoint", req: request(t, admissionv1.Create, goodVM, nil), path: "/validate/managedinferencejobs",
			code: 400, contains: "this endpoint reviews ManagedInferenceJob.inferplane.io"},
		{name: "policy data unreadable", src: brokenSource{pt.Store()}, req: request(t, admissionv1.Create, goodVM, nil), code: 500,
			contains: `policy data unavailable, refusing: read ModelMaster "qwen-4": connection refused`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			if src == nil {
				src = pt.Store()
			}
			path := tc.path
			if path == "" {
				path = pathOfKind(tc.req.Kind.Kind)
			}
			resp := post(t, webhooktest.Mux(t, src, nil, nil), path, "application/json", reviewBody(t, tc.req))
			assert.Equal(t, tc.allowed, resp.Allowed)
			assert.Equal(t, types.UID("uid-1"), resp.UID)
			require.NotNil(t, resp.Result)
			assert.Equal(t, tc.code, resp.Result.Code, resp.Result.Message)
			if tc.contains != "" {
				assert.Contains(t, resp.Result.Message, tc.contains)
			}
		})
	}
}

func pathOfKind(kind string) string {
	for _, k := range policy.Reviewed() {
		if k.Kind == kind {
			return install.Path(k)
		}
	}
	return "/nowhere"
}

func TestHandlerBadRequests(t *testing.T) {
	mux := webhooktest.Mux(t, pt.Store(), nil, nil)
	goodVM := pt.VM("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100())
	cases := []struct {
		name, contentType string
		body              []byte
		contains          string
	}{
		{"malformed JSON", "application/json", []byte(`{"request":`), "unexpected end of JSON"},
		{"not JSON", "application/json", []byte("hello"), "the body is not an AdmissionReview"},
		{"wrong content type", "text/plain", reviewBody(t, request(t, admissionv1.Create, goodVM, nil)), "expected application/json"},
		{"no request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), "carries no request with a uid"},
		{"object is not JSON", "application/json", func() []byte {
			req := request(t, admissionv1.Create, goodVM, nil)
			req.Object.Raw = []byte(`"just a string"`)
			return reviewBody(t, req)
		}(), "decode VirtualMachine acme/chat-r0-n0: couldn't get version/kind"},
		{"object of another kind", "application/json", func() []byte {
			req := request(t, admissionv1.Create, goodVM, nil)
			req.Object.Raw = []byte(`{"kind":"Pod","metadata":{"labels":{"inferplane.io/tenant":"acme"}}}`)
			return reviewBody(t, req)
		}(), `no kind "Pod" is registered for version "kubevirt.io/v1"`},
		{"huge number", "application/json", func() []byte {
			req := request(t, admissionv1.Create, goodVM, nil)
			req.Object.Raw = []byte(strings.Replace(string(req.Object.Raw), `"cores":32`, `"cores":1e99`, 1))
			return reviewBody(t, req)
		}(), "cores"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, mux, "/validate/virtualmachines", tc.contentType, tc.body)
			assert.False(t, resp.Allowed)
			assert.Equal(t, int32(http.StatusBadRequest), resp.Result.Code)
			assert.Contains(t, resp.Result.Message, tc.contains)
		})
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := webhook.NewMetrics(reg)
	require.NoError(t, err)
	again, err := webhook.NewMetrics(reg)
	require.NoError(t, err, "a second registration reuses the series")
	mux := webhooktest.Mux(t, pt.Store(), m, nil)
	qwen := pt.Master("qwen-4", 4)
	bad := pt.Job("chat", qwen, "aws.h100")
	bad.Spec.GPUCount = 1
	post(t, mux, "/validate/managedinferencejobs", "application/json", reviewBody(t, request(t, admissionv1.Create, pt.Job("chat", qwen, "aws.h100"), nil)))
	post(t, mux, "/validate/managedinferencejobs", "application/json", reviewBody(t, request(t, admissionv1.Create, bad, nil)))
	post(t, webhooktest.Mux(t, pt.Store(), again, nil), "/validate/managedinferencejobs", "application/json", reviewBody(t, request(t, admissionv1.Create, bad, nil)))

	families, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]float64{}
	histograms := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := ""
			for _, l := range m.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + " "
			}
			switch f.GetName() {
			case "inferplane_webhook_decisions_total":
				counts[strings.TrimSpace(labels)] = m.GetCounter().GetValue()
			case "inferplane_webhook_decision_duration_seconds":
				histograms++
				assert.Equal(t, uint64(3), m.GetHistogram().GetSampleCount())
			}
		}
	}
	assert.Equal(t, map[string]float64{
		"kind=ManagedInferenceJob result=allowed": 1,
		"kind=ManagedInferenceJob result=denied":  2,
	}, counts)
	assert.Equal(t, 1, histograms, "one histogram series per kind")
}

// A denial is apimachinery's Invalid status: reason Invalid, code 422, one cause per broken
// rule with its field, and the policy's message naming the object.
func TestDenialIsInvalidWithCauses(t *testing.T) {
	qwen := pt.Master("qwen-4", 4)
	bad := pt.Job("chat", qwen, "gcp.l4")
	bad.Spec.GPUCount = 8
	resp := post(t, webhooktest.Mux(t, pt.Store(), nil, nil), "/validate/managedinferencejobs", "application/json",
		reviewBody(t, request(t, admissionv1.Create, bad, nil)))
	require.False(t, resp.Allowed)
	assert.Equal(t, metav1.StatusReasonInvalid, resp.Result.Reason)
	assert.Equal(t, int32(http.StatusUnprocessableEntity), resp.Result.Code)
	require.NotNil(t, resp.Result.Details)
	assert.Equal(t, "chat", resp.Result.Details.Name)
	fields := map[string]string{}
	for _, c := range resp.Result.Details.Causes {
		fields[c.Field] = c.Message
	}
	assert.Contains(t, fields["spec.gpuCount"], "must equal perReplicaGPUCount 4 of ModelMaster qwen-4")
	assert.Contains(t, fields["spec.nodeType"], "not allowed for Tenant acme")
	assert.True(t, strings.HasPrefix(resp.Result.Message, "ManagedInferenceJob/acme/chat: "), resp.Result.Message)
}
