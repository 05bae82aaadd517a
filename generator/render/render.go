// Package render turns a tenant's plan into the files of its GitOps repository. It is pure: no
// file system, git or network access; the same plan always gives the same bytes.
package render

import (
	"github.com/inferplane/inferplane/generator/plan"
)

// Files is a rendered repository: slash-separated paths relative to the repo root, to content.
type Files map[string][]byte

// Options are the settings that are not part of the inputs.
type Options struct {
	// RepoURL is the URL Argo CD pulls the tenant's repo from (the tenant's git URL, or a
	// placeholder for the embedded default).
	RepoURL string
	// Revision is the branch Argo CD tracks.
	Revision string
}

// Tenant renders one tenant's repository.
func Tenant(tp plan.TenantPlan, opts Options) (Files, error) {
	panic("PLACEHOLDER: built by the render helper")
}
