package policy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// SharedCallAllowed reports whether a key of tenant caller may call an endpoint of tenant
// provider that serves model: provider must be a provider of the shared serving tier
// (spec.provider), caller another tenant, and caller's catalogue in force (its tier's,
// narrowed by its own list: ApplyTier) must offer the model. Both tenants are as in force.
// Every other endpoint is dedicated: only its own tenant's keys reach it.
func SharedCallAllowed(provider, caller *v1alpha1.Tenant, model string) bool {
	return provider != nil && caller != nil && provider.Spec.Provider && caller.Name != provider.Name &&
		model != "" && ModelOffered(caller.Spec.Models, model)
}

// checkProviderJob is the rule on a provider's job: it serves a named model of the inputs
// (what other tenants' catalogues offer, and what they are charged for) behind an API key,
// since a shared call is charged to the key that makes it.
func checkProviderJob(job *v1alpha1.ManagedInferenceJob, t *v1alpha1.Tenant) field.ErrorList {
	if t == nil || !t.Spec.Provider {
		return nil
	}
	var out field.ErrorList
	s := &job.Spec
	if s.RequireAPIKey != nil && !*s.RequireAPIKey {
		out = append(out, field.Invalid(specPath.Child("requireAPIKey"), false, fmt.Sprintf(
			"must be true: Tenant %s is a provider of shared models, and a call to its endpoints is charged to the key that makes it", t.Name)))
	}
	if s.Model == "" {
		out = append(out, field.Required(specPath.Child("model"), fmt.Sprintf(
			"Tenant %s is a provider of shared models: its jobs name the model they share, as other tenants' catalogues name it", t.Name)))
	}
	return out
}
