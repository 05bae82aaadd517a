package consoletest

import (
	"time"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/console"
)

// Example is a double holding data shaped like the bundled examples: acme (H100; Qwen3-32B on
// one GPU, two replicas, serving; a Mistral master; Parakeet), globex (H200; Llama-3.3-70B on
// a whole node, syncing) and initech (no node types, no jobs), with usage and health for acme.
// Access: group acme-ml is developer in acme, acme-all viewer; globex-ml developer in globex;
// AdminGroup is the operator's.
func Example(now time.Time) *Backend {
	b := New(access.Policy{AdminGroups: []string{AdminGroup}},
		Tenant("acme", 16, v1alpha1.TenantAccess{Group: "acme-ml", Role: v1alpha1.RoleDeveloper},
			v1alpha1.TenantAccess{Group: "acme-all", Role: v1alpha1.RoleViewer}),
		Tenant("globex", 32, v1alpha1.TenantAccess{Group: "globex-ml", Role: v1alpha1.RoleDeveloper}),
		Tenant("initech", 0, v1alpha1.TenantAccess{Group: "initech-all", Role: v1alpha1.RoleViewer}),
	)
	b.Now = func() time.Time { return now }
	h100 := console.NodeType{Name: "metal3.gpu-h100", GPUsPerNode: 8, GPUMemoryGB: 80, HardwareProfile: "h100"}
	h200 := console.NodeType{Name: "metal3.gpu-h200", GPUsPerNode: 8, GPUMemoryGB: 141, HardwareProfile: "h200"}
	b.SetModels("acme", &console.ModelList{NodeTypes: []console.NodeType{h100}, Models: []console.Model{
		{Model: "Qwen/Qwen3-32B", Runtime: "vllm", Source: "recipe", Choices: []console.Choice{{NodeType: h100.Name, Master: "qwen-qwen3-32b-h100",
			GPUsPerReplica: 1, NodesPerReplica: 1, Why: "single_node_tp: the default variant needs 64 GB, which fits one 80 GB GPU (tensor parallel 1)"}}},
		{Model: "mistral-small", Runtime: "vllm", Source: "master", Choices: []console.Choice{{NodeType: h100.Name, Master: "mistral-small",
			GPUsPerReplica: 2, NodesPerReplica: 1, Why: "the hand-written master's perReplicaGPUCount"}}},
		{Model: "meta-llama/Llama-3.3-70B-Instruct", Runtime: "vllm", Source: "recipe", Choices: []console.Choice{{NodeType: h100.Name,
			Master: "meta-llama-llama-3.3-70b-instruct-h100", GPUsPerReplica: 8, NodesPerReplica: 1,
			Why: "single_node_tp: 140 GB does not fit one GPU, so the node's full 8 GPUs (tensor parallel 8)"}}},
		{Model: "nvidia/parakeet-tdt-0.6b-v3", Runtime: "parakeet", Source: "built-in", Choices: []console.Choice{{NodeType: h100.Name,
			Master: "parakeet", GPUsPerReplica: 1, NodesPerReplica: 1, Why: "Parakeet runs on one GPU"}}},
	}})
	b.SetModels("globex", &console.ModelList{NodeTypes: []console.NodeType{h200}, Models: []console.Model{
		{Model: "meta-llama/Llama-3.3-70B-Instruct", Runtime: "vllm", Source: "recipe", Choices: []console.Choice{{NodeType: h200.Name,
			Master: "meta-llama-llama-3.3-70b-instruct-h200", GPUsPerReplica: 8, NodesPerReplica: 1, Why: "single_node_tp on a full H200 node"}}},
	}})
	serving := now.Add(-95 * time.Minute)
	loading := now.Add(-4 * time.Minute)
	b.AddJob(console.JobDetail{
		Job: console.Job{Tenant: "acme", Name: "chat", Model: "Qwen/Qwen3-32B", Runtime: "vllm", NodeType: h100.Name, Replicas: 2,
			GPUsPerReplica: 1, NodesPerReplica: 1, RequireAPIKey: true, Stage: "serving", Reason: "every replica answers /health", Since: &serving},
		Master: console.Master{Name: "qwen-qwen3-32b-h100", Model: "Qwen/Qwen3-32B", Image: "vllm/vllm-openai:v0.11.0", PerReplicaGPUCount: 1,
			Args: []string{"--tensor-parallel-size", "1", "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"}, From: "recipe"},
		ReplicaList: []console.Replica{
			{Replica: 0, Stage: "serving", Since: &serving, Reason: "answers /health", Nodes: []console.Node{{VM: "chat-r0-n0", Node: "gpu-h100-01", Phase: "Running", IPs: []string{"10.244.1.17"}, Ready: true}},
				History: []console.StageChange{{Stage: "syncing", Since: serving.Add(-20 * time.Minute)}, {Stage: "booting", Since: serving.Add(-15 * time.Minute)},
					{Stage: "loading-model", Since: serving.Add(-12 * time.Minute)}, {Stage: "serving", Since: serving}}},
			{Replica: 1, Stage: "serving", Since: &serving, Reason: "answers /health", Nodes: []console.Node{{VM: "chat-r1-n0", Node: "gpu-h100-02", Phase: "Running", IPs: []string{"10.244.2.9"}, Ready: true}}},
		},
	})
	b.AddJob(console.JobDetail{
		Job: console.Job{Tenant: "acme", Name: "transcribe", Model: "nvidia/parakeet-tdt-0.6b-v3", Runtime: "parakeet", NodeType: h100.Name, Replicas: 1,
			GPUsPerReplica: 1, NodesPerReplica: 1, RequireAPIKey: true, Stage: "loading-model", Reason: "the VM runs; /health does not answer yet", Since: &loading},
		Master:      console.Master{Name: "parakeet", Model: "nvidia/parakeet-tdt-0.6b-v3", Image: "nvcr.io/nim/nvidia/parakeet:1.0", PerReplicaGPUCount: 1, From: "built-in"},
		ReplicaList: []console.Replica{{Replica: 0, Stage: "loading-model", Since: &loading, Reason: "the VM runs; /health does not answer yet", Nodes: []console.Node{{VM: "transcribe-r0-n0", Node: "gpu-h100-03", Phase: "Running", Ready: false}}}},
	})
	syncing := now.Add(-30 * time.Second)
	b.AddJob(console.JobDetail{
		Job: console.Job{Tenant: "globex", Name: "llama", Model: "meta-llama/Llama-3.3-70B-Instruct", Runtime: "vllm", NodeType: h200.Name, Replicas: 1,
			GPUsPerReplica: 8, NodesPerReplica: 1, RequireAPIKey: true, Stage: "syncing", Reason: "Argo CD: OutOfSync", Since: &syncing},
		Master: console.Master{Name: "meta-llama-llama-3.3-70b-instruct-h200", Model: "meta-llama/Llama-3.3-70B-Instruct", PerReplicaGPUCount: 8, From: "recipe"},
	})
	created := now.Add(-72 * time.Hour)
	used := now.Add(-2 * time.Hour).Truncate(time.Hour)
	b.AddKey(console.Key{ID: "k-5f2a91c0", Tenant: "acme", Name: "backend service", Status: "active", CreatedAt: created, LastUsed: &used})
	revoked := now.Add(-24 * time.Hour)
	b.AddKey(console.Key{ID: "k-0b77e3d4", Tenant: "acme", Endpoint: "chat", Name: "old laptop", Status: "revoked", CreatedAt: created.Add(-48 * time.Hour), RevokedAt: &revoked})
	b.SetUsage("acme", exampleUsage(now))
	ok, p50, p99 := 0.996, 182.0, 911.0
	b.SetHealth("acme", &console.Health{Window: "5m0s", Items: []console.EndpointHealth{
		{Job: "chat", Status: "healthy", Ready: 2, Total: 2, Requests: 1834, Errors: 7, SuccessRate: &ok, LatencyP50Ms: &p50, LatencyP99Ms: &p99},
		{Job: "transcribe", Status: "unavailable", Reasons: []string{"no ready replica"}, Ready: 0, Total: 1},
	}})
	return b
}

// AdminGroup is the example's operator group.
const AdminGroup = "platform-admins"

// exampleUsage is a day of hourly usage for two keys and two endpoints, with a daily shape.
func exampleUsage(now time.Time) *console.Usage {
	start := now.UTC().Truncate(time.Hour).Add(-72 * time.Hour)
	series := func(name string, scale uint64) console.Series {
		s := console.Series{Name: name}
		for i := range 72 {
			h := start.Add(time.Duration(i) * time.Hour)
			day := uint64(h.Hour())
			req := scale * (10 + (day*7)%23)
			s.Hours = append(s.Hours, console.HourCounts{Hour: h, Counts: console.Counts{Requests: req, TokensIn: req * 310, TokensOut: req * 190}})
		}
		return s
	}
	return &console.Usage{
		Keys:      []console.Series{series("k-5f2a91c0", 3), series("k-0b77e3d4", 1)},
		Endpoints: []console.Series{series("chat", 4), series("transcribe", 1)},
	}
}
