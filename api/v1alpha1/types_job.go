package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ManagedInferenceJobSpec is a tenant's request to serve one model behind one endpoint.
type ManagedInferenceJobSpec struct {
	// Runtime defaults to vllm.
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`
	// Model is a ModelMaster name or a recipe model id (e.g. Qwen/Qwen3-32B). Parakeet jobs may
	// leave it empty.
	// +optional
	Model string `json:"model,omitempty"`
	// Variant is the recipe variant; defaults to the recipe's "default".
	// +optional
	Variant string `json:"variant,omitempty"`
	// Strategy overrides the recipe strategy the generator would pick.
	// +optional
	Strategy string `json:"strategy,omitempty"`
	// Features turns recipe features on or off by name (tool_calling, reasoning, ...). Features
	// are on by default unless the recipe lists them in opt_in_features.
	// +optional
	Features map[string]bool `json:"features,omitempty"`
	// FeatureModes picks the mode of a recipe's pick-one features by name (for example
	// spec_decoding: mtp); naming a mode turns its feature on. Unset features use the
	// variant's or the recipe's default mode.
	// +optional
	FeatureModes map[string]string `json:"featureModes,omitempty"`
	// KVOffload names a KV-cache offload option of the recipes' taxonomy (simple,
	// offloading_cpu, offloading_fs): its --kv-transfer-config and env are added to the
	// master, where the recipe, the strategy and the hardware allow it.
	// +optional
	KVOffload string `json:"kvOffload,omitempty"`
	// ExtraArgs are appended to the master's serving args (last one wins per flag).
	// +optional
	ExtraArgs []string `json:"extraArgs,omitempty"`
	// Replicas is the number of copies of the model behind the endpoint.
	// +kubebuilder:validation:Minimum=1
	Replicas int32 `json:"replicas"`
	// GPUCount is the number of GPUs per replica; it must equal the master's perReplicaGPUCount.
	// +kubebuilder:validation:Minimum=1
	GPUCount int32 `json:"gpuCount"`
	// NodeType is the GPU node class the replicas run on.
	// +kubebuilder:validation:MinLength=1
	NodeType string `json:"nodeType"`
	// ModelCacheSize is the size of each node's model-weight cache volume; defaults to 200Gi.
	// +optional
	ModelCacheSize string `json:"modelCacheSize,omitempty"`
	// RequireAPIKey says whether the endpoint checks API keys; defaults to true.
	// +optional
	RequireAPIKey *bool `json:"requireAPIKey,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ipjob
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.gpuCount`
// +kubebuilder:printcolumn:name="Node type",type=string,JSONPath=`.spec.nodeType`

// ManagedInferenceJob serves one model with vLLM or Parakeet behind an OpenAI-compatible
// endpoint. Its tenant is the folder it lives in (tenants/<tenant>/jobs/) and, in a cluster,
// its inferplane.io/tenant label.
type ManagedInferenceJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ManagedInferenceJobSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// ManagedInferenceJobList is a list of ManagedInferenceJobs.
type ManagedInferenceJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ManagedInferenceJob `json:"items"`
}

// EffectiveRuntime is the job's runtime with the default applied.
func (s *ManagedInferenceJobSpec) EffectiveRuntime() Runtime {
	if s.Runtime == "" {
		return RuntimeVLLM
	}
	return s.Runtime
}

// APIKeyRequired is RequireAPIKey with its default (true) applied.
func (s *ManagedInferenceJobSpec) APIKeyRequired() bool {
	return s.RequireAPIKey == nil || *s.RequireAPIKey
}

func init() {
	SchemeBuilder.Register(&ManagedInferenceJob{}, &ManagedInferenceJobList{})
}
