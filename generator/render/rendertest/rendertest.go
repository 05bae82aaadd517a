// Package rendertest builds tenant plans in Go for the render tests and the generator
// benchmark: the four job shapes the product serves (a single-GPU model, a full-node model, a
// two-node Kimi-K2 replica and a Parakeet job) and two data-parallel multi-node shapes (DEP,
// TP+DP) on H100 and H200 node types, with masters as the recipe rules derive them (see
// FORMATS.md and the recipes in generator/recipe).
package rendertest

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
)

// Node type names.
const (
	H100 = "metal3.gpu-h100"
	H200 = "metal3.gpu-h200"
)

// NodeType returns one of the two fixture node types.
func NodeType(name string) v1alpha1.NodeType {
	nt := v1alpha1.NodeType{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindNodeType},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
	switch name {
	case H100:
		nt.Spec = v1alpha1.NodeTypeSpec{
			GPU:             v1alpha1.NodeGPU{ResourceName: "nvidia.com/GH100_H100_SXM5_80GB", Count: 8, MemoryGB: 80},
			HardwareProfile: "h100",
			CPU:             192,
			Memory:          "1800Gi",
			InfiniBand:      &v1alpha1.NodeInfiniBand{ResourceName: "nvidia.com/mlnx_sriov_rdma", Count: 4, Network: "ib-fabric"},
		}
	case H200:
		nt.Spec = v1alpha1.NodeTypeSpec{
			GPU:             v1alpha1.NodeGPU{ResourceName: "nvidia.com/GH100_H200_SXM5_141GB", Count: 8, MemoryGB: 141},
			HardwareProfile: "h200",
			CPU:             224,
			Memory:          "2000Gi",
			NodeSelector:    map[string]string{"node.inferplane.io/class": "gpu-h200", "inferplane.io/node-type": H200},
			RackLabel:       "topology.kubernetes.io/rack",
			InfiniBand:      &v1alpha1.NodeInfiniBand{ResourceName: "nvidia.com/mlnx_sriov_rdma", Count: 8},
			GuestImage:      "registry.example.com/guests/gpu-ubuntu:24.04-550",
		}
	default:
		panic("rendertest: unknown node type " + name)
	}
	return nt
}

// Job shapes.
const (
	ShapeSingleGPU = "qwen"     // Qwen3-32B on one H100 GPU, two replicas
	ShapeFullNode  = "llama"    // Llama-3.3-70B-Instruct, TP 8 on one H200 node
	ShapeMultiNode = "kimi"     // Kimi-K2-Instruct, TP 16 over two H200 nodes
	ShapeParakeet  = "parakeet" // Parakeet speech to text on one H100 GPU
	// ShapeDEP is DeepSeek-V3.2 with multi_node_dep: 16 data-parallel ranks over two H200
	// nodes, every node serving its own eight (vLLM's data-parallel launcher).
	ShapeDEP = "deepseek"
	// ShapeTPDP is Kimi-K3 with multi_node_tp_dp: TP 8 inside each of two H200 nodes, one
	// model copy per node, DP 2 across them.
	ShapeTPDP = "kimi-k3"
)

// Shapes lists the job shapes of the benchmark in a fixed order (the data-parallel ones are
// in the DataParallel tenant).
var Shapes = []string{ShapeSingleGPU, ShapeFullNode, ShapeMultiNode, ShapeParakeet}

func boolPtr(b bool) *bool { return &b }

// Job returns a job of the given shape for tenant, named name.
func Job(tenant, name, shape string) plan.JobPlan {
	jp := plan.JobPlan{
		Job: v1alpha1.ManagedInferenceJob{
			TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindManagedInferenceJob},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				v1alpha1.LabelTenant: tenant,
			}},
		},
		ModelCacheSize: "200Gi",
		SourceFile:     "tenants/" + tenant + "/jobs/" + name + ".yaml",
	}
	master := v1alpha1.ModelMaster{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelMaster}}
	build, ok := shapes[shape]
	if !ok {
		panic("rendertest: unknown shape " + shape)
	}
	build(&jp, &master)
	jp.Master = master
	if jp.Image == "" {
		jp.Image = master.Spec.Image
	}
	if jp.Env == nil {
		jp.Env = master.Spec.Env
	}
	return jp
}

// shapes fill in a job of each shape and its master.
var shapes = map[string]func(jp *plan.JobPlan, master *v1alpha1.ModelMaster){
	ShapeSingleGPU: shapeSingleGPU,
	ShapeFullNode:  shapeFullNode,
	ShapeMultiNode: shapeMultiNode,
	ShapeDEP:       shapeDEP,
	ShapeTPDP:      shapeTPDP,
	ShapeParakeet:  shapeParakeet,
}

func shapeSingleGPU(jp *plan.JobPlan, master *v1alpha1.ModelMaster) {
	jp.Job.Spec = v1alpha1.ManagedInferenceJobSpec{Model: "Qwen/Qwen3-32B", Replicas: 2, GPUCount: 1, NodeType: H100}
	master.Name = "qwen3-32b-h100"
	master.Spec = v1alpha1.ModelMasterSpec{
		Runtime: v1alpha1.RuntimeVLLM, Model: "Qwen/Qwen3-32B", Image: v1alpha1.DefaultVLLMImage,
		Args: []string{"--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
			"--tensor-parallel-size", "1"},
		ToolCallParser: "hermes", ReasoningParser: "qwen3", Variant: "default", Precision: "bf16",
		TensorParallelSize: 1, PerReplicaGPUCount: 1, HardwareProfile: "h100",
		Source: &v1alpha1.MasterSource{Recipe: "Qwen/Qwen3-32B", Strategy: "single_node_tp", Features: []string{"reasoning", "tool_calling"}, Nodes: 1},
	}
	jp.NodeType, jp.NodesPerReplica, jp.GPUsPerNode = NodeType(H100), 1, 1
	jp.Args = append(append([]string{}, master.Spec.Args...), "--max-model-len", "32768")
	jp.Job.Spec.ExtraArgs = []string{"--max-model-len", "32768"}
}

func shapeFullNode(jp *plan.JobPlan, master *v1alpha1.ModelMaster) {
	jp.Job.Spec = v1alpha1.ManagedInferenceJobSpec{Model: "meta-llama/Llama-3.3-70B-Instruct", Replicas: 1, GPUCount: 8, NodeType: H200,
		RequireAPIKey: boolPtr(false), ModelCacheSize: "400Gi"}
	jp.ModelCacheSize = "400Gi"
	master.Name = "llama-3.3-70b-instruct-h200"
	master.Spec = v1alpha1.ModelMasterSpec{
		Runtime: v1alpha1.RuntimeVLLM, Model: "meta-llama/Llama-3.3-70B-Instruct", Image: v1alpha1.DefaultVLLMImage,
		Args:           []string{"--enable-auto-tool-choice", "--tool-call-parser", "llama3_json", "--tensor-parallel-size", "8"},
		Env:            []v1alpha1.EnvVar{{Name: "VLLM_ATTENTION_BACKEND", Value: "FLASHINFER"}},
		ToolCallParser: "llama3_json", Variant: "default", Precision: "bf16",
		TensorParallelSize: 8, PerReplicaGPUCount: 8, HardwareProfile: "h200",
	}
	jp.NodeType, jp.NodesPerReplica, jp.GPUsPerNode = NodeType(H200), 1, 8
	jp.Args = master.Spec.Args
}

func shapeMultiNode(jp *plan.JobPlan, master *v1alpha1.ModelMaster) {
	jp.Job.Spec = v1alpha1.ManagedInferenceJobSpec{Model: "moonshotai/Kimi-K2-Instruct", Replicas: 1, GPUCount: 16, NodeType: H200,
		ModelCacheSize: "2Ti"}
	jp.ModelCacheSize = "2Ti"
	master.Name = "kimi-k2-instruct-h200-2n"
	master.Spec = v1alpha1.ModelMasterSpec{
		Runtime: v1alpha1.RuntimeVLLM, Model: "moonshotai/Kimi-K2-Instruct", Image: v1alpha1.DefaultVLLMImage,
		Args: []string{"--trust-remote-code", "--tokenizer-mode", "auto", "--tensor-parallel-size", "16",
			"--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2"},
		Env: []v1alpha1.EnvVar{
			{Name: "GLOO_SOCKET_IFNAME", Value: "$IFACE_NAME"},
			{Name: "NCCL_SOCKET_IFNAME", Value: "$IFACE_NAME"},
		},
		ToolCallParser: "kimi_k2", Variant: "default", Precision: "fp8",
		TensorParallelSize: 16, PerReplicaGPUCount: 16, HardwareProfile: "h200",
		Source: &v1alpha1.MasterSource{Recipe: "moonshotai/Kimi-K2-Instruct", Strategy: "multi_node_tp", Features: []string{"tool_calling"}, Nodes: 2},
	}
	jp.NodeType, jp.NodesPerReplica, jp.GPUsPerNode = NodeType(H200), 2, 8
	jp.Args, jp.Env = master.Spec.Args, master.Spec.Env
}

func shapeDEP(jp *plan.JobPlan, master *v1alpha1.ModelMaster) {
	jp.Job.Spec = v1alpha1.ManagedInferenceJobSpec{Model: "deepseek-ai/DeepSeek-V3.2", Strategy: "multi_node_dep", Replicas: 1, GPUCount: 16,
		NodeType: H200, ModelCacheSize: "1Ti"}
	jp.ModelCacheSize = "1Ti"
	master.Name = "deepseek-v3.2-h200-ce95f43f"
	master.Spec = v1alpha1.ModelMasterSpec{
		Runtime: v1alpha1.RuntimeVLLM, Model: "deepseek-ai/DeepSeek-V3.2", Image: v1alpha1.DefaultVLLMImage,
		Args: []string{"--trust-remote-code", "--kernel-config.enable_flashinfer_autotune=False", "--enable-expert-parallel",
			"--data-parallel-hybrid-lb", "--data-parallel-size", "16", "--data-parallel-size-local", "8",
			"--tokenizer-mode", "deepseek_v32", "--tool-call-parser", "deepseek_v32", "--enable-auto-tool-choice",
			"--reasoning-parser", "deepseek_v3"},
		Env:            []v1alpha1.EnvVar{{Name: "GLOO_SOCKET_IFNAME", Value: "$IFACE_NAME"}, {Name: "NCCL_SOCKET_IFNAME", Value: "$IFACE_NAME"}},
		ToolCallParser: "deepseek_v32", ReasoningParser: "deepseek_v3", Variant: "default", Precision: "fp8",
		TensorParallelSize: 1, PipelineParallelSize: 1, DataParallelSize: 16, PerReplicaGPUCount: 16, HardwareProfile: "h200",
		Source: &v1alpha1.MasterSource{Recipe: "deepseek-ai/DeepSeek-V3.2", Strategy: "multi_node_dep", Features: []string{"reasoning", "tool_calling"}, Nodes: 2},
	}
	jp.NodeType, jp.NodesPerReplica, jp.GPUsPerNode, jp.DataParallelLocal = NodeType(H200), 2, 8, 8
	jp.Args, jp.Env = master.Spec.Args, master.Spec.Env
}

func shapeTPDP(jp *plan.JobPlan, master *v1alpha1.ModelMaster) {
	jp.Job.Spec = v1alpha1.ManagedInferenceJobSpec{Model: "moonshotai/Kimi-K3", Strategy: "multi_node_tp_dp", Replicas: 1, GPUCount: 16,
		NodeType: H200, ModelCacheSize: "2Ti"}
	jp.ModelCacheSize = "2Ti"
	master.Name = "kimi-k3-h200-9e215207"
	master.Spec = v1alpha1.ModelMasterSpec{
		Runtime: v1alpha1.RuntimeVLLM, Model: "moonshotai/Kimi-K3", Image: v1alpha1.DefaultVLLMImage,
		Args: []string{"--trust-remote-code", "--tensor-parallel-size", "8", "--data-parallel-size", "2", "--data-parallel-size-local", "1",
			"--gpu-memory-utilization", "0.97", "--max-num-seqs", "5", "--max-model-len", "32768", "--moe-backend", "marlin",
			"--disable-custom-all-reduce", "--no-enable-flashinfer-autotune", "--max-num-batched-tokens", "4096",
			"--attention-backend", "FLASHMLA", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"},
		Env: []v1alpha1.EnvVar{
			{Name: "GLOO_SOCKET_IFNAME", Value: "$IFACE_NAME"}, {Name: "NCCL_SOCKET_IFNAME", Value: "$IFACE_NAME"},
			{Name: "VLLM_ENGINE_READY_TIMEOUT_S", Value: "3600"}, {Name: "VLLM_USE_V2_MODEL_RUNNER", Value: "1"},
			{Name: "VLLM_USE_RUST_FRONTEND", Value: "1"}, {Name: "PYTORCH_CUDA_ALLOC_CONF", Value: "expandable_segments:True"},
		},
		ToolCallParser: "kimi_k3", ReasoningParser: "kimi_k3", Variant: "default", Precision: "mxfp4",
		TensorParallelSize: 8, PipelineParallelSize: 1, DataParallelSize: 2, PerReplicaGPUCount: 16, HardwareProfile: "h200",
		Source: &v1alpha1.MasterSource{Recipe: "moonshotai/Kimi-K3", Strategy: "multi_node_tp_dp", Features: []string{"reasoning", "tool_calling"}, Nodes: 2},
	}
	jp.NodeType, jp.NodesPerReplica, jp.GPUsPerNode, jp.DataParallelLocal = NodeType(H200), 2, 8, 1
	jp.Args, jp.Env = master.Spec.Args, master.Spec.Env
}

func shapeParakeet(jp *plan.JobPlan, master *v1alpha1.ModelMaster) {
	jp.Job.Spec = v1alpha1.ManagedInferenceJobSpec{Runtime: v1alpha1.RuntimeParakeet, Replicas: 1, GPUCount: 1, NodeType: H100}
	master.Name = "parakeet-tdt-0.6b-v3"
	master.Spec = v1alpha1.ModelMasterSpec{Runtime: v1alpha1.RuntimeParakeet, Model: v1alpha1.ParakeetModel, PerReplicaGPUCount: 1}
	jp.NodeType, jp.NodesPerReplica, jp.GPUsPerNode = NodeType(H100), 1, 1
	jp.Image = v1alpha1.DefaultParakeetImage
}

// Tenant returns a tenant with the given jobs ({name, shape}), jobs and node types sorted.
func Tenant(name, tier string, allowed []string, quota int32, jobs ...[2]string) plan.TenantPlan {
	tp := plan.TenantPlan{Tenant: v1alpha1.Tenant{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindTenant},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TenantSpec{
			DisplayName:      "Tenant " + name,
			Tier:             tier,
			AllowedNodeTypes: allowed,
			Quota:            quotaOf(quota),
			Git:              v1alpha1.TenantGit{URL: "https://git.example.com/tenants/" + name + ".git", Branch: "main"},
			ArgoCD:           v1alpha1.TenantArgoCD{Connector: "argocd-main"},
		},
	}}
	used := map[string]bool{}
	for _, j := range jobs {
		jp := Job(name, j[0], j[1])
		tp.Jobs = append(tp.Jobs, jp)
		used[jp.NodeType.Name] = true
	}
	// The plan builder sorts jobs by name; so do fixtures.
	slices.SortFunc(tp.Jobs, func(a, b plan.JobPlan) int { return strings.Compare(a.Job.Name, b.Job.Name) })
	for _, n := range []string{H100, H200} {
		if used[n] {
			tp.NodeTypes = append(tp.NodeTypes, NodeType(n))
		}
	}
	return tp
}

// Acme is an H100-dedicated tenant with a single-GPU model (two replicas) and Parakeet.
func Acme() plan.TenantPlan {
	return Tenant("acme", "h100-dedicated", []string{H100}, 16,
		[2]string{"qwen", ShapeSingleGPU}, [2]string{"transcribe", ShapeParakeet})
}

// Globex is an H200 tenant allowed every metal3 node type, with a full-node model and a
// two-node Kimi-K2 replica, and no GPU quota.
func Globex() plan.TenantPlan {
	t := Tenant("globex", "h200-dedicated", []string{"metal3.*"}, 0,
		[2]string{"llama", ShapeFullNode}, [2]string{"kimi", ShapeMultiNode})
	t.Tenant.Spec.ArgoCD.Destination = "globex-cluster"
	return t
}

// DataParallel is an H200 tenant whose two jobs start with vLLM's data-parallel launcher:
// DeepSeek-V3.2 with DEP and Kimi-K3 with TP+DP, two nodes each, every node serving.
func DataParallel() plan.TenantPlan {
	return Tenant("hooli", "h200-dedicated", []string{"metal3.*"}, 0,
		[2]string{"deepseek", ShapeDEP}, [2]string{"kimi-k3", ShapeTPDP})
}

// Initech is a tenant allowed no node type at all (allowedNodeTypes: []) and without jobs.
func Initech() plan.TenantPlan {
	return Tenant("initech", "trial", []string{}, 0)
}

// Many returns n tenants of jobsPerTenant jobs each, the shapes taken in turn, for the
// benchmark (1,000 x 5 there). Every tenant may use every node type.
func Many(n, jobsPerTenant int) []plan.TenantPlan {
	out := make([]plan.TenantPlan, 0, n)
	for i := range n {
		name := fmt.Sprintf("tenant-%04d", i)
		var jobs [][2]string
		for k := range jobsPerTenant {
			shape := Shapes[(i+k)%len(Shapes)]
			jobs = append(jobs, [2]string{fmt.Sprintf("%s-%d", shape, k), shape})
		}
		out = append(out, Tenant(name, "bench", nil, int32(8*jobsPerTenant), jobs...))
	}
	return out
}

// quotaOf is a quota of gpus GPUs (nil for 0: none).
func quotaOf(gpus int32) *v1alpha1.Quota {
	if gpus == 0 {
		return nil
	}
	return &v1alpha1.Quota{GPUs: gpus}
}
