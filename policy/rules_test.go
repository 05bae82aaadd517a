package policy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
)

// TestJobNameLimit: the limit a job's name is held to is the one its VM names impose, 57
// characters for up to 10 replicas of up to 10 nodes, fewer beyond; a name of 58 to 63
// characters, which the DNS label rule alone would pass, is refused where it is checked, with
// the real limit.
func TestJobNameLimit(t *testing.T) {
	name := func(n int) string { return "a" + strings.Repeat("b", n-1) }
	path := field.NewPath("metadata", "name")
	assert.Equal(t, 57, policy.JobNameMaxLength)
	cases := []struct {
		name            string
		replicas, nodes int32
		want            string
	}{
		{name(57), 10, 10, ""},
		{name(58), 1, 1, "must be at most 57 characters (it has 58): it names the job's VMs, <job>-r<replica>-n<node>, up to <job>-r0-n0, and a VM name is at most 63"},
		{name(63), 2, 1, "must be at most 57 characters (it has 63)"},
		{name(57), 11, 1, "must be at most 56 characters (it has 57)"},
		{name(56), 100, 16, "must be at most 55 characters (it has 56)"},
		{"7b", 1, 1, "must be lower-case letters, digits and '-', starting with a letter"},
		{"chat-", 1, 1, "starting with a letter and ending with a letter or digit"},
		{"Chat", 1, 1, "lower-case"},
	}
	for _, tc := range cases {
		errs := policy.CheckJobName(path, tc.name, tc.replicas, tc.nodes)
		if tc.want == "" {
			assert.Empty(t, errs, tc.name)
			continue
		}
		require.NotEmpty(t, errs, tc.name)
		assert.Contains(t, fielderr.Join(errs), tc.want, tc.name)
	}
	// Every name the rule passes gives valid VM and Service names.
	for _, n := range []string{name(57), "a", "a-1", "x9"} {
		require.Empty(t, policy.CheckJobName(path, n, 10, 10))
		assert.Empty(t, validation.IsDNS1123Label(policy.VMName(n, 9, 9)), n)
		assert.Empty(t, validation.IsDNS1035Label(n+"-r9"), n)
	}

	// The webhook holds a job to it with the job's own layout.
	job := pt.Job(name(58), pt.Master("qwen-4", 4), "aws.h100")
	assertReview(t, pt.Store(), job, `metadata.name is "`+name(58)+`": must be at most 57 characters (it has 58)`)
}

// TestJobNameShape holds the rule's shape check to apimachinery's DNS-1035 label below the
// length limit.
func TestJobNameShape(t *testing.T) {
	for _, s := range []string{"", "a", "a-b", "-a", "a-", "7b", "b7", "A", "a_b", "a.b", "é", strings.Repeat("a", 57)} {
		ours := len(policy.CheckJobName(field.NewPath("n"), s, 1, 1)) == 0
		assert.Equal(t, len(validation.IsDNS1035Label(s)) == 0, ours, "%q", s)
	}
}

// TestNodeTypeOffers: where a rule refuses a job's node type, it offers those the tenant may
// use, and never one it may not.
func TestNodeTypeOffers(t *testing.T) {
	qwen := pt.Master("qwen-4", 4)
	store, err := policy.NewStore(append(pt.Objects(), pt.Tenant("initech", []string{}))...)
	require.NoError(t, err)
	job := func(tenant, nodeType string) *v1alpha1.ManagedInferenceJob {
		j := pt.Job("chat", qwen, nodeType)
		j.Labels[v1alpha1.LabelTenant], j.Namespace = tenant, tenant
		return j
	}
	cases := []struct {
		name, tenant, nodeType, want, never string
	}{
		{"missing, the tenant's own", "acme", "", "spec.nodeType is missing: must name a NodeType; Tenant acme may use: aws.h100, aws.l40s", "gcp.l4"},
		{"missing, a tenant that may use none", "initech", "", "must name a NodeType; Tenant initech may use no node type (allowedNodeTypes: [])", "aws.h100"},
		{"unknown, close to an allowed one", "acme", "aws.h10", `spec.nodeType is "aws.h10": no NodeType "aws.h10" in the policy data; did you mean aws.h100?`, "gcp.l4"},
		{"unknown, close only to one not allowed", "acme", "gcp.l44", "; Tenant acme may use: aws.h100, aws.l40s", "gcp.l4;"},
		{"unknown, a tenant that may use none", "initech", "aws.h10", "may use no node type", "did you mean"},
		{"not allowed", "acme", "gcp.l4", `spec.nodeType is "gcp.l4": not allowed for Tenant acme (allowedNodeTypes: [aws.*]); Tenant acme may use: aws.h100, aws.l40s`, ""},
		{"not allowed to a tenant that may use none", "initech", "aws.h100", "not allowed for Tenant initech (allowedNodeTypes: [] (no node type)); Tenant initech may use no node type", "may use: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := policy.Review(context.Background(), store, job(tc.tenant, tc.nodeType))
			require.NoError(t, err)
			assert.Contains(t, res.Message(), tc.want)
			if tc.never != "" {
				assert.NotContains(t, res.Message(), tc.never)
			}
		})
	}
}

func TestCheckTenant(t *testing.T) {
	tn := pt.Tenant("acme", []string{"aws.*", "aws.*", "Bad_Name", "metal3.gpu-h100"})
	tn.Spec.Quota = &v1alpha1.Quota{GPUs: -1, ReplicasPerJob: -2}
	tn.Spec.Models = []string{"Qwen/*", "qwen/*", "*", "a b"}
	assert.Equal(t, `spec.allowedNodeTypes[1] is "aws.*": must be listed once; `+
		`spec.allowedNodeTypes[2] is "Bad_Name": must be a node type name (metal3.gpu-h100) or a provider wildcard (metal3.*); `+
		`spec.models[1] is "qwen/*": must be listed once; `+
		`spec.models[2] is "*": must name one model, or end in /* to offer every model of an organisation; `+
		`spec.models[3] is "a b": must be a model id (Qwen/Qwen3-32B), a ModelMaster name, or every model of an organisation (Qwen/*); `+
		`spec.quota.gpus is -1: must be 0 (the tier's figure) or more; spec.quota.replicasPerJob is -2: must be 0 (the tier's figure) or more`,
		fielderr.Join(policy.CheckTenant(tn)))
	tn.Spec.Models = []string{}
	tn.Spec.Quota, tn.Spec.AllowedNodeTypes = nil, nil
	assert.Equal(t, `spec.models is []: must list at least one model, or be left out to offer every model`, fielderr.Join(policy.CheckTenant(tn)))
}

// TestKinds: every kind of the table has its Go type in the scheme, the reviewed ones come
// first with rules, and rules given an object of another kind say so instead of panicking.
func TestKinds(t *testing.T) {
	reviewed := policy.Reviewed()
	require.Len(t, reviewed, 4)
	for i, k := range policy.Kinds {
		obj := k.New()
		_, ok := policy.KindOf(k.GroupKind())
		assert.True(t, ok)
		assert.Equal(t, i < len(reviewed), k.Rules != nil, k.Kind)
		decoded, err := policy.Decode(k.GroupKind(), []byte(`{}`), true)
		require.NoError(t, err)
		assert.IsType(t, obj, decoded)
	}
	_, err := reviewed[0].Rules.Review(context.Background(), pt.Store(), &kubevirtv1.VirtualMachine{})
	assert.ErrorContains(t, err, "where these rules read a *v1alpha1.ManagedInferenceJob")
	assert.False(t, reviewed[0].Rules.Unchanged(&kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachine{}))
}
