// Package access decides what a signed-in caller of the product API may do with a tenant.
//
// Two parts, apart on purpose: a Verifier turns an OIDC bearer token into an Identity (go-oidc:
// issuer discovery, the provider's rotating keys, audience = the API's client id, a groups claim
// whose name is configurable), and Policy.Decide is a pure function of an Identity, a Tenant and
// an Action. The roles come from each tenant's spec.access in tenant.yaml (viewer, developer,
// admin, each able to do what the one before it can); members of the operator's admin groups
// read and write every tenant. Neither part knows HTTP handlers: the API's middleware calls
// Verify, then Decide, and writes the 401 or 403 itself.
package access

import (
	"fmt"
	"slices"
	"strings"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Action is something a caller asks to do with one tenant.
type Action string

const (
	// Read: list and get jobs, models, keys (never a key's secret), usage, endpoint health.
	Read Action = "read"
	// WriteJobs: create, restart and delete jobs.
	WriteJobs Action = "write-jobs"
	// WriteKeys: create and revoke API keys.
	WriteKeys Action = "write-keys"
	// ScaleJobs: change a job's replicas.
	ScaleJobs Action = "scale-jobs"
	// RequestQuota: ask the operator for more GPU quota.
	RequestQuota Action = "request-quota"
	// ManageTenant: change a tenant's tier or quota. The operator's alone: no role of
	// spec.access grants it.
	ManageTenant Action = "manage-tenant"
)

// needs is the weakest role that may take each action; an action missing here is refused.
var needs = map[Action]v1alpha1.TenantRole{
	Read:         v1alpha1.RoleViewer,
	WriteJobs:    v1alpha1.RoleDeveloper,
	WriteKeys:    v1alpha1.RoleDeveloper,
	ScaleJobs:    v1alpha1.RoleAdmin,
	RequestQuota: v1alpha1.RoleAdmin,
	ManageTenant: v1alpha1.RoleAdmin,
}

// operatorOnly are the actions no tenant role grants, only the operator's admin groups.
var operatorOnly = map[Action]bool{ManageTenant: true}

// Needs is the weakest role that may take the action ("" for an unknown action).
func Needs(a Action) v1alpha1.TenantRole { return needs[a] }

// rank orders the roles: 0 for none or an unknown role, then viewer, developer, admin.
func rank(r v1alpha1.TenantRole) int { return slices.Index(v1alpha1.TenantRoles, r) + 1 }

// Identity is who a verified token says the caller is.
type Identity struct {
	// Issuer and Subject identify the caller uniquely (the subject alone is unique per issuer).
	Issuer, Subject string
	// Email is the caller's address; it names a user in spec.access only when EmailVerified.
	Email         string
	EmailVerified bool
	// Name is the display name (the name claim, else preferred_username).
	Name string
	// Groups are the values of the configured groups claim.
	Groups []string
}

// Author is the name and email a commit made for the caller carries: the display name (else
// the email, else the subject) and the email (else the subject at the issuer's host, so that
// the commit still says who it was).
func (id Identity) Author() (name, email string) {
	email = id.Email
	if email == "" {
		host := strings.TrimPrefix(strings.TrimPrefix(id.Issuer, "https://"), "http://")
		host, _, _ = strings.Cut(host, "/")
		email = id.Subject + "@" + host
	}
	name = id.Name
	if name == "" {
		name = email
	}
	return name, email
}

// Policy is the operator's part of the rules: who reads and writes every tenant.
type Policy struct {
	// AdminGroups are the operator's groups: a member has the admin role in every tenant, and
	// is told when a tenant does not exist (others are not).
	AdminGroups []string
}

// Decision is the answer to one request.
type Decision struct {
	Allowed bool
	// Role is the caller's role in the tenant; "" when it has none.
	Role v1alpha1.TenantRole
	// Operator is true for a member of an admin group.
	Operator bool
	// Reason says why, in words fit for the caller: for someone with no role it is the same
	// whether or not the tenant exists, so a refusal never reveals another customer.
	Reason string
}

// IsOperator says whether the caller is in one of the operator's admin groups.
func (p Policy) IsOperator(id Identity) bool {
	for _, g := range id.Groups {
		if slices.Contains(p.AdminGroups, g) {
			return true
		}
	}
	return false
}

// RoleIn is the caller's strongest role in the tenant through its groups and its verified
// email ("" for none); an operator is admin everywhere. tenant may be nil (no such tenant).
func (p Policy) RoleIn(id Identity, tenant *v1alpha1.Tenant) v1alpha1.TenantRole {
	if p.IsOperator(id) {
		return v1alpha1.RoleAdmin
	}
	if tenant == nil {
		return ""
	}
	var best v1alpha1.TenantRole
	for _, a := range tenant.Spec.Access {
		if grants(a, id) && rank(a.Role) > rank(best) {
			best = a.Role
		}
	}
	return best
}

// grants says whether one spec.access entry names the caller.
func grants(a v1alpha1.TenantAccess, id Identity) bool {
	switch {
	case a.Group != "":
		return slices.Contains(id.Groups, a.Group)
	case a.User != "":
		// An unverified address could be anyone's: it names nobody.
		return id.EmailVerified && id.Email != "" && strings.EqualFold(a.User, id.Email)
	}
	return false
}

// Decide says whether the caller may take the action on the tenant, named by name (the
// request's) and given as tenant (nil when no tenant of that name exists). Pure: same inputs,
// same answer.
func (p Policy) Decide(id Identity, name string, tenant *v1alpha1.Tenant, a Action) Decision {
	need, known := needs[a]
	role := p.RoleIn(id, tenant)
	d := Decision{Role: role, Operator: p.IsOperator(id)}
	switch {
	case !known:
		d.Reason = fmt.Sprintf("unknown action %q", a)
	case role == "":
		d.Reason = fmt.Sprintf("you have no role in tenant %q", name)
	case operatorOnly[a] && !d.Operator:
		d.Reason = fmt.Sprintf("%s is for the operator (its admin groups), not a role of tenant %q", describe(a), name)
	case rank(role) < rank(need):
		d.Reason = fmt.Sprintf("your role in tenant %q is %s; %s needs %s", name, role, describe(a), need)
	default:
		d.Allowed = true
		d.Reason = fmt.Sprintf("role %s in tenant %q", role, name)
		if d.Operator {
			d.Reason = "operator (admin group)"
		}
	}
	return d
}

func describe(a Action) string {
	switch a {
	case Read:
		return "reading"
	case WriteJobs:
		return "creating, restarting or deleting a job"
	case WriteKeys:
		return "creating or revoking a key"
	case ScaleJobs:
		return "changing a job's replicas"
	case RequestQuota:
		return "requesting quota"
	case ManageTenant:
		return "changing a tenant's tier or quota"
	}
	return string(a)
}

// Membership is one tenant the caller may use, and its role there.
type Membership struct {
	Tenant string
	Role   v1alpha1.TenantRole
}

// Memberships lists the tenants the caller has a role in (every tenant for an operator), in
// the order given: what `GET /api/v1/me` shows.
func (p Policy) Memberships(id Identity, tenants []*v1alpha1.Tenant) []Membership {
	var out []Membership
	for _, t := range tenants {
		if r := p.RoleIn(id, t); r != "" {
			out = append(out, Membership{Tenant: t.Name, Role: r})
		}
	}
	return out
}
