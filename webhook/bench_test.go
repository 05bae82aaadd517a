package webhook_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"

	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/webhooktest"
)

// BenchmarkHandler measures one admission through the HTTP handler the server mounts: decode the
// AdmissionReview, decode the object, look up the policy data (in memory here; in the cluster
// it is an informer cache), decide, record metrics, encode the answer. It reports the p50 and
// p99 of the single-request latencies beside the mean.
func BenchmarkHandler(b *testing.B) {
	qwen, deepseek := pt.Master("qwen-4", 4), pt.Master("deepseek-16", 16)
	denied := pt.VM("chat", 0, 0, qwen, pt.H100())
	denied.Spec.Template.Spec.Domain.Devices.GPUs = denied.Spec.Template.Spec.Domain.Devices.GPUs[:2]
	unlabelled := pt.VM("chat", 0, 0, qwen, pt.H100())
	unlabelled.Labels = nil
	unlabelled.Spec.Template.ObjectMeta.Labels = nil
	cases := []struct {
		name string
		req  admissionv1.AdmissionRequest
	}{
		{"vm-allowed", request(b, admissionv1.Create, pt.VM("chat", 0, 0, qwen, pt.H100()), nil)},
		{"vm-multinode-allowed", request(b, admissionv1.Create, pt.VM("big", 3, 1, deepseek, pt.H100()), nil)},
		{"vm-denied", request(b, admissionv1.Create, denied, nil)},
		{"vm-update-unchanged", request(b, admissionv1.Update, pt.VM("chat", 0, 0, qwen, pt.H100()), pt.VM("chat", 0, 0, qwen, pt.H100()))},
		{"vmi-allowed", request(b, admissionv1.Create, pt.VMI("chat", 0, 0, qwen, pt.H100()), nil)},
		{"job-allowed", request(b, admissionv1.Create, pt.Job("chat", qwen, "aws.h100"), nil)},
		{"master-allowed", request(b, admissionv1.Create, deepseek, nil)},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			m, err := webhook.NewMetrics(prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			mux := webhooktest.Mux(b, pt.Store(), m, nil)
			body, path := reviewBody(b, tc.req), pathOfKind(tc.req.Kind.Kind)
			var lat []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				start := time.Now()
				mux.ServeHTTP(rec, r)
				lat = append(lat, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("HTTP %d", rec.Code)
				}
			}
			reportPercentiles(b, lat)
		})
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}
