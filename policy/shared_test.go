package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
)

// TestSharedCallAllowed: only a provider's endpoint takes another tenant's key, and only for
// a model that tenant's catalogue offers; a tenant's own endpoints are not "shared" with it.
func TestSharedCallAllowed(t *testing.T) {
	tenant := func(name string, provider bool, models ...string) *v1alpha1.Tenant {
		x := pt.Tenant(name, nil)
		x.Spec.Provider, x.Spec.Models = provider, models
		return x
	}
	platform := tenant("platform", true, "Qwen/*")
	acme := tenant("acme", false, "Qwen/*", "meta-llama/*")
	globex := tenant("globex", false, "Qwen/Qwen3-32B")
	initech := tenant("initech", false, "meta-llama/*")
	everything := tenant("hooli", false)
	for _, c := range []struct {
		name             string
		provider, caller *v1alpha1.Tenant
		model            string
		want             bool
	}{
		{"a wildcard of the catalogue", platform, acme, "Qwen/Qwen3-32B", true},
		{"an exact model, in another case", platform, globex, "qwen/qwen3-32b", true},
		{"a catalogue without it", platform, initech, "Qwen/Qwen3-32B", false},
		{"no catalogue: every model", platform, everything, "Qwen/Qwen3-32B", true},
		{"a dedicated tenant's endpoint", acme, globex, "Qwen/Qwen3-32B", false},
		{"the provider itself", platform, platform, "Qwen/Qwen3-32B", false},
		{"an endpoint of no known model", platform, acme, "", false},
		{"an unknown caller", platform, nil, "Qwen/Qwen3-32B", false},
		{"an unknown provider", nil, acme, "Qwen/Qwen3-32B", false},
	} {
		assert.Equal(t, c.want, policy.SharedCallAllowed(c.provider, c.caller, c.model), c.name)
	}
}

// TestProviderJob: a provider's job names its model and keeps its API key.
func TestProviderJob(t *testing.T) {
	m := pt.Master("qwen3-32b", 1)
	m.Spec.Model = "Qwen/Qwen3-32B"
	off := false
	for _, c := range []struct {
		name     string
		provider bool
		edit     func(*v1alpha1.ManagedInferenceJob)
		want     []string
	}{
		{"a provider's job", true, func(*v1alpha1.ManagedInferenceJob) {}, nil},
		{"a provider's job without a key", true, func(j *v1alpha1.ManagedInferenceJob) { j.Spec.RequireAPIKey = &off },
			[]string{`spec.requireAPIKey: Invalid value: false: must be true: Tenant acme is a provider of shared models, and a call to its endpoints is charged to the key that makes it`}},
		{"a provider's job naming no model", true, func(j *v1alpha1.ManagedInferenceJob) { j.Spec.Model = "" },
			[]string{`spec.model: Required value: Tenant acme is a provider of shared models: its jobs name the model they share, as other tenants' catalogues name it`}},
		{"a dedicated tenant's keyless job", false, func(j *v1alpha1.ManagedInferenceJob) { j.Spec.RequireAPIKey = &off }, nil},
	} {
		tn := pt.Acme()
		tn.Spec.Provider = c.provider
		job := pt.Job("chat", m, pt.H100().Name)
		c.edit(job)
		var got []string
		for _, e := range policy.CheckJobSpec(job, policy.Data{Tenant: tn, Master: m, NodeType: pt.H100()}) {
			if e.Field == "spec.requireAPIKey" || e.Field == "spec.model" {
				got = append(got, e.Error())
			}
		}
		assert.Equal(t, c.want, got, c.name)
	}
}
