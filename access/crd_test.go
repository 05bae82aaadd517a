package access

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

var clusters kubeenv.Servers

func TestMain(m *testing.M) { os.Exit(clusters.Main(m)) }

// spec.access against the Tenant CRD in a real API server (strict field validation): the CRD
// holds it to one of group and user and a known role, as the loader does.
func TestTenantAccessCRD(t *testing.T) {
	env := clusters.Get(t, "crd")
	ctx := context.Background()
	tenant := func(access string) []byte {
		return []byte("apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  tier: h100-dedicated\n  access:\n" + access)
	}
	errs := env.DryRunYAML(ctx, tenant("  - {group: acme-ml, role: developer}\n  - {user: ops@acme.example, role: admin}\n"))
	require.Empty(t, errs)
	for access, want := range map[string]string{
		"  - {role: viewer}\n":                                 "exactly one of group and user",
		"  - {group: g, user: u@acme.example, role: viewer}\n": "exactly one of group and user",
		"  - {group: g, role: owner}\n":                        `Unsupported value: "owner"`,
		"  - {group: g, role: viewer, team: x}\n":              `unknown field "spec.access[0].team"`,
	} {
		errs := env.DryRunYAML(ctx, tenant(access))
		require.Len(t, errs, 1, access)
		assert.ErrorContains(t, errs[0], want, access)
	}
}
