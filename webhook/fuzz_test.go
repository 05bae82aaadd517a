package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook/install"
	"github.com/inferplane/inferplane/webhook/webhooktest"
)

// FuzzAdmissionReview posts arbitrary bodies to every endpoint: malformed JSON, missing fields,
// huge numbers, wrong kinds. The answer is always an AdmissionReview that either allows the
// request or refuses it with a 4xx code and a reason: 400 for what cannot be decoded, 422 for a
// denial. Never a panic (controller-runtime would turn one into a 500), never a bare refusal.
func FuzzAdmissionReview(f *testing.F) {
	qwen, deepseek := pt.Master("qwen-4", 4), pt.Master("deepseek-16", 16)
	bad := pt.VM("chat", 0, 0, qwen, pt.H100())
	bad.Spec.Template.Spec.Domain.Devices.GPUs = nil
	for _, c := range []struct {
		op       admissionv1.Operation
		obj, old client.Object
	}{
		{admissionv1.Create, pt.Job("chat", qwen, "aws.h100"), nil},
		{admissionv1.Create, qwen, nil},
		{admissionv1.Create, pt.VM("big", 0, 1, deepseek, pt.H100()), nil},
		{admissionv1.Update, bad, pt.VM("chat", 0, 0, qwen, pt.H100())},
		{admissionv1.Create, pt.VMI("chat", 0, 0, qwen, pt.H100()), nil},
	} {
		for i := range policy.Reviewed() {
			f.Add(uint8(i), reviewBody(f, request(f, c.op, c.obj, c.old)))
		}
	}
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"request":null}`, `{"request":{}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"kubevirt.io","version":"v1","kind":"VirtualMachine"},"operation":"CREATE","object":{"metadata":{"labels":{"inferplane.io/tenant":"acme"}},"spec":{"template":{"spec":{"domain":{"devices":{"gpus":[{}]}}}}}}}}`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"inferplane.io","version":"v1alpha1","kind":"ManagedInferenceJob"},"operation":"CREATE","object":{"metadata":{"labels":{"inferplane.io/tenant":"acme"}},"spec":{"gpuCount":99999999999999999999}}}}`,
		`{"request":{"kind":{"group":"inferplane.io","kind":"ModelMaster"},"operation":"UPDATE","object":{"metadata":{"labels":{"inferplane.io/tenant":"a"}}},"oldObject":7}}`,
	} {
		for i := range policy.Reviewed() {
			f.Add(uint8(i), []byte(s))
		}
	}
	mux := webhooktest.Mux(f, pt.Store(), nil, nil)
	f.Fuzz(func(t *testing.T, endpoint uint8, body []byte) {
		kinds := policy.Reviewed()
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, install.Path(kinds[int(endpoint)%len(kinds)]), bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		mux.ServeHTTP(rec, r)
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("not an AdmissionReview answer: %v %q", err, rec.Body.String())
		}
		resp := out.Response
		if resp.Allowed {
			return
		}
		if resp.Result == nil || resp.Result.Message == "" {
			t.Fatalf("a refusal without a reason: %+v", resp)
		}
		// 422 is a denial, other 4xx a request that could not be decoded. A 500 would be a bug:
		// the in-memory store never fails, and a recovered panic answers 500.
		if code := resp.Result.Code; code < 400 || code >= 500 {
			t.Fatalf("refused with code %d: %s", code, resp.Result.Message)
		}
	})
}
