package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TierSpec is a product tier the operator sells (h100-dedicated, l40s-shared): the node types
// its tenants may claim, their quota, the default limits of their API keys, and the models it
// offers. A tenant names its tier in spec.tier and takes all of this from it; what the tenant
// file says itself may narrow the node types and replace the quota and limits, field by field.
type TierSpec struct {
	// DisplayName is the tier's name for people (the console, the business page).
	// +optional
	DisplayName string `json:"displayName,omitempty"`
	// Description says what the tier is, for people.
	// +optional
	Description string `json:"description,omitempty"`
	// NodeTypes lists the node types the tier's tenants may claim: exact names or
	// "<provider>.*" wildcards. An empty list allows none (a tier that only calls shared
	// models). A tenant's own allowedNodeTypes may narrow it, never widen it.
	// +listType=atomic
	NodeTypes []string `json:"nodeTypes"`
	// Quota is what each tenant of the tier may claim at once (0 or absent: no limit).
	// +optional
	Quota *Quota `json:"quota,omitempty"`
	// Limits are the tier's tenants' limits, all their keys together, at the gateway: the
	// default of each field of a tenant's spec.limits.
	// +optional
	Limits *TenantLimits `json:"limits,omitempty"`
	// KeyLimits are the default limits of every API key of the tier's tenants: a key's own
	// limit of a kind replaces the default of that kind.
	// +optional
	KeyLimits *RateLimits `json:"keyLimits,omitempty"`
	// Models is the tier's model catalogue: the models (recipe model ids, ModelMaster names,
	// "<org>/*" for every recipe model of an organisation) its tenants may run. Absent: every
	// model the recipes and masters offer.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	// +optional
	Models []string `json:"models,omitempty"`
}

// Quota is what a tenant's jobs may claim together. On a Tier, 0 or absent is no limit; on a
// Tenant, 0 or absent keeps the tier's figure.
type Quota struct {
	// GPUs is the most GPUs the tenant's jobs may claim together (replicas x gpuCount summed).
	// +kubebuilder:validation:Minimum=0
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// Jobs is the most jobs the tenant may have.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Jobs int32 `json:"jobs,omitempty"`
	// ReplicasPerJob is the most replicas one job may have.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ReplicasPerJob int32 `json:"replicasPerJob,omitempty"`
}

// IsZero reports whether no figure is set (nil included).
func (q *Quota) IsZero() bool { return q == nil || *q == Quota{} }

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="GPU quota",type=integer,JSONPath=`.spec.quota.gpus`

// Tier is a product tier: the node types, quota, key limits and models its tenants get.
type Tier struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TierSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// TierList is a list of Tiers.
type TierList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tier `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Tier{}, &TierList{})
}
