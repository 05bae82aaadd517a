package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantSpec is one customer: its tier, the GPU node types it may claim, its quota, and where
// its GitOps state lives. The tier (a Tier of the inputs) gives the node types, the quota, the
// limits and the models; the tenant's own allowedNodeTypes may narrow the tier's, and its own
// quota and limits replace the tier's field by field. The Tenant rendered into the tenant's
// cluster (the webhook's policy data) carries the result.
type TenantSpec struct {
	// +optional
	DisplayName string `json:"displayName,omitempty"`
	// Tier names the tenant's product tier (e.g. h100-dedicated, l40s-shared): a Tier of the
	// inputs (tiers/<name>.yaml) when the inputs define tiers.
	// +kubebuilder:validation:MinLength=1
	Tier string `json:"tier"`
	// AllowedNodeTypes lists the node types the tenant may claim: exact names or
	// "<provider>.*" wildcards. Absent (null): the tier's node types (every node type when the
	// inputs define no tiers); an empty list allows none. It may narrow the tier's, never widen
	// them.
	// +nullable
	// +optional
	AllowedNodeTypes []string `json:"allowedNodeTypes"`
	// Models narrows the tier's model catalogue for this tenant: model ids, ModelMaster names or
	// "<org>/*", each one the tier offers. Absent: the tier's catalogue (every model when the
	// inputs define no tiers).
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	// +optional
	Models []string `json:"models,omitempty"`
	// Quota is what the tenant's jobs may claim together: each figure set here replaces the
	// tier's (0 or absent keeps it). The rendered Tenant carries the figures in force.
	// +optional
	Quota *Quota `json:"quota,omitempty"`
	// Git is the repository the tenant's rendered state is committed to.
	// +optional
	Git TenantGit `json:"git,omitempty"`
	// ArgoCD says how Argo CD reaches the tenant cluster.
	// +optional
	ArgoCD TenantArgoCD `json:"argoCD,omitempty"`
	// ServingAddress, when set, replaces the node types' servingAddress for all the tenant's
	// jobs (where the gateway reaches their serving nodes).
	// +optional
	ServingAddress *ServingAddress `json:"servingAddress,omitempty"`
	// Limits caps the requests and tokens of all the tenant's API keys together (each key may
	// have limits of its own as well) at the gateway. Each field set here replaces the tier's.
	// +optional
	Limits *TenantLimits `json:"limits,omitempty"`
	// Access says who may use the tenant through the product API: groups and users of the
	// identity provider, each with a role. Absent: nobody but the operator's admin group.
	// +listType=atomic
	// +optional
	Access []TenantAccess `json:"access,omitempty"`
}

// TenantRole is what a member may do with a tenant through the product API. Each role can do
// everything the one before it can.
// +kubebuilder:validation:Enum=viewer;developer;admin
type TenantRole string

const (
	// RoleViewer reads: jobs, models, keys (never their secrets), usage, endpoint health.
	RoleViewer TenantRole = "viewer"
	// RoleDeveloper also creates, restarts and deletes jobs and creates and revokes keys.
	RoleDeveloper TenantRole = "developer"
	// RoleAdmin also changes a job's replicas and requests quota.
	RoleAdmin TenantRole = "admin"
)

// TenantRoles are the roles, weakest first.
var TenantRoles = []TenantRole{RoleViewer, RoleDeveloper, RoleAdmin}

// TenantAccess gives a group or a user (exactly one of the two) a role in the tenant.
// +kubebuilder:validation:XValidation:rule="has(self.group) != has(self.user)",message="exactly one of group and user"
type TenantAccess struct {
	// Group is a group as the identity provider's groups claim names it.
	// +kubebuilder:validation:MinLength=1
	// +optional
	Group string `json:"group,omitempty"`
	// User is a user's email address, as the identity provider's verified email claim says it.
	// +kubebuilder:validation:MinLength=1
	// +optional
	User string `json:"user,omitempty"`
	// Role is what the group's members or the user may do.
	Role TenantRole `json:"role"`
}

// TenantGit is a tenant's GitOps repository.
type TenantGit struct {
	// URL is a remote URL (https://, ssh://, file://) to push to. Empty: the output folder of
	// the tenant is itself the repository (the embedded default).
	// +optional
	URL string `json:"url,omitempty"`
	// Branch defaults to main.
	// +optional
	Branch string `json:"branch,omitempty"`
	// Auth names environment variables that hold push credentials, so that no secret is ever
	// written in a tenant file.
	// +optional
	Auth *GitAuth `json:"auth,omitempty"`
}

// GitAuth names the environment variables that hold HTTP basic credentials for a push.
type GitAuth struct {
	// +optional
	UsernameEnv string `json:"usernameEnv,omitempty"`
	// +optional
	PasswordEnv string `json:"passwordEnv,omitempty"`
}

// TenantArgoCD configures the Argo CD side of a tenant.
type TenantArgoCD struct {
	// Connector is the vCluster Platform Argo CD connector (integrations.argoCD.connector).
	// +optional
	Connector string `json:"connector,omitempty"`
	// Namespace is where Argo CD runs on the management cluster; defaults to argocd.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Destination is the Argo CD cluster name of the tenant cluster; defaults to the tenant name.
	// +optional
	Destination string `json:"destination,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipt
// +kubebuilder:printcolumn:name="Tier",type=string,JSONPath=`.spec.tier`
// +kubebuilder:printcolumn:name="GPU quota",type=integer,JSONPath=`.spec.quota.gpus`

// Tenant is a customer with its own tenant cluster.
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TenantSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// TenantList is a list of Tenants.
type TenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tenant `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Tenant{}, &TenantList{})
}
