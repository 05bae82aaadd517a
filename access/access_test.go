package access

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

func tenant(name string, access ...v1alpha1.TenantAccess) *v1alpha1.Tenant {
	return &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.TenantSpec{Access: access}}
}

// The bundled-example shape: acme's groups and one user, globex's admins.
var (
	acme = tenant("acme",
		v1alpha1.TenantAccess{Group: "acme-ml", Role: v1alpha1.RoleDeveloper},
		v1alpha1.TenantAccess{Group: "acme-all", Role: v1alpha1.RoleViewer},
		v1alpha1.TenantAccess{User: "Ops@Acme.example", Role: v1alpha1.RoleAdmin})
	globex = tenant("globex", v1alpha1.TenantAccess{Group: "globex-admins", Role: v1alpha1.RoleAdmin})
	policy = Policy{AdminGroups: []string{"platform-admins"}}
)

func TestDecide(t *testing.T) {
	dana := Identity{Email: "dana@acme.example", EmailVerified: true, Groups: []string{"acme-all", "acme-ml"}}
	vera := Identity{Email: "vera@acme.example", EmailVerified: true, Groups: []string{"acme-all"}}
	ops := Identity{Email: "ops@acme.example", EmailVerified: true}
	opsUnverified := Identity{Email: "ops@acme.example"}
	gina := Identity{Email: "gina@globex.example", EmailVerified: true, Groups: []string{"globex-admins"}}
	operator := Identity{Email: "root@platform.example", Groups: []string{"platform-admins"}}
	cases := []struct {
		name     string
		id       Identity
		tenant   string
		action   Action
		allowed  bool
		role     v1alpha1.TenantRole
		reason   string
		operator bool
	}{
		{"developer reads", dana, "acme", Read, true, v1alpha1.RoleDeveloper, `role developer in tenant "acme"`, false},
		{"developer creates a job (strongest of its groups)", dana, "acme", WriteJobs, true, v1alpha1.RoleDeveloper, "", false},
		{"developer mints a key", dana, "acme", WriteKeys, true, v1alpha1.RoleDeveloper, "", false},
		{"developer may not scale", dana, "acme", ScaleJobs, false, v1alpha1.RoleDeveloper, `your role in tenant "acme" is developer; changing a job's replicas needs admin`, false},
		{"viewer reads", vera, "acme", Read, true, v1alpha1.RoleViewer, "", false},
		{"viewer may not create a job", vera, "acme", WriteJobs, false, v1alpha1.RoleViewer, `your role in tenant "acme" is viewer; creating, restarting or deleting a job needs developer`, false},
		{"user by verified email, any case", ops, "acme", RequestQuota, true, v1alpha1.RoleAdmin, "", false},
		{"an unverified email names nobody", opsUnverified, "acme", Read, false, "", `you have no role in tenant "acme"`, false},
		{"acme's member is denied globex", dana, "globex", Read, false, "", `you have no role in tenant "globex"`, false},
		{"globex's admin scales globex", gina, "globex", ScaleJobs, true, v1alpha1.RoleAdmin, "", false},
		{"operator writes any tenant", operator, "acme", ScaleJobs, true, v1alpha1.RoleAdmin, "operator (admin group)", true},
		{"a tenant's admin may not change its tier or quota", ops, "acme", ManageTenant, false, v1alpha1.RoleAdmin,
			`changing a tenant's tier or quota is for the operator (its admin groups), not a role of tenant "acme"`, false},
		{"the operator changes any tenant's tier or quota", operator, "globex", ManageTenant, true, v1alpha1.RoleAdmin, "operator (admin group)", true},
		{"unknown action is refused, even to the operator", operator, "acme", Action("drop-tables"), false, v1alpha1.RoleAdmin, `unknown action "drop-tables"`, true},
	}
	tenants := map[string]*v1alpha1.Tenant{"acme": acme, "globex": globex}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := policy.Decide(tc.id, tc.tenant, tenants[tc.tenant], tc.action)
			assert.Equal(t, tc.allowed, d.Allowed, d.Reason)
			assert.Equal(t, tc.role, d.Role)
			assert.Equal(t, tc.operator, d.Operator)
			if tc.reason != "" {
				assert.Equal(t, tc.reason, d.Reason)
			}
		})
	}
}

// A refusal to someone with no role says the same for a tenant that exists and one that does
// not: the answer never tells another customer's tenants apart from nothing.
func TestDecideRevealsNoTenant(t *testing.T) {
	dana := Identity{Email: "dana@acme.example", EmailVerified: true, Groups: []string{"acme-ml"}}
	for _, a := range []Action{Read, WriteJobs, ScaleJobs} {
		exists := policy.Decide(dana, "globex", globex, a)
		missing := policy.Decide(dana, "globex", nil, a)
		assert.False(t, exists.Allowed)
		assert.Equal(t, exists, missing, "action %s", a)
	}
	// The operator is told (its role holds with no tenant, so the handler answers 404).
	op := policy.Decide(Identity{Groups: []string{"platform-admins"}}, "umbrella", nil, Read)
	assert.True(t, op.Allowed)
	assert.True(t, op.Operator)
}

func TestRolesOrdered(t *testing.T) {
	// Each role can do everything the one before it can.
	for _, a := range []Action{Read, WriteJobs, WriteKeys, ScaleJobs, RequestQuota} {
		need := Needs(a)
		for _, r := range v1alpha1.TenantRoles {
			id := Identity{Groups: []string{"g"}}
			d := policy.Decide(id, "t", tenant("t", v1alpha1.TenantAccess{Group: "g", Role: r}), a)
			assert.Equal(t, rank(r) >= rank(need), d.Allowed, "role %s, action %s", r, a)
		}
	}
}

func TestMemberships(t *testing.T) {
	dana := Identity{Email: "dana@acme.example", EmailVerified: true, Groups: []string{"acme-ml"}}
	all := []*v1alpha1.Tenant{acme, globex}
	assert.Equal(t, []Membership{{"acme", v1alpha1.RoleDeveloper}}, policy.Memberships(dana, all))
	assert.Equal(t, []Membership{{"acme", v1alpha1.RoleAdmin}, {"globex", v1alpha1.RoleAdmin}},
		policy.Memberships(Identity{Groups: []string{"platform-admins"}}, all))
	assert.Empty(t, policy.Memberships(Identity{Email: "x@y.example", EmailVerified: true}, all))
}

func TestAuthor(t *testing.T) {
	name, email := Identity{Name: "Dana", Email: "dana@acme.example"}.Author()
	assert.Equal(t, []string{"Dana", "dana@acme.example"}, []string{name, email})
	name, email = Identity{Issuer: "https://dex.example/dex", Subject: "CgRkYW5h"}.Author()
	assert.Equal(t, []string{"CgRkYW5h@dex.example", "CgRkYW5h@dex.example"}, []string{name, email})
}

func TestStringListClaim(t *testing.T) {
	for raw, want := range map[string][]string{
		`["a","b"]`: {"a", "b"}, `"a"`: {"a"}, `null`: nil, ``: nil,
	} {
		got, err := stringList([]byte(raw))
		assert.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
	}
	_, err := stringList([]byte(`{"a":1}`))
	assert.Error(t, err)
}
