// Package v1alpha1 holds inferplane's own Kubernetes-style objects: the inputs an operator writes
// (NodeType, ModelMaster, Tier, Tenant, ManagedInferenceJob) and the labels that tie rendered
// workloads back to them. The same types are read from files by the generator and from the
// cluster by the webhook, so both sides decide on identical data.
//
// +kubebuilder:object:generate=true
// +groupName=inferplane.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every inferplane object.
	GroupVersion = schema.GroupVersion{Group: "inferplane.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds every inferplane type to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// APIVersion is the apiVersion string input files carry.
const APIVersion = "inferplane.io/v1alpha1"

// Kind names, as they appear in input files and AdmissionReview requests.
const (
	KindNodeType            = "NodeType"
	KindModelMaster         = "ModelMaster"
	KindTenant              = "Tenant"
	KindTier                = "Tier"
	KindManagedInferenceJob = "ManagedInferenceJob"
)
