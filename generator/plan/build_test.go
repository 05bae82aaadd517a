package plan_test

import (
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/internal/gentest"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/generator/recipe"
)

// The tests plan the repository's own bundled examples (tenants/) with its bundled recipes
// (recipes/), then break them one way at a time.

var loadBook = sync.OnceValues(func() (*recipe.Book, error) { return recipe.Load(os.DirFS("../../recipes")) })

func book(t testing.TB) *recipe.Book {
	t.Helper()
	b, err := loadBook()
	require.NoError(t, err)
	return b
}

func build(t *testing.T, tree fstest.MapFS, b *recipe.Book) (*plan.Plan, error) {
	t.Helper()
	in, err := inputs.Load(tree, "tenants")
	require.NoError(t, err, "the test's inputs must load; plan problems are what is tested")
	return plan.Build(in, b, nil)
}

func findJob(t *testing.T, p *plan.Plan, tenant, job string) plan.JobPlan {
	t.Helper()
	for _, tp := range p.Tenants {
		if tp.Tenant.Name != tenant {
			continue
		}
		for _, j := range tp.Jobs {
			if j.Job.Name == job {
				return j
			}
		}
	}
	t.Fatalf("no job %s/%s in the plan", tenant, job)
	return plan.JobPlan{}
}

func TestBuildBundledExamples(t *testing.T) {
	p, err := build(t, gentest.Copy(t, "../../tenants"), book(t))
	require.NoError(t, err)

	var names []string
	for _, tp := range p.Tenants {
		names = append(names, tp.Tenant.Name)
	}
	assert.Equal(t, []string{"acme", "globex", "initech"}, names, "tenants sorted by name")

	t.Run("single GPU: Qwen3-32B on H100", func(t *testing.T) {
		j := findJob(t, p, "acme", "qwen3-32b")
		assert.Equal(t, int32(1), j.Master.Spec.TensorParallelSize)
		assert.Equal(t, int32(1), j.Master.Spec.PerReplicaGPUCount)
		assert.Equal(t, "hermes", j.Master.Spec.ToolCallParser)
		assert.Equal(t, "qwen3", j.Master.Spec.ReasoningParser)
		assert.Equal(t, [2]int32{1, 1}, [2]int32{j.NodesPerReplica, j.GPUsPerNode})
		assert.Equal(t, "metal3.gpu-h100", j.NodeType.Name)
		assert.Equal(t, v1alpha1.DefaultVLLMImage, j.Image)
		// The job's extra args come last, after the master's.
		assert.Equal(t, []string{"--tensor-parallel-size", "1", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
			"--reasoning-parser", "qwen3", "--max-model-len", "32768"}, j.Args)
		// Defaults applied.
		assert.Equal(t, "200Gi", j.ModelCacheSize)
		assert.True(t, j.Job.Spec.APIKeyRequired())
		assert.Equal(t, v1alpha1.RuntimeVLLM, j.Job.Spec.EffectiveRuntime())
		assert.Equal(t, "acme", j.Job.Labels[v1alpha1.LabelTenant])
		assert.Equal(t, "tenants/acme/jobs/qwen3-32b.yaml", j.SourceFile)
	})
	t.Run("full node: Llama-3.3-70B on H200", func(t *testing.T) {
		j := findJob(t, p, "globex", "llama-70b")
		assert.Equal(t, int32(8), j.Master.Spec.TensorParallelSize)
		assert.Equal(t, [2]int32{1, 8}, [2]int32{j.NodesPerReplica, j.GPUsPerNode})
		assert.Equal(t, "400Gi", j.ModelCacheSize)
	})
	t.Run("multi-node: Kimi-K2 over two H200 nodes", func(t *testing.T) {
		j := findJob(t, p, "globex", "kimi-k2")
		assert.Equal(t, int32(16), j.Master.Spec.TensorParallelSize)
		assert.Equal(t, int32(16), j.Master.Spec.PerReplicaGPUCount)
		assert.Equal(t, [2]int32{2, 8}, [2]int32{j.NodesPerReplica, j.GPUsPerNode})
		assert.Equal(t, "multi_node_tp", j.Master.Spec.Source.Strategy)
		assert.Contains(t, j.Env, v1alpha1.EnvVar{Name: "NCCL_SOCKET_IFNAME", Value: "$IFACE_NAME"})
	})
	t.Run("Parakeet", func(t *testing.T) {
		j := findJob(t, p, "acme", "transcribe")
		assert.Equal(t, recipe.ParakeetMasterName, j.Master.Name)
		assert.Equal(t, v1alpha1.DefaultParakeetImage, j.Image)
		assert.Equal(t, [2]int32{1, 1}, [2]int32{j.NodesPerReplica, j.GPUsPerNode})
		assert.Empty(t, j.Args)
	})
	t.Run("hand-written master", func(t *testing.T) {
		j := findJob(t, p, "acme", "mistral-small")
		assert.Equal(t, "mistral-small-24b", j.Master.Name)
		assert.Equal(t, "vllm/vllm-openai:v0.10.2", j.Image)
		assert.Equal(t, "100Gi", j.ModelCacheSize)
		assert.Equal(t, j.Master.Spec.Args, j.Args, "tensorParallelSize 1 adds no flag")
	})
	t.Run("node types per tenant", func(t *testing.T) {
		for _, tp := range p.Tenants {
			var nts []string
			for _, nt := range tp.NodeTypes {
				nts = append(nts, nt.Name)
			}
			switch tp.Tenant.Name {
			case "acme":
				assert.Equal(t, []string{"metal3.gpu-h100"}, nts)
			case "globex":
				assert.Equal(t, []string{"metal3.gpu-h200"}, nts)
			case "initech":
				assert.Empty(t, nts)
				assert.Empty(t, tp.Jobs)
				assert.NotNil(t, tp.Tenant.Spec.AllowedNodeTypes, "[] (none) stays distinct from absent (all)")
			}
		}
	})
}

func TestBuildExtraArgsLastWins(t *testing.T) {
	tree := gentest.Copy(t, "../../tenants")
	gentest.Edit(t, tree, "acme/jobs/mistral-small.yaml", "  modelCacheSize: 100Gi", "  modelCacheSize: 100Gi\n  extraArgs: [--max-model-len=16384, --enable-prefix-caching]")
	p, err := build(t, tree, book(t))
	require.NoError(t, err)
	j := findJob(t, p, "acme", "mistral-small")
	assert.Equal(t, []string{"--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral",
		"--enable-auto-tool-choice", "--tool-call-parser", "mistral", "--max-model-len=16384", "--enable-prefix-caching"}, j.Args)
}

func TestBuildHandWrittenParallelismBecomesFlags(t *testing.T) {
	tree := gentest.Copy(t, "../../tenants")
	gentest.Edit(t, tree, "masters/mistral-small-24b.yaml", "tensorParallelSize: 1\n  perReplicaGPUCount: 1", "tensorParallelSize: 2\n  perReplicaGPUCount: 2")
	gentest.Edit(t, tree, "acme/jobs/mistral-small.yaml", "gpuCount: 1", "gpuCount: 2")
	p, err := build(t, tree, book(t))
	require.NoError(t, err)
	j := findJob(t, p, "acme", "mistral-small")
	assert.Equal(t, []string{"--tensor-parallel-size", "2"}, j.Args[len(j.Args)-2:])
	assert.Equal(t, [2]int32{1, 2}, [2]int32{j.NodesPerReplica, j.GPUsPerNode})
}

func TestBuildWildcardAllowsProvider(t *testing.T) {
	tree := gentest.Copy(t, "../../tenants")
	// globex allows metal3.*: an H100 job is as fine as an H200 one.
	tree["globex/jobs/qwen.yaml"] = gentest.File(strings.ReplaceAll(string(tree["acme/jobs/qwen3-32b.yaml"].Data), "replicas: 2", "replicas: 1"))
	p, err := build(t, tree, book(t))
	require.NoError(t, err)
	assert.Equal(t, "metal3.gpu-h100", findJob(t, p, "globex", "qwen3-32b").NodeType.Name)
	var nts []string
	for _, tp := range p.Tenants {
		if tp.Tenant.Name == "globex" {
			for _, nt := range tp.NodeTypes {
				nts = append(nts, nt.Name)
			}
		}
	}
	assert.Equal(t, []string{"metal3.gpu-h100", "metal3.gpu-h200"}, nts)
}

// A data-parallel job over two nodes, with a feature's mode and a KV offload option: the plan
// carries the layout's data-parallel ranks per node, and the master the asked-for extras.
func TestBuildDataParallelJob(t *testing.T) {
	tree := gentest.Copy(t, "../../tenants")
	tree["globex/jobs/deepseek.yaml"] = gentest.File(`apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: deepseek
spec:
  model: deepseek-ai/DeepSeek-V3.2
  strategy: multi_node_dep
  kvOffload: simple
  replicas: 1
  gpuCount: 16
  nodeType: metal3.gpu-h200
`)
	tree["globex/jobs/qwen38.yaml"] = gentest.File(`apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: qwen38
spec:
  model: Qwen/Qwen3.8-27B
  featureModes: {spec_decoding: mtp}
  replicas: 1
  gpuCount: 1
  nodeType: metal3.gpu-h200
`)
	gentest.Edit(t, tree, "tiers/h200-dedicated.yaml", "gpus: 32", "gpus: 64")
	p, err := build(t, tree, book(t))
	require.NoError(t, err)
	j := findJob(t, p, "globex", "deepseek")
	assert.Equal(t, [3]int32{2, 8, 8}, [3]int32{j.NodesPerReplica, j.GPUsPerNode, j.DataParallelLocal})
	assert.Equal(t, int32(16), j.Master.Spec.DataParallelSize)
	assert.Equal(t, "simple", j.Master.Spec.Source.KVOffload)
	assert.Contains(t, strings.Join(j.Args, " "), `--kv-transfer-config {"kv_connector":"SimpleCPUOffloadConnector"`)

	g := findJob(t, p, "globex", "qwen38")
	assert.Equal(t, map[string]string{"spec_decoding": "mtp"}, g.Master.Spec.Source.FeatureModes)
	assert.Contains(t, g.Master.Spec.Source.Features, "spec_decoding", "naming a mode turns its feature on")
}

type want = gentest.Want

func TestBuildBadInput(t *testing.T) {
	const (
		qwen     = "acme/jobs/qwen3-32b.yaml"
		qwenF    = "tenants/" + qwen
		mistral  = "acme/jobs/mistral-small.yaml"
		mistralF = "tenants/" + mistral
		parakeet = "acme/jobs/transcribe.yaml"
		kimi     = "globex/jobs/kimi-k2.yaml"
		master   = "masters/mistral-small-24b.yaml"
	)
	cases := []struct {
		name   string
		mutate func(t *testing.T, m fstest.MapFS)
		want   []want
	}{
		{
			name:   "unknown model lists masters and recipes",
			mutate: func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, qwen, "Qwen/Qwen3-32B", "acme/secret-model") },
			want:   []want{{qwenF, "spec.model", `unknown model "acme/secret-model"`, "a ModelMaster name (mistral-small-24b) or a recipe model id (one of the 173 recipes `inferplane recipe list` shows)"}},
		},
		{
			name:   "unknown model suggests a close id",
			mutate: func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, qwen, "Qwen/Qwen3-32B", "Qwen/Qwen3-23B") },
			want:   []want{{qwenF, "spec.model", "did you mean Qwen/Qwen3-32B", "recipe model id"}},
		},
		{
			name:   "a model id in another case is refused with the recipes' spelling",
			mutate: func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, qwen, "Qwen/Qwen3-32B", "qwen/qwen3-32b") },
			want:   []want{{qwenF, "spec.model", `is "qwen/qwen3-32b": is spelled "Qwen/Qwen3-32B" in the recipes`, "did you mean Qwen/Qwen3-32B?"}},
		},
		{
			name: "model served by a hand-written master, named by id",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, mistral, "model: mistral-small-24b", "model: mistralai/Mistral-Small-3.1-24B-Instruct-2503")
			},
			want: []want{{mistralF, "spec.model", "hand-written master mistral-small-24b serves it", "a ModelMaster name"}},
		},
		{
			name: "unknown variant lists the recipe's",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, "  model: Qwen/Qwen3-32B", "  model: Qwen/Qwen3-32B\n  variant: gguf")
			},
			want: []want{{qwenF, "spec.variant", `no variant "gguf"; its variants: default, fp8, awq`, "a variant of the recipe"}},
		},
		{
			name: "unknown strategy",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, "  model: Qwen/Qwen3-32B", "  model: Qwen/Qwen3-32B\n  strategy: warp_drive")
			},
			want: []want{{qwenF, "spec.strategy", `unknown strategy "warp_drive"`, "a strategy the recipe is compatible with"}},
		},
		{
			name: "strategy that cannot fit the model",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, kimi, "  model: moonshotai/Kimi-K2-Instruct", "  model: moonshotai/Kimi-K2-Instruct\n  strategy: single_node_tp")
			},
			want: []want{{"tenants/" + kimi, "spec.strategy", "does not fit one node", "a strategy the recipe is compatible with"}},
		},
		{
			name: "unknown feature",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, "  model: Qwen/Qwen3-32B", "  model: Qwen/Qwen3-32B\n  features: {telepathy: true}")
			},
			want: []want{{qwenF, "spec.features", `unknown feature "telepathy"`, "feature names of the recipe"}},
		},
		{
			name: "unknown node type",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, "nodeType: metal3.gpu-h100", "nodeType: metal3.gpu-b200")
			},
			want: []want{
				{qwenF, "spec.nodeType", `no NodeType "metal3.gpu-b200" in the policy data`, "did you mean metal3.gpu-h100?"},
			},
		},
		{
			name:   "gpuCount differs from the master",
			mutate: func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, qwen, "gpuCount: 1", "gpuCount: 2") },
			want:   []want{{qwenF, "spec.gpuCount", "is 2", "must equal perReplicaGPUCount 1 of ModelMaster qwen3-32b-h100"}},
		},
		{
			name:   "gpuCount of a multi-node master",
			mutate: func(t *testing.T, m fstest.MapFS) { gentest.Edit(t, m, kimi, "gpuCount: 16", "gpuCount: 8") },
			want:   []want{{"tenants/" + kimi, "spec.gpuCount", "is 8", "must equal perReplicaGPUCount 16 of ModelMaster kimi-k2-instruct-h200"}},
		},
		{
			name: "GPU count that does not split over whole nodes",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, master, "tensorParallelSize: 1\n  perReplicaGPUCount: 1", "tensorParallelSize: 12\n  perReplicaGPUCount: 12")
				gentest.Edit(t, m, mistral, "gpuCount: 1", "gpuCount: 12")
			},
			want: []want{{mistralF, "spec.nodeType", "not a whole number of such nodes", "perReplicaGPUCount 12 of ModelMaster mistral-small-24b is more than one node of NodeType metal3.gpu-h100 holds (8 GPUs)"}},
		},
		{
			name: "multi-node Parakeet job",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, parakeet, "gpuCount: 1", "gpuCount: 16")
				gentest.Edit(t, m, "acme/tenant.yaml", "gpus: 16", "gpus: 64")
			},
			want: []want{{"tenants/" + parakeet, "spec.gpuCount", "is 16", "must equal perReplicaGPUCount 1 of ModelMaster parakeet-tdt-0.6b-v3"}},
		},
		{
			name: "multi-node Parakeet master",
			mutate: func(t *testing.T, m fstest.MapFS) {
				m["masters/parakeet-big.yaml"] = gentest.File("apiVersion: inferplane.io/v1alpha1\nkind: ModelMaster\nmetadata: {name: parakeet-big}\n" +
					"spec: {runtime: parakeet, model: nvidia/parakeet-tdt-0.6b-v3, perReplicaGPUCount: 16}\n")
				gentest.Edit(t, m, parakeet, "  runtime: parakeet", "  runtime: parakeet\n  model: parakeet-big")
				gentest.Edit(t, m, parakeet, "gpuCount: 1", "gpuCount: 16")
				gentest.Edit(t, m, "acme/tenant.yaml", "gpus: 16", "gpus: 64")
			},
			want: []want{{"tenants/" + parakeet, "spec.nodeType", "a Parakeet replica runs on one node", "perReplicaGPUCount 16 of ModelMaster parakeet-big exceeds the 8 GPUs per node of NodeType metal3.gpu-h100"}},
		},
		{
			name: "the policy's job rules: name, replicas, GPUs, node type",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, mistral, "name: mistral-small", "name: 9lives")
				gentest.Edit(t, m, mistral, "replicas: 1", "replicas: 0")
				gentest.Edit(t, m, mistral, "gpuCount: 1", "gpuCount: 0")
				gentest.Edit(t, m, mistral, "  nodeType: metal3.gpu-h100\n", "")
			},
			want: []want{
				{mistralF, "metadata.name", `is "9lives"`, "must be lower-case letters, digits and '-', starting with a letter"},
				{mistralF, "spec.gpuCount", "is 0", "must equal perReplicaGPUCount 1 of ModelMaster mistral-small-24b"},
				{mistralF, "spec.nodeType", "is missing", "must name a NodeType; Tenant acme may use: metal3.gpu-h100"},
				{mistralF, "spec.replicas", "is 0", "must be at least 1"},
			},
		},
		{
			// Issue 18: a name of 58 to 63 characters passed the DNS label check and failed on
			// the VM names; the limit users are told is the one VM names impose.
			name: "a job name of 58 characters",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, mistral, "name: mistral-small", "name: "+strings.Repeat("m", 58))
			},
			want: []want{{mistralF, "metadata.name", "must be at most 57 characters (it has 58)", "<job>-r<replica>-n<node>, up to <job>-r0-n0, and a VM name is at most 63"}},
		},
		{
			// Issue 18: the hint offered metal3.gpu-h100 to a tenant that may use no node type.
			name: "a job without a node type, of a tenant that may use none",
			mutate: func(t *testing.T, m fstest.MapFS) {
				m["initech/jobs/qwen.yaml"] = gentest.File(strings.Replace(string(m[qwen].Data), "  nodeType: metal3.gpu-h100\n", "", 1))
			},
			want: []want{{"tenants/initech/jobs/qwen.yaml", "spec.nodeType", "is missing: must name a NodeType",
				"; Tenant initech may use no node type (allowedNodeTypes: [])"}},
		},
		{
			name: "node type outside allowedNodeTypes",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, "nodeType: metal3.gpu-h100", "nodeType: metal3.gpu-h200")
			},
			want: []want{
				{qwenF, "spec.nodeType", `not allowed for Tenant acme (allowedNodeTypes: [metal3.gpu-h100])`, "; Tenant acme may use: metal3.gpu-h100"},
			},
		},
		{
			name: "a tenant allowed no node type",
			mutate: func(t *testing.T, m fstest.MapFS) {
				m["initech/jobs/qwen.yaml"] = gentest.File(string(m[qwen].Data))
			},
			want: []want{{"tenants/initech/jobs/qwen.yaml", "spec.nodeType", "not allowed for Tenant initech (allowedNodeTypes: [] (no node type))", "Tenant initech may use no node type"}},
		},
		{
			name: "a wildcard of another provider",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, "tiers/h200-dedicated.yaml", "  - metal3.*", "  - aws.*")
			},
			want: []want{
				{"tenants/globex/jobs/kimi-k2.yaml", "spec.nodeType", "not allowed for Tenant globex (allowedNodeTypes: [aws.*])", "Tenant globex may use none of them"},
				{"tenants/globex/jobs/llama-70b.yaml", "spec.nodeType", "not allowed for Tenant globex (allowedNodeTypes: [aws.*])", "Tenant globex may use none of them"},
			},
		},
		{
			name: "GPU quota exceeded: with nothing running, every job is new",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, "acme/tenant.yaml", "gpus: 16", "gpus: 3")
			},
			want: []want{
				{mistralF, "spec.replicas", "is 1: needs 1 GPU (1 replica x 1), but Tenant acme's GPU quota is 3 and its other jobs use 3 (qwen3-32b 2x1, transcribe 1x1): 0 left", ""},
				{qwenF, "spec.replicas", "is 2: needs 2 GPUs (2 replicas x 1), but Tenant acme's GPU quota is 3 and its other jobs use 2 (mistral-small 1x1, transcribe 1x1): 1 left", ""},
				{"tenants/" + parakeet, "spec.replicas", "is 1: needs 1 GPU (1 replica x 1), but Tenant acme's GPU quota is 3 and its other jobs use 3 (mistral-small 1x1, qwen3-32b 2x1): 0 left", ""},
			},
		},
		{
			name: "a model the tenant's tier does not offer",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, "model: Qwen/Qwen3-32B", "model: moonshotai/Kimi-K2-Instruct")
			},
			want: []want{
				{qwenF, "spec.gpuCount", "is 1: must equal perReplicaGPUCount 16 of ModelMaster kimi-k2-instruct-h100", ""},
				{qwenF, "spec.model", `is "moonshotai/Kimi-K2-Instruct": not in Tenant acme's model catalogue (Qwen/*, meta-llama/*, mistral-small-24b, nvidia/parakeet-tdt-0.6b-v3, its tier's or narrower)`, ""},
			},
		},
		{
			name: "recipe options on a hand-written master",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, mistral, "  model: mistral-small-24b", "  model: mistral-small-24b\n  variant: fp8")
			},
			want: []want{{mistralF, "spec.variant", "is set, but the job runs hand-written master mistral-small-24b", "applies only to masters derived from a recipe"}},
		},
		{
			name: "parakeet model on the vllm runtime",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, "model: Qwen/Qwen3-32B", "model: nvidia/parakeet-tdt-0.6b-v3")
			},
			want: []want{{qwenF, "spec.runtime", `is "vllm"`, `"parakeet"`}},
		},
		{
			name: "another model on the parakeet runtime",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, parakeet, "  runtime: parakeet", "  runtime: parakeet\n  model: openai/whisper-large-v3")
			},
			want: []want{{"tenants/" + parakeet, "spec.model", `is "openai/whisper-large-v3"`, `"nvidia/parakeet-tdt-0.6b-v3" (or nothing)`}},
		},
		{
			name: "job runtime differs from the master's",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, mistral, "  model: mistral-small-24b", "  model: mistral-small-24b\n  runtime: parakeet")
			},
			want: []want{{mistralF, "spec.runtime", `is "parakeet"`, `must match runtime "vllm" of ModelMaster mistral-small-24b`}},
		},
		{
			name: "extra args the renderer owns or that hold secrets",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, qwen, `  - "32768"`, "  - \"32768\"\n  - --tensor-parallel-size=2\n  - --api-key\n  - sk-123")
			},
			want: []want{
				{qwenF, "spec.extraArgs[2]", "sets --tensor-parallel-size", "the master's parallelism decides"},
				{qwenF, "spec.extraArgs[3]", "sets --api-key", "would be committed to git"},
			},
		},
		{
			name: "hand-written master for other hardware",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, master, "  perReplicaGPUCount: 1", "  perReplicaGPUCount: 1\n  hardwareProfile: h200")
			},
			want: []want{{mistralF, "spec.nodeType", `must be a NodeType with hardwareProfile "h200", which ModelMaster mistral-small-24b is made for`, `(NodeType metal3.gpu-h100 has "h100")`}},
		},
		{
			name: "recipe model on a node type without a hardware profile",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, "nodetypes/metal3.gpu-h100.yaml", "  hardwareProfile: h100\n", "")
			},
			want: []want{{qwenF, "spec.nodeType", "node type metal3.gpu-h100 names no hardware profile", "spec.hardwareProfile set"}},
		},
		{
			name: "every problem of the run at once, sorted",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, kimi, "gpuCount: 16", "gpuCount: 15")
				gentest.Edit(t, m, qwen, "gpuCount: 1", "gpuCount: 3")
				gentest.Edit(t, m, "acme/tenant.yaml", "gpus: 16", "gpus: 4")
			},
			want: []want{
				{mistralF, "spec.replicas", "is 1: needs 1 GPU", "its other jobs use 7 (qwen3-32b 2x3, transcribe 1x1)"},
				{qwenF, "spec.gpuCount", "is 3", "must equal perReplicaGPUCount 1"},
				{"tenants/" + parakeet, "spec.replicas", "is 1: needs 1 GPU", "its other jobs use 7 (mistral-small 1x1, qwen3-32b 2x3)"},
				{"tenants/" + kimi, "spec.gpuCount", "is 15", "must equal perReplicaGPUCount 16"},
			},
		},
		{
			name: "a mode the feature does not have",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, kimi, "  replicas: 1", "  featureModes: {tool_calling: fast}\n  replicas: 1")
			},
			want: []want{{"tenants/" + kimi, "spec.featureModes", "feature tool_calling of recipe moonshotai/Kimi-K2-Instruct has no modes", "modes of the recipe's pick-one features"}},
		},
		{
			name: "a KV offload option the strategy does not allow",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, kimi, "  replicas: 1", "  kvOffload: lmcache\n  replicas: 1")
			},
			want: []want{{"tenants/" + kimi, "spec.kvOffload", "KV offload lmcache runs only under strategy single_node_tp, single_node_tep, single_node_dep, not multi_node_tp", "a KV offload option of the recipes' taxonomy"}},
		},
		{
			name: "the data-parallel launcher's flags are the renderer's",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, kimi, "  replicas: 1", "  extraArgs: [--data-parallel-start-rank, \"8\"]\n  replicas: 1")
			},
			want: []want{{"tenants/" + kimi, "spec.extraArgs[0]", "sets --data-parallel-start-rank", "the renderer sets the multi-node launcher flags per node"}},
		},
		{
			name: "feature modes and KV offload on a hand-written master",
			mutate: func(t *testing.T, m fstest.MapFS) {
				gentest.Edit(t, m, mistral, "  modelCacheSize: 100Gi", "  modelCacheSize: 100Gi\n  kvOffload: simple")
			},
			want: []want{{mistralF, "spec.kvOffload", "is set, but the job runs hand-written master mistral-small-24b", "nothing: it applies only to masters derived from a recipe"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := gentest.Copy(t, "../../tenants")
			tc.mutate(t, tree)
			p, err := build(t, tree, book(t))
			require.Error(t, err)
			assert.Nil(t, p)
			gentest.AssertProblems(t, err, tc.want)
			if strings.Contains(tc.name, "may use none") {
				assert.NotContains(t, err.Error(), "metal3.", "nothing is offered to a tenant that may use no node type")
			}
		})
	}
}

func TestBuildWithoutRecipes(t *testing.T) {
	p, err := build(t, gentest.Copy(t, "../../tenants"), nil)
	require.Error(t, err)
	assert.Nil(t, p)
	ps := problem.Problems(err)
	require.Len(t, ps, 3, "%v", err) // qwen, kimi, llama; Parakeet and the hand-written master resolve
	for _, pr := range ps {
		assert.Contains(t, pr.Err.Detail, "(no recipes are loaded)")
	}
}

// TestQuotaKeepsWhatRuns: acme's GPU quota lowered below what it runs stops nothing, lets a
// job shrink, and refuses any growth past what runs (plan.Running: here, the inputs as they
// were when the quota was lowered).
func TestQuotaKeepsWhatRuns(t *testing.T) {
	tree := gentest.Copy(t, "../../tenants")
	gentest.Edit(t, tree, "acme/tenant.yaml", "gpus: 16", "gpus: 2")
	before, err := inputs.Load(tree, "tenants")
	require.NoError(t, err)
	running := plan.AsRunning(before)
	_, err = plan.Build(before, book(t), running)
	require.NoError(t, err, "acme runs 4 GPUs over a quota of 2: kept")

	for _, c := range []struct {
		name, replicas string
		want           []want
	}{
		{"a job that shrinks", "replicas: 1", nil},
		{"a job that grows", "replicas: 3", []want{{"tenants/acme/jobs/qwen3-32b.yaml", "spec.replicas",
			"is 3: needs 3 GPUs (3 replicas x 1), but Tenant acme's GPU quota is 2 and its other jobs use 2 (mistral-small 1x1, transcribe 1x1): 0 left", ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := gentest.Copy(t, "../../tenants")
			gentest.Edit(t, m, "acme/tenant.yaml", "gpus: 16", "gpus: 2")
			gentest.Edit(t, m, "acme/jobs/qwen3-32b.yaml", "replicas: 2", c.replicas)
			in, err := inputs.Load(m, "tenants")
			require.NoError(t, err)
			_, err = plan.Build(in, book(t), running)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			gentest.AssertProblems(t, err, c.want)
		})
	}
	t.Run("a new job", func(t *testing.T) {
		m := gentest.Copy(t, "../../tenants")
		gentest.Edit(t, m, "acme/tenant.yaml", "gpus: 16", "gpus: 2")
		m["acme/jobs/more.yaml"] = gentest.File("apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nmetadata: {name: more}\n" +
			"spec: {runtime: parakeet, replicas: 1, gpuCount: 1, nodeType: metal3.gpu-h100}\n")
		in, err := inputs.Load(m, "tenants")
		require.NoError(t, err)
		_, err = plan.Build(in, book(t), running)
		gentest.AssertProblems(t, err, []want{{"tenants/acme/jobs/more.yaml", "spec.replicas",
			"is 1: needs 1 GPU (1 replica x 1), but Tenant acme's GPU quota is 2 and its other jobs use 4 (mistral-small 1x1, qwen3-32b 2x1, transcribe 1x1): 0 left", ""}})
	})
}
