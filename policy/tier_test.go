package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
)

func tier(nodeTypes, models []string, q *v1alpha1.Quota) *v1alpha1.Tier {
	t := &v1alpha1.Tier{Spec: v1alpha1.TierSpec{NodeTypes: nodeTypes, Models: models, Quota: q}}
	t.Name = "h100-dedicated"
	return t
}

// TestApplyTier: a tenant takes its tier's node types, models, quota and limits; its own
// lists may narrow the tier's, never widen them (a field error at the entry that would), and
// its own quota and limit figures replace the tier's one by one.
func TestApplyTier(t *testing.T) {
	h100 := tier([]string{"metal3.gpu-h100"}, []string{"Qwen/*", "mistral-small-24b"}, &v1alpha1.Quota{GPUs: 8, Jobs: 4})
	metal3 := tier([]string{"metal3.*"}, nil, nil)
	cases := []struct {
		name            string
		tier            *v1alpha1.Tier
		allowed, models []string
		quota           *v1alpha1.Quota
		wantAllowed     []string
		wantModels      []string
		wantQuota       *v1alpha1.Quota
		wantErr         string
	}{
		{"the tier's lists when the tenant has none", h100, nil, nil, nil,
			[]string{"metal3.gpu-h100"}, []string{"Qwen/*", "mistral-small-24b"}, &v1alpha1.Quota{GPUs: 8, Jobs: 4}, ""},
		{"an empty list narrows to none", h100, []string{}, nil, nil,
			[]string{}, []string{"Qwen/*", "mistral-small-24b"}, &v1alpha1.Quota{GPUs: 8, Jobs: 4}, ""},
		{"a name under the tier's wildcard narrows it", metal3, []string{"metal3.gpu-h200"}, []string{"Qwen/Qwen3-32B"}, nil,
			[]string{"metal3.gpu-h200"}, []string{"Qwen/Qwen3-32B"}, nil, ""},
		{"the same wildcard is no widening", metal3, []string{"metal3.*"}, nil, nil, []string{"metal3.*"}, nil, nil, ""},
		{"a model under the tier's organisation", h100, nil, []string{"Qwen/Qwen3-32B"}, nil,
			[]string{"metal3.gpu-h100"}, []string{"Qwen/Qwen3-32B"}, &v1alpha1.Quota{GPUs: 8, Jobs: 4}, ""},
		{"a node type the tier lacks", h100, []string{"metal3.gpu-h100", "metal3.gpu-h200"}, nil, nil,
			[]string{"metal3.gpu-h100"}, []string{"Qwen/*", "mistral-small-24b"}, &v1alpha1.Quota{GPUs: 8, Jobs: 4},
			`spec.allowedNodeTypes[1] is "metal3.gpu-h200": must be within Tier h100-dedicated's node types (metal3.gpu-h100): a tenant's list may narrow its tier's, never widen it`},
		{"a wildcard over the tier's names", h100, []string{"metal3.*"}, nil, nil,
			[]string{"metal3.gpu-h100"}, []string{"Qwen/*", "mistral-small-24b"}, &v1alpha1.Quota{GPUs: 8, Jobs: 4},
			`spec.allowedNodeTypes[0] is "metal3.*": must be within Tier h100-dedicated's node types (metal3.gpu-h100): a tenant's list may narrow its tier's, never widen it`},
		{"a model the tier does not offer", h100, nil, []string{"meta-llama/*"}, nil,
			[]string{"metal3.gpu-h100"}, []string{"Qwen/*", "mistral-small-24b"}, &v1alpha1.Quota{GPUs: 8, Jobs: 4},
			`spec.models[0] is "meta-llama/*": must be within Tier h100-dedicated's models (Qwen/*, mistral-small-24b): a tenant's list may narrow its tier's, never widen it`},
		{"the tenant's figures replace the tier's, one by one", h100, nil, nil, &v1alpha1.Quota{GPUs: 16, ReplicasPerJob: 2},
			[]string{"metal3.gpu-h100"}, []string{"Qwen/*", "mistral-small-24b"}, &v1alpha1.Quota{GPUs: 16, Jobs: 4, ReplicasPerJob: 2}, ""},
		{"a tier of no limits, the tenant's", metal3, nil, nil, &v1alpha1.Quota{Jobs: 2},
			[]string{"metal3.*"}, nil, &v1alpha1.Quota{Jobs: 2}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tn := pt.Tenant("acme", c.allowed)
			tn.Spec.Models, tn.Spec.Quota = c.models, c.quota
			got, errs := policy.ApplyTier(tn, c.tier)
			assert.Equal(t, c.wantErr, fielderr.Join(errs))
			assert.Equal(t, c.wantAllowed, got.Spec.AllowedNodeTypes)
			assert.Equal(t, c.wantModels, got.Spec.Models)
			assert.Equal(t, c.wantQuota, got.Spec.Quota)
			assert.Equal(t, c.allowed, tn.Spec.AllowedNodeTypes, "the tenant given is left as it was")
		})
	}
}

// TestApplyTierLimits: each of the tenant's limits replaces the tier's of its kind; the rest
// are the tier's.
func TestApplyTierLimits(t *testing.T) {
	tr := tier(nil, nil, nil)
	tr.Spec.Limits = &v1alpha1.TenantLimits{RateLimits: v1alpha1.RateLimits{
		RequestsPerMinute: &v1alpha1.Limit{Value: 600}, TokensPerDay: &v1alpha1.Limit{Value: 1000, Mode: v1alpha1.LimitSoft}},
		TimeZone: "Europe/Berlin"}
	tn := pt.Tenant("acme", nil)
	got, _ := policy.ApplyTier(tn, tr)
	assert.Equal(t, tr.Spec.Limits, got.Spec.Limits, "the tier's when the tenant has none")
	tn.Spec.Limits = &v1alpha1.TenantLimits{RateLimits: v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 60}}, OnStoreDown: v1alpha1.StoreDownClosed}
	got, _ = policy.ApplyTier(tn, tr)
	assert.Equal(t, &v1alpha1.TenantLimits{RateLimits: v1alpha1.RateLimits{
		RequestsPerMinute: &v1alpha1.Limit{Value: 60}, TokensPerDay: &v1alpha1.Limit{Value: 1000, Mode: v1alpha1.LimitSoft}},
		TimeZone: "Europe/Berlin", OnStoreDown: v1alpha1.StoreDownClosed}, got.Spec.Limits)
	assert.Equal(t, int64(600), tr.Spec.Limits.RequestsPerMinute.Value, "the tier is left as it was")
}

// TestModelOffered: a catalogue of ids (any case), master names and <org>/*.
func TestModelOffered(t *testing.T) {
	cat := []string{"Qwen/*", "mistral-small-24b", "nvidia/parakeet-tdt-0.6b-v3"}
	for model, want := range map[string]bool{
		"Qwen/Qwen3-32B": true, "qwen/qwen3-32b": true, "Qwen/": false, "QwenX/a": false,
		"mistral-small-24b": true, "mistral-small": false, "nvidia/parakeet-tdt-0.6b-v3": true,
		"meta-llama/Llama-3.3-70B-Instruct": false, "": false,
	} {
		assert.Equal(t, want, policy.ModelOffered(cat, model), model)
	}
	assert.True(t, policy.ModelOffered(nil, "anything"), "no catalogue offers everything")

	pinned := &v1alpha1.ModelMaster{Spec: v1alpha1.ModelMasterSpec{Model: "Qwen/Qwen3-32B"}}
	pinned.Name = "qwen3-32b-pinned"
	assert.True(t, policy.JobModelOffered(cat, "qwen3-32b-pinned", pinned), "a master the operator pinned from a model of the catalogue")
	pinned.Spec.Model = "moonshotai/Kimi-K2-Instruct"
	assert.False(t, policy.JobModelOffered(cat, "qwen3-32b-pinned", pinned))
	assert.True(t, policy.JobModelOffered(cat, "mistral-small-24b", nil), "a master named in the catalogue")
}

// TestCheckTier: the tier's lists and figures, as the tenant's are checked.
func TestCheckTier(t *testing.T) {
	tr := tier([]string{"metal3.*", "metal3.*", "x_y"}, []string{"Qwen/*", "Qwen/*/*"}, &v1alpha1.Quota{Jobs: -1})
	assert.Equal(t, `spec.nodeTypes[1] is "metal3.*": must be listed once; `+
		`spec.nodeTypes[2] is "x_y": must be a node type name (metal3.gpu-h100) or a provider wildcard (metal3.*); `+
		`spec.models[1] is "Qwen/*/*": must be <org>/* to offer every recipe model of an organisation (Qwen/*); `+
		`spec.quota.jobs is -1: must be 0 (no limit) or more`, fielderr.Join(policy.CheckTier(tr)))
}
