package policy_test

import (
	"context"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
)

var fuzzKinds = []schema.GroupKind{
	policy.GroupKindJob, policy.GroupKindMaster, policy.GroupKindVM, policy.GroupKindVMI,
	policy.GroupKindTenant, policy.GroupKindNodeType,
}

// FuzzReview feeds arbitrary JSON, as any of the kinds the policy reads, through Decode and
// Review: malformed JSON, missing fields, huge numbers and wrong kinds must give a decode error
// or a result (a denial with a message when not allowed), never a panic.
func FuzzReview(f *testing.F) {
	qwen, deepseek := pt.Master("qwen-4", 4), pt.Master("deepseek-16", 16)
	for i, obj := range []client.Object{
		pt.Job("chat", qwen, "aws.h100"), qwen, pt.VM("chat", 0, 0, qwen, pt.H100()),
		pt.VMI("big", 1, 1, deepseek, pt.H100()), pt.Acme(), pt.H100(),
	} {
		raw, err := json.Marshal(obj)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), raw)
	}
	for _, s := range []string{
		`{}`, `null`, `[]`, `{"metadata":{"labels":{"inferplane.io/tenant":"acme"}}}`,
		`{"metadata":{"labels":{"inferplane.io/tenant":"acme"}},"spec":{"gpuCount":2147483648}}`,
		`{"metadata":{"labels":{"inferplane.io/tenant":"acme"}},"spec":{"perReplicaGPUCount":-1,"tensorParallelSize":2147483647,"pipelineParallelSize":2147483647,"args":["-tp"]}}`,
		`{"kind":"Pod","metadata":{"labels":{"inferplane.io/tenant":"acme"}}}`,
		`{"metadata":{"labels":{"inferplane.io/tenant":""}},"spec":{"template":null}}`,
		`{"metadata":{"labels":{"inferplane.io/tenant":"acme","inferplane.io/replica":"-1","inferplane.io/node-rank":"99999999999"}},"spec":{"template":{"metadata":{"labels":{"inferplane.io/tenant":"acme"}}}}}`,
		`{"spec":{"domain":{"devices":{"gpus":[{"name":"g"}]}}}`, `{"spec":`, "\x00",
	} {
		for i := range fuzzKinds {
			f.Add(uint8(i), []byte(s))
		}
	}
	store := pt.Store()
	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		k := fuzzKinds[int(kind)%len(fuzzKinds)]
		for _, strict := range []bool{false, true} {
			obj, err := policy.Decode(k, raw, strict)
			if err != nil {
				if err.Error() == "" {
					t.Fatal("a decode error without a message")
				}
				continue
			}
			res, err := policy.Review(context.Background(), store, obj)
			if err != nil {
				t.Fatalf("the in-memory store never fails, got %v", err)
			}
			if !res.Allowed() {
				if res.Message() == "" || !res.Guarded {
					t.Fatalf("a denial needs a message and a guarded object: %+v", res)
				}
				for _, e := range res.Errors {
					if e.Field == "" || e.Detail == "" {
						t.Fatalf("incomplete field error %+v", e)
					}
				}
			}
		}
	})
}
