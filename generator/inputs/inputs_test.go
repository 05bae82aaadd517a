package inputs

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/internal/gentest"
	"github.com/inferplane/inferplane/generator/problem"
)

const (
	nodeTypeH100 = `apiVersion: inferplane.io/v1alpha1
kind: NodeType
metadata:
  name: metal3.gpu-h100
spec:
  gpu:
    resourceName: nvidia.com/GH100_H100_SXM5_80GB
    count: 8
    memoryGB: 80
  hardwareProfile: h100
  cpu: 192
  memory: 1536Gi
  infiniBand:
    resourceName: nvidia.com/mlnx_sriov_rdma
    count: 8
    network: inferplane-system/ib-sriov
`
	masterMistral = `apiVersion: inferplane.io/v1alpha1
kind: ModelMaster
metadata:
  name: mistral-small-24b
spec:
  runtime: vllm
  model: mistralai/Mistral-Small-3.1-24B-Instruct-2503
  image: vllm/vllm-openai:v0.10.1
  args: ["--tokenizer-mode", "mistral"]
  env:
  - name: VLLM_LOGGING_LEVEL
    value: INFO
  perReplicaGPUCount: 1
`
	tenantAcme = `apiVersion: inferplane.io/v1alpha1
kind: Tenant
metadata:
  name: acme
spec:
  tier: h100-dedicated
  allowedNodeTypes: [metal3.gpu-h100]
  quota: {gpus: 16}
`
	jobQwen = `apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: qwen3-32b
spec:
  model: Qwen/Qwen3-32B
  replicas: 2
  gpuCount: 1
  nodeType: metal3.gpu-h100
`
)

func validTree() fstest.MapFS {
	return fstest.MapFS{
		"README.md":                 {Data: []byte("# tenants\n")},
		".git/config":               {Data: []byte("[core]\n")},
		"nodetypes/h100.yaml":       {Data: []byte(nodeTypeH100)},
		"masters/mistral.yaml":      {Data: []byte(masterMistral)},
		"acme/tenant.yaml":          {Data: []byte(tenantAcme)},
		"acme/jobs/qwen3-32b.yaml":  {Data: []byte(jobQwen)},
		"acme/jobs/.qwen.yaml.swp":  {Data: []byte("\x00garbage")},
		"initech/tenant.yaml":       {Data: []byte(strings.ReplaceAll(strings.ReplaceAll(tenantAcme, "acme", "initech"), "[metal3.gpu-h100]", "[]"))},
		"initech/jobs/.gitkeep":     {Data: nil},
		"nodetypes/notes.txt":       {Data: []byte("ignored")},
		"acme/jobs/qwen3-32b.yaml~": {Data: []byte("ignored backup")},
	}
}

func TestLoadValidTree(t *testing.T) {
	in, err := Load(validTree(), "tenants")
	require.NoError(t, err)

	require.Len(t, in.NodeTypes, 1)
	assert.Equal(t, "tenants/nodetypes/h100.yaml", in.NodeTypes[0].File)
	assert.Equal(t, int32(8), in.NodeTypes[0].Object.Spec.GPU.Count)
	assert.Equal(t, "inferplane-system/ib-sriov", in.NodeTypes[0].Object.Spec.InfiniBand.Network)

	require.Len(t, in.Masters, 1)
	assert.Equal(t, []v1alpha1.EnvVar{{Name: "VLLM_LOGGING_LEVEL", Value: "INFO"}}, in.Masters[0].Object.Spec.Env)

	require.Len(t, in.Tenants, 2)
	acme, initech := in.Tenants[0], in.Tenants[1]
	assert.Equal(t, "acme", acme.Object.Name)
	assert.Equal(t, []string{"metal3.gpu-h100"}, acme.Object.Spec.AllowedNodeTypes)
	require.Len(t, acme.Jobs, 1)
	assert.Equal(t, "tenants/acme/jobs/qwen3-32b.yaml", acme.Jobs[0].File)
	assert.Equal(t, int32(2), acme.Jobs[0].Object.Spec.Replicas)

	// An empty list (allow none) must survive decoding as non-nil, distinct from absent (all).
	assert.NotNil(t, initech.Object.Spec.AllowedNodeTypes)
	assert.Empty(t, initech.Object.Spec.AllowedNodeTypes)
	assert.Empty(t, initech.Jobs)
}

func TestLoadAbsentAllowedNodeTypesIsNil(t *testing.T) {
	tree := validTree()
	tree["acme/tenant.yaml"] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(tenantAcme, "  allowedNodeTypes: [metal3.gpu-h100]\n", ""))}
	in, err := Load(tree, "tenants")
	require.NoError(t, err)
	assert.Nil(t, in.Tenants[0].Object.Spec.AllowedNodeTypes)
}

type want = gentest.Want

const tierH100 = `apiVersion: inferplane.io/v1alpha1
kind: Tier
metadata:
  name: h100-dedicated
spec:
  nodeTypes: [metal3.*]
  quota: {gpus: 8, jobs: 4}
  limits:
    requestsPerMinute: {value: 600}
  keyLimits:
    tokensPerDay: {value: 1000000, mode: soft}
  models: [Qwen/*, mistral-small-24b]
`

// TestLoadTiers: with a tiers/ folder, every tenant takes its tier (node types, models,
// quota, limits), its own lists narrowing the tier's and its own figures replacing them; the
// file as written is kept beside.
func TestLoadTiers(t *testing.T) {
	tree := validTree()
	tree["tiers/h100.yaml"] = &fstest.MapFile{Data: []byte(tierH100)}
	in, err := Load(tree, "tenants")
	require.NoError(t, err)
	require.True(t, in.HasTiers)
	require.Len(t, in.Tiers, 1)
	acme := in.Tenants[0]
	assert.Equal(t, "h100-dedicated", acme.Tier.Name)
	assert.Equal(t, []string{"metal3.gpu-h100"}, acme.Object.Spec.AllowedNodeTypes, "its own, narrower")
	assert.Equal(t, []string{"Qwen/*", "mistral-small-24b"}, acme.Object.Spec.Models, "the tier's")
	assert.Equal(t, &v1alpha1.Quota{GPUs: 16, Jobs: 4}, acme.Object.Spec.Quota, "its GPUs, the tier's jobs")
	assert.Equal(t, int64(600), acme.Object.Spec.Limits.RequestsPerMinute.Value)
	assert.Equal(t, &v1alpha1.Quota{GPUs: 16}, acme.Written.Spec.Quota, "as written")
	assert.Nil(t, acme.Written.Spec.Models)
	assert.Equal(t, []string{}, in.Tenants[1].Object.Spec.AllowedNodeTypes, "initech's [] narrows to none")

	tree = validTree()
	assert.False(t, func() bool { in, err := Load(tree, "tenants"); require.NoError(t, err); return in.HasTiers }(),
		"without tiers/, a tier is only a name")
}

func TestLoadBadInput(t *testing.T) {
	job := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cases := []struct {
		name   string
		mutate func(fstest.MapFS)
		want   []want
	}{
		{
			name: "unknown field names the known ones",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(strings.Replace(jobQwen, "gpuCount: 1", "gpuCont: 1", 1))
			},
			want: []want{
				// Field checks wait until the file decodes, so a typo gives one problem, not two.
				{"tenants/acme/jobs/qwen3-32b.yaml", "spec.gpuCont", "unknown field", "gpuCount"},
			},
		},
		{
			name: "unknown nested field",
			mutate: func(m fstest.MapFS) {
				m["nodetypes/h100.yaml"] = job(strings.Replace(nodeTypeH100, "    memoryGB: 80", "    memoryGB: 80\n    vendor: nvidia", 1))
			},
			want: []want{{"tenants/nodetypes/h100.yaml", "spec.gpu.vendor", "unknown field", "count, memoryGB, resourceName"}},
		},
		{
			name: "unknown metadata field",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yaml"] = job(strings.Replace(tenantAcme, "  name: acme", "  name: acme\n  nmae: x", 1))
			},
			want: []want{{"tenants/acme/tenant.yaml", "metadata.nmae", "unknown field", "annotations, labels, name"}},
		},
		{
			name: "wrong apiVersion",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(strings.Replace(jobQwen, "inferplane.io/v1alpha1", "inferplane.io/v1", 1))
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "apiVersion", `is "inferplane.io/v1"`, "inferplane.io/v1alpha1"}},
		},
		{
			name: "missing kind",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(strings.Replace(jobQwen, "kind: ManagedInferenceJob\n", "", 1))
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "kind", "is missing", "ManagedInferenceJob"}},
		},
		{
			name: "kind in the wrong folder",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/h100.yaml"] = job(nodeTypeH100)
			},
			want: []want{{"tenants/acme/jobs/h100.yaml", "kind", `is "NodeType", which belongs in nodetypes/`, "ManagedInferenceJob"}},
		},
		{
			name: "job file in the tenant folder",
			mutate: func(m fstest.MapFS) {
				m["acme/extra-job.yaml"] = job(jobQwen)
			},
			want: []want{{"tenants/acme/extra-job.yaml", "", "unexpected file", "jobs/<job>.yaml"}},
		},
		{
			name: "tenant folder named nodetypes",
			mutate: func(m fstest.MapFS) {
				m["nodetypes/tenant.yaml"] = job(strings.ReplaceAll(tenantAcme, "acme", "nodetypes"))
			},
			want: []want{{"tenants/nodetypes/tenant.yaml", "kind", "nodetypes/ holds NodeType files", "a tenant cannot be named nodetypes"}},
		},
		{
			name: "tenant folder named masters with jobs",
			mutate: func(m fstest.MapFS) {
				m["masters/jobs/qwen.yaml"] = job(jobQwen)
			},
			want: []want{{"tenants/masters/jobs", "", "a tenant cannot be named masters", "another name"}},
		},
		{
			name: "tenant name differs from folder",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yaml"] = job(strings.Replace(tenantAcme, "name: acme", "name: acme-corp", 1))
			},
			want: []want{{"tenants/acme/tenant.yaml", "metadata.name", `is "acme-corp", but the file is in folder "acme"`, `"acme", the name of the tenant's folder`}},
		},
		{
			name: "malformed YAML names the line",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job("apiVersion: inferplane.io/v1alpha1\nkind: ManagedInferenceJob\nspec:\n  replicas: 1\n nodeType: x\n")
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "", "malformed YAML: line 4: did not find expected key", "valid YAML"}},
		},
		{
			name: "duplicate YAML key",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(jobQwen + "  replicas: 3\n")
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "", `key "replicas" already set`, "valid YAML"}},
		},
		{
			name: "wrong type",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(strings.Replace(jobQwen, "replicas: 2", "replicas: two", 1))
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "spec.replicas", "is a string", "a whole number"}},
		},
		{
			name: "fraction where a whole number belongs",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(strings.Replace(jobQwen, "gpuCount: 1", "gpuCount: 1.5", 1))
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "spec.gpuCount", "is a number 1.5", "a whole number"}},
		},
		{
			name: "two objects in one file",
			mutate: func(m fstest.MapFS) {
				m["nodetypes/h100.yaml"] = job(nodeTypeH100 + "---\n" + strings.ReplaceAll(nodeTypeH100, "h100", "h200"))
			},
			want: []want{{"tenants/nodetypes/h100.yaml", "", "holds 2 YAML documents", "one object per file"}},
		},
		{
			name: "empty file",
			mutate: func(m fstest.MapFS) {
				m["masters/empty.yaml"] = job("# nothing yet\n")
			},
			want: []want{{"tenants/masters/empty.yaml", "", "file is empty", "one ModelMaster object"}},
		},
		{
			name: "not a mapping",
			mutate: func(m fstest.MapFS) {
				m["masters/list.yaml"] = job("- a\n- b\n")
			},
			want: []want{{"tenants/masters/list.yaml", "", "not a mapping", "apiVersion, kind, metadata and spec"}},
		},
		{
			name: "duplicate node type names",
			mutate: func(m fstest.MapFS) {
				m["nodetypes/h100-copy.yaml"] = job(nodeTypeH100)
			},
			want: []want{{"tenants/nodetypes/h100.yaml", "metadata.name", `duplicate node type name "metal3.gpu-h100", also defined in tenants/nodetypes/h100-copy.yaml`, "a name no other node type uses"}},
		},
		{
			name: "duplicate master names",
			mutate: func(m fstest.MapFS) {
				m["masters/mistral-2.yaml"] = job(masterMistral)
			},
			want: []want{{"tenants/masters/mistral.yaml", "metadata.name", `duplicate master name "mistral-small-24b"`, "a name no other master uses"}},
		},
		{
			name: "duplicate job names within a tenant",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen-again.yaml"] = job(jobQwen)
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "metadata.name", `duplicate job name "qwen3-32b", also defined in tenants/acme/jobs/qwen-again.yaml`, "a name no other job uses"}},
		},
		{
			name: "duplicate tenant names",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yml"] = job(tenantAcme)
			},
			want: []want{{"tenants/acme/tenant.yml", "metadata.name", `duplicate tenant name "acme", also defined in tenants/acme/tenant.yaml`, "a name no other tenant uses"}},
		},
		{
			name: "missing tenant.yaml",
			mutate: func(m fstest.MapFS) {
				m["globex/jobs/llama.yaml"] = job(jobQwen)
			},
			want: []want{{"tenants/globex/tenant.yaml", "", "missing", "a Tenant object named globex"}},
		},
		{
			name: "tenant folder name not a DNS label",
			mutate: func(m fstest.MapFS) {
				m["Big_Co/tenant.yaml"] = job(strings.ReplaceAll(tenantAcme, "acme", "Big_Co"))
			},
			want: []want{{"tenants/Big_Co", "", `tenant folder name "Big_Co" is not valid`, "DNS-1123 label"}},
		},
		{
			name: "password in git URL",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yaml"] = job(tenantAcme + "  git:\n    url: https://bot:s3cret@git.example.com/acme.git\n")
			},
			want: []want{{"tenants/acme/tenant.yaml", "spec.git.url", "contains a password", "spec.git.auth"}},
		},
		{
			name: "git URL with an unknown scheme",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yaml"] = job(tenantAcme + "  git:\n    url: ftp://git.example.com/acme.git\n")
			},
			want: []want{{"tenants/acme/tenant.yaml", "spec.git.url", `has scheme "ftp"`, "https://"}},
		},
		{
			name: "git auth without URL",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yaml"] = job(tenantAcme + "  git:\n    auth:\n      passwordEnv: ACME_TOKEN\n")
			},
			want: []want{{"tenants/acme/tenant.yaml", "spec.git.auth", "without a remote URL", "spec.git.url"}},
		},
		{
			name: "bad allowedNodeTypes wildcard",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yaml"] = job(strings.Replace(tenantAcme, "[metal3.gpu-h100]", `["*"]`, 1))
			},
			want: []want{{"tenants/acme/tenant.yaml", "spec.allowedNodeTypes[0]", `is "*"`, "a provider wildcard (metal3.*)"}},
		},
		{
			name: "job namespace of another tenant",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(strings.Replace(jobQwen, "  name: qwen3-32b", "  name: qwen3-32b\n  namespace: globex", 1))
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "metadata.namespace", `is "globex"`, `"acme" (the tenant's folder)`}},
		},
		{
			name: "job tenant label of another tenant",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(strings.Replace(jobQwen, "  name: qwen3-32b", "  name: qwen3-32b\n  labels:\n    inferplane.io/tenant: globex", 1))
			},
			want: []want{{"tenants/acme/jobs/qwen3-32b.yaml", "metadata.labels[inferplane.io/tenant]", `is "globex"`, `"acme"`}},
		},
		{
			name: "a secret env value in a master, or a secret key that cannot be one",
			mutate: func(m fstest.MapFS) {
				m["masters/mistral.yaml"] = job(strings.Replace(masterMistral, "    value: INFO\n",
					"    value: INFO\n  - name: WANDB_API_KEY\n    value: wandb-0123456789\n    secretKey: wandb\n  - name: OTHER\n    value: \"\"\n    secretKey: ../token\n", 1))
			},
			want: []want{
				{"tenants/masters/mistral.yaml", "spec.env[1].secretKey", `"WANDB_API_KEY" has both`, "a value or a secretKey, not both"},
				{"tenants/masters/mistral.yaml", "spec.env[2].secretKey", `"../token"`, "a key of the tenant's model-server Secret"},
			},
		},
		{
			name: "server-set metadata",
			mutate: func(m fstest.MapFS) {
				m["masters/mistral.yaml"] = job(strings.Replace(masterMistral, "  name: mistral-small-24b", "  name: mistral-small-24b\n  uid: abc-123", 1))
			},
			want: []want{{"tenants/masters/mistral.yaml", "metadata.uid", "set by the API server", "only name, labels and annotations"}},
		},
		{
			name: "job field minimums and enums",
			mutate: func(m fstest.MapFS) {
				m["acme/jobs/qwen3-32b.yaml"] = job(`apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: 9lives
spec:
  runtime: sglang
  replicas: 0
  gpuCount: 0
  modelCacheSize: lots
`)
			},
			// The name, replicas, GPUs and node type are the policy's job rules, which the plan
			// applies (plan's TestBuildBadInput): a job file on its own is checked for the rest.
			want: []want{
				{"tenants/acme/jobs/qwen3-32b.yaml", "spec.modelCacheSize", `"lots" is not a quantity`, "200Gi"},
				{"tenants/acme/jobs/qwen3-32b.yaml", "spec.runtime", `is "sglang"`, `"vllm" or "parakeet"`},
			},
		},
		{
			name: "hand-written master without parallelism for its GPUs",
			mutate: func(m fstest.MapFS) {
				m["masters/mistral.yaml"] = job(strings.Replace(masterMistral, "perReplicaGPUCount: 1", "perReplicaGPUCount: 4", 1))
			},
			want: []want{{"tenants/masters/mistral.yaml", "spec.tensorParallelSize", "to use the 4 GPUs the master claims", "tensorParallelSize: 4"}},
		},
		{
			name: "hand-written master whose parallelism disagrees with its GPU count",
			mutate: func(m fstest.MapFS) {
				m["masters/mistral.yaml"] = job(strings.Replace(masterMistral, "perReplicaGPUCount: 1", "perReplicaGPUCount: 4\n  tensorParallelSize: 2", 1))
			},
			want: []want{{"tenants/masters/mistral.yaml", "spec.perReplicaGPUCount", "is 4", "tensor 2 x pipeline 1 = 2"}},
		},
		{
			name: "node type field checks",
			mutate: func(m fstest.MapFS) {
				m["nodetypes/h100.yaml"] = job(`apiVersion: inferplane.io/v1alpha1
kind: NodeType
metadata:
  name: Metal3_GPU
spec:
  gpu:
    resourceName: GH100
    count: 0
  cpu: 0
  memory: "-1Gi"
  rackLabel: "bad key!"
`)
			},
			want: []want{
				{"tenants/nodetypes/h100.yaml", "metadata.name", `is "Metal3_GPU"`, "e.g. metal3.gpu-h100"},
				{"tenants/nodetypes/h100.yaml", "spec.cpu", "is 0", "at least 1"},
				{"tenants/nodetypes/h100.yaml", "spec.gpu.count", "is 0", "at least 1"},
				{"tenants/nodetypes/h100.yaml", "spec.gpu.memoryGB", "is 0", "at least 1"},
				{"tenants/nodetypes/h100.yaml", "spec.gpu.resourceName", `is "GH100"`, "nvidia.com/"},
				{"tenants/nodetypes/h100.yaml", "spec.memory", `"-1Gi" is not positive`, "1800Gi"},
				{"tenants/nodetypes/h100.yaml", "spec.rackLabel", "not a valid label key", "a label key"},
			},
		},
		{
			name: "tenant access: one of group and user, a known role, each member once",
			mutate: func(m fstest.MapFS) {
				m["acme/tenant.yaml"] = job(tenantAcme + `  access:
  - group: acme-ml
    role: developer
  - {role: viewer}
  - {group: acme-ops, user: ops@acme.example, role: admin}
  - {user: ops, role: admin}
  - {user: Dana@acme.example, role: owner}
  - {group: acme-ml, role: admin}
  - {user: dana@ACME.example, role: viewer}
`)
			},
			want: []want{
				{"tenants/acme/tenant.yaml", "spec.access[1]", "has neither", "exactly one of group and user"},
				{"tenants/acme/tenant.yaml", "spec.access[2]", "has both", "exactly one of group and user"},
				{"tenants/acme/tenant.yaml", "spec.access[3].user", `"ops" is not one`, "an email address"},
				{"tenants/acme/tenant.yaml", "spec.access[4].role", `is "owner"`, `"viewer", "developer" or "admin"`},
				{"tenants/acme/tenant.yaml", "spec.access[5]", "group acme-ml is listed twice", "each group and user once"},
				{"tenants/acme/tenant.yaml", "spec.access[6]", "user dana@acme.example is listed twice", "each group and user once"},
			},
		},
		{
			name: "unexpected file at the top",
			mutate: func(m fstest.MapFS) {
				m["qwen.yaml"] = job(jobQwen)
			},
			want: []want{{"tenants/qwen.yaml", "", "unexpected file at the top", "<tenant>/tenant.yaml"}},
		},
		{
			name: "a tier's own problems",
			mutate: func(m fstest.MapFS) {
				m["tiers/h100.yaml"] = job(strings.NewReplacer("  nodeTypes: [metal3.*]\n", "", "name: h100-dedicated", "name: H100_dedicated",
					"{gpus: 8, jobs: 4}", "{gpus: -8}", "tokensPerDay: {value: 1000000, mode: soft}", "tokensPerDay: {value: 0}",
					"[Qwen/*, mistral-small-24b]", "[Qwen/*, Qwen/*]").Replace(tierH100))
				m["acme/tenant.yaml"] = job(strings.Replace(tenantAcme, "h100-dedicated", "H100_dedicated", 1))
				m["initech/tenant.yaml"] = job(strings.NewReplacer("acme", "initech", "h100-dedicated", "H100_dedicated").Replace(tenantAcme))
			},
			want: []want{
				{"tenants/tiers/h100.yaml", "metadata.name", `"H100_dedicated" is not a valid tier name`, "h100-dedicated"},
				{"tenants/tiers/h100.yaml", "spec.keyLimits.tokensPerDay.value", "is 0", "a positive number"},
				{"tenants/tiers/h100.yaml", "spec.models[1]", `is "Qwen/*": must be listed once`, ""},
				{"tenants/tiers/h100.yaml", "spec.nodeTypes", "missing", "[] for none"},
				{"tenants/tiers/h100.yaml", "spec.quota.gpus", "is -8: must be 0 (no limit) or more", ""},
			},
		},
		{
			name: "a tenant of a tier that does not exist, and one wider than its tier",
			mutate: func(m fstest.MapFS) {
				m["tiers/h100.yaml"] = job(strings.Replace(tierH100, "[metal3.*]", "[metal3.gpu-h100]", 1))
				m["acme/tenant.yaml"] = job(strings.Replace(tenantAcme, "[metal3.gpu-h100]", "[metal3.gpu-h100, metal3.gpu-h200]\n  models: [meta-llama/*]", 1))
				m["initech/tenant.yaml"] = job(strings.NewReplacer("acme", "initech", "h100-dedicated", "h100-dedicatd").Replace(tenantAcme))
			},
			want: []want{
				{"tenants/acme/tenant.yaml", "spec.allowedNodeTypes[1]", `is "metal3.gpu-h200": must be within Tier h100-dedicated's node types (metal3.gpu-h100)`, "never widen it"},
				{"tenants/acme/tenant.yaml", "spec.models[0]", `is "meta-llama/*": must be within Tier h100-dedicated's models (Qwen/*, mistral-small-24b)`, "never widen it"},
				{"tenants/initech/tenant.yaml", "spec.tier", `is "h100-dedicatd": no Tier "h100-dedicatd" in tenants/tiers/ (the tiers: h100-dedicated)`, "did you mean h100-dedicated?"},
			},
		},
		{
			name: "oversized file",
			mutate: func(m fstest.MapFS) {
				m["masters/huge.yaml"] = job(strings.Repeat("#", MaxFileSize+1))
			},
			want: []want{{"tenants/masters/huge.yaml", "", "file is 1048577 bytes", "at most 1048576 bytes"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := validTree()
			tc.mutate(tree)
			in, err := Load(tree, "tenants")
			require.Error(t, err)
			assert.Nil(t, in, "nothing is returned on a problem")
			gentest.AssertProblems(t, err, tc.want)
		})
	}
}

func TestLoadCollectsEveryProblemSorted(t *testing.T) {
	tree := validTree()
	tree["acme/jobs/qwen3-32b.yaml"] = &fstest.MapFile{Data: []byte(strings.Replace(jobQwen, "replicas: 2", "replicas: 2\n  runtime: tgi", 1))}
	tree["nodetypes/h100.yaml"] = &fstest.MapFile{Data: []byte("kind: [")}
	tree["masters/mistral.yaml"] = &fstest.MapFile{Data: []byte(strings.Replace(masterMistral, "runtime: vllm", "runtime: tgi", 1))}
	_, err := Load(tree, "tenants")
	ps := problem.Problems(err)
	require.Len(t, ps, 3, "%v", err)
	assert.Equal(t, "tenants/acme/jobs/qwen3-32b.yaml", ps[0].File)
	assert.Equal(t, "tenants/masters/mistral.yaml", ps[1].File)
	assert.Equal(t, "tenants/nodetypes/h100.yaml", ps[2].File)
	assert.True(t, strings.HasPrefix(err.Error(), "3 problems:\n  tenants/acme/jobs/qwen3-32b.yaml: spec.runtime: is \"tgi\""), err.Error())
}

func TestLoadNodeTypesIgnoresTenants(t *testing.T) {
	tree := validTree()
	tree["acme/jobs/broken.yaml"] = &fstest.MapFile{Data: []byte("{{{")}
	nts, err := LoadNodeTypes(tree, "tenants")
	require.NoError(t, err)
	require.Len(t, nts, 1)
	assert.Equal(t, "metal3.gpu-h100", nts[0].Object.Name)

	nts, err = LoadNodeTypes(fstest.MapFS{}, "tenants")
	require.NoError(t, err)
	assert.Empty(t, nts)
}

func TestLoadMissingRoot(t *testing.T) {
	_, err := Load(fstest.MapFS{"x": {Data: []byte("file, not folder")}}, "tenants")
	require.NoError(t, err, "a tree with no tenants is valid (nothing to generate)")
}
