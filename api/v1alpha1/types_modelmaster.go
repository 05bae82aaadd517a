package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Runtime is the model server a job runs.
// +kubebuilder:validation:Enum=vllm;parakeet
type Runtime string

const (
	RuntimeVLLM     Runtime = "vllm"
	RuntimeParakeet Runtime = "parakeet"
)

// Defaults for the two runtimes.
const (
	// DefaultVLLMImage is the upstream recipes' default image; its entrypoint is `vllm serve`.
	DefaultVLLMImage = "vllm/vllm-openai:latest"
	// ParakeetModel is the one speech-to-text model a Parakeet job serves.
	ParakeetModel = "nvidia/parakeet-tdt-0.6b-v3"
	// DefaultParakeetImage serves ParakeetModel behind POST /v1/audio/transcriptions.
	DefaultParakeetImage = "ghcr.io/inferplane/parakeet-openai:0.6b-v3"
	// ServingPort is the port both runtimes listen on inside the guest.
	ServingPort = 8000
)

// EnvVar is one environment variable of the model server. A list, not a map, so that the
// order the recipe gives survives into the rendered files byte for byte.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// SecretKey, instead of a value, names a key of the tenant's model-server Secret (the one
	// holding the Hugging Face token, attached to every VM): the value is read in the guest,
	// never written in a master or a repository, and redacted in every line the model server
	// prints (docs/agent.md). Value is then empty.
	// +optional
	SecretKey string `json:"secretKey,omitempty"`
}

// ModelMasterSpec is everything needed to serve one model on one class of hardware: the
// runtime image, the serving arguments and environment, the parallelism, and the number of
// GPUs one replica must claim.
type ModelMasterSpec struct {
	Runtime Runtime `json:"runtime"`
	// Model is the model id the server loads (a Hugging Face id, or the variant's checkpoint).
	// +kubebuilder:validation:MinLength=1
	Model string `json:"model"`
	// Image is the runtime container image. Empty for Parakeet: the job type supplies it.
	// A tag such as vllm/vllm-openai:latest can be moved to another build at any time; pin
	// it with an immutable tag, or with ImageDigest.
	// +optional
	Image string `json:"image,omitempty"`
	// ImageDigest pins the image to one build: the guest runs <image>@<digest>, so a tag that
	// moves later changes nothing. The digest of the image's manifest list, sha256:<64 hex>.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	ImageDigest string `json:"imageDigest,omitempty"`
	// Args are the serving arguments after `vllm serve <model>`, parallelism flags included.
	// +optional
	Args []string `json:"args,omitempty"`
	// +optional
	Env []EnvVar `json:"env,omitempty"`
	// ToolCallParser and ReasoningParser repeat what Args select, for display and policy.
	// +optional
	ToolCallParser string `json:"toolCallParser,omitempty"`
	// +optional
	ReasoningParser string `json:"reasoningParser,omitempty"`
	// Variant is the recipe variant (default, fp8, awq, ...); Precision its dtype or
	// quantisation (bf16, fp8, int4, nvfp4, mxfp4).
	// +optional
	Variant string `json:"variant,omitempty"`
	// +optional
	Precision string `json:"precision,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +optional
	TensorParallelSize int32 `json:"tensorParallelSize,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +optional
	PipelineParallelSize int32 `json:"pipelineParallelSize,omitempty"`
	// DataParallelSize is the number of data-parallel ranks across the replica (vLLM's
	// --data-parallel-size); empty means 1. Its GPUs are TP x PP x DP.
	// +kubebuilder:validation:Minimum=1
	// +optional
	DataParallelSize int32 `json:"dataParallelSize,omitempty"`
	// PerReplicaGPUCount is the number of GPUs one replica claims. A job's gpuCount must equal
	// it, and the webhook holds every replica's VMs to it.
	// +kubebuilder:validation:Minimum=1
	PerReplicaGPUCount int32 `json:"perReplicaGPUCount"`
	// HardwareProfile is the taxonomy profile the master was derived for, when it came from a
	// recipe; empty means any node type.
	// +optional
	HardwareProfile string `json:"hardwareProfile,omitempty"`
	// Source records the recipe inputs a derived master came from.
	// +optional
	Source *MasterSource `json:"source,omitempty"`
}

// MasterSource is the provenance of a master derived from a vLLM recipe.
type MasterSource struct {
	// Recipe is the recipe's model id (models/<org>/<repo>.yaml).
	Recipe string `json:"recipe"`
	// Strategy is the recipe strategy used (single_node_tp, multi_node_tp, ...).
	// +optional
	Strategy string `json:"strategy,omitempty"`
	// Features are the recipe features turned on, sorted.
	// +optional
	Features []string `json:"features,omitempty"`
	// FeatureModes are the modes of the pick-one features that are on.
	// +optional
	FeatureModes map[string]string `json:"featureModes,omitempty"`
	// KVOffload is the KV-cache offload option of the taxonomy the master uses.
	// +optional
	KVOffload string `json:"kvOffload,omitempty"`
	// Nodes is the number of nodes of the hardware profile one replica spans.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipmm
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.perReplicaGPUCount`

// ModelMaster stores a model's runtime image and default serving parameters. Masters are
// derived from vLLM recipes or written by hand for models without one.
type ModelMaster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ModelMasterSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// ModelMasterList is a list of ModelMasters.
type ModelMasterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelMaster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ModelMaster{}, &ModelMasterList{})
}
