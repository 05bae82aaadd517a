package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindAPIKey is the kind of the API key objects the Kubernetes key store keeps.
const KindAPIKey = "APIKey"

// APIKeySpec is one API key as the key store keeps it: who it belongs to and the HMAC of the
// key, never the key itself. The object's name is the key's public id.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.revokedAt) || (has(self.revokedAt) && self.revokedAt == oldSelf.revokedAt)",message="revokedAt cannot be unset or changed once set"
type APIKeySpec struct {
	// Tenant is the tenant whose endpoints the key may call.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tenant is immutable"
	Tenant string `json:"tenant"`
	// Endpoint limits the key to one job endpoint of the tenant; empty allows all of them.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="endpoint is immutable"
	Endpoint string `json:"endpoint,omitempty"`
	// DisplayName is a free-form label for people (e.g. "ci pipeline").
	// +optional
	// +kubebuilder:validation:MaxLength=256
	DisplayName string `json:"displayName,omitempty"`
	// Hash is the lowercase hex HMAC-SHA256 of the key under the server secret.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="hash is immutable"
	Hash string `json:"hash"`
	// ExpiresAt is when the key stops working; absent means never.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// RevokedAt is when the key was revoked. Revocation is a soft delete: the object (and the
	// usage recorded against its id) stays.
	// +optional
	RevokedAt *metav1.Time `json:"revokedAt,omitempty"`
	// Limits are the key's own rate limits and token budgets; absent: only the tenant's.
	// +optional
	Limits *RateLimits `json:"limits,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ipkey
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.tenant`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint`
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=`.spec.displayName`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.spec.expiresAt`
// +kubebuilder:printcolumn:name="Revoked",type=string,JSONPath=`.spec.revokedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// APIKey is an API key for a tenant's inference endpoints, stored hashed. Several xDS server
// replicas watch these objects, so a revocation reaches all of them.
type APIKey struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec APIKeySpec `json:"spec"`
}

// +kubebuilder:object:root=true

// APIKeyList is a list of APIKeys.
type APIKeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []APIKey `json:"items"`
}

func init() {
	SchemeBuilder.Register(&APIKey{}, &APIKeyList{})
}
