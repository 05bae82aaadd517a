package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
)

func TestNodeTypeAllowed(t *testing.T) {
	cases := []struct {
		allowed  []string
		nodeType string
		want     bool
	}{
		{nil, "aws.h100", true},
		{nil, "anything", true},
		{[]string{}, "aws.h100", false},
		{[]string{"aws.h100"}, "aws.h100", true},
		{[]string{"aws.h100"}, "aws.h200", false},
		{[]string{"aws.*"}, "aws.h100", true},
		{[]string{"aws.*"}, "aws.h100.spot", true},
		{[]string{"aws.*"}, "aws", false},
		{[]string{"aws.*"}, "awsx.h100", false},
		{[]string{"aws.*"}, "gcp.l4", false},
		{[]string{"gcp.l4", "aws.*"}, "gcp.l4", true},
		{[]string{"*"}, "aws.h100", false},
		{[]string{".*"}, "aws.h100", false},
		{[]string{"aws.us.*"}, "aws.us.h100", false}, // not a <provider>.* wildcard
		{[]string{"aws.*"}, "", false},
		{[]string{""}, "", false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, policy.NodeTypeAllowed(tc.allowed, tc.nodeType), "%q in %#v", tc.nodeType, tc.allowed)
	}
}

func TestReplicaLayout(t *testing.T) {
	zeroGPU := pt.H100()
	zeroGPU.Spec.GPU.Count = 0
	bigParakeet := pt.Parakeet()
	bigParakeet.Spec.PerReplicaGPUCount = 2
	cases := []struct {
		name    string
		master  *v1alpha1.ModelMaster
		nt      *v1alpha1.NodeType
		want    policy.Layout
		wantErr string
	}{
		{"fits one node", pt.Master("m", 4), pt.H100(), policy.Layout{Nodes: 1, GPUsPerNode: 4}, ""},
		{"a whole node", pt.Master("m", 8), pt.H100(), policy.Layout{Nodes: 1, GPUsPerNode: 8}, ""},
		{"two whole nodes", pt.Master("m", 16), pt.H100(), policy.Layout{Nodes: 2, GPUsPerNode: 8}, ""},
		{"four nodes of four", pt.Master("m", 16), pt.L40S(), policy.Layout{Nodes: 4, GPUsPerNode: 4}, ""},
		{"not whole nodes", pt.Master("m", 12), pt.H100(), policy.Layout{}, "not a whole number of such nodes"},
		{"parakeet on one node", pt.Parakeet(), pt.L4(), policy.Layout{Nodes: 1, GPUsPerNode: 1}, ""},
		{"parakeet beyond one node", bigParakeet, pt.L4(), policy.Layout{}, "a Parakeet replica runs on one node"},
		{"node type without GPUs", pt.Master("m", 8), zeroGPU, policy.Layout{}, "spec.gpu.count 0"},
		{"master without GPUs", pt.Master("m", 0), pt.H100(), policy.Layout{}, "perReplicaGPUCount 0"},
		{"data parallel over two nodes: every node serves its ranks", pt.DataParallelMaster("m", 2, 8), pt.H100(),
			policy.Layout{Nodes: 2, GPUsPerNode: 8, DataParallelLocal: 8}, ""},
		{"TP within the node, DP across nodes", func() *v1alpha1.ModelMaster {
			m := pt.Master("m", 16)
			m.Spec.Args = []string{"--tensor-parallel-size", "8", "--data-parallel-size", "2", "--data-parallel-size-local", "1"}
			m.Spec.TensorParallelSize, m.Spec.DataParallelSize = 8, 2
			return m
		}(), pt.H100(), policy.Layout{Nodes: 2, GPUsPerNode: 8, DataParallelLocal: 1}, ""},
		{"data parallel on one node needs no launcher", pt.DataParallelMaster("m", 1, 8), pt.H100(), policy.Layout{Nodes: 1, GPUsPerNode: 8}, ""},
		{"data-parallel ranks that do not fill the nodes", func() *v1alpha1.ModelMaster {
			m := pt.DataParallelMaster("m", 2, 8)
			m.Spec.Args[len(m.Spec.Args)-1] = "4"
			return m
		}(), pt.H100(), policy.Layout{}, "ModelMaster m spans 2 nodes of NodeType aws.h100 with data parallelism: each node runs " +
			"--data-parallel-size-local data-parallel ranks of tensor 1 x pipeline 1 GPUs, which must fill its 8 GPUs: " +
			"--data-parallel-size-local 8 and --data-parallel-size 16 (the master has --data-parallel-size-local 4 and --data-parallel-size 16)"},
		{"data parallel across nodes without a local size", func() *v1alpha1.ModelMaster {
			m := pt.DataParallelMaster("m", 2, 8)
			m.Spec.Args = m.Spec.Args[:len(m.Spec.Args)-2]
			return m
		}(), pt.H100(), policy.Layout{}, "(the master has no --data-parallel-size-local and --data-parallel-size 16)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := policy.ReplicaLayout(tc.master, tc.nt)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCheckMaster(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(m *v1alpha1.ModelMaster)
		want   string
	}{
		{"sane", func(m *v1alpha1.ModelMaster) {}, ""},
		{"no parallelism set at all", func(m *v1alpha1.ModelMaster) { m.Spec.Args, m.Spec.TensorParallelSize = nil, 0 },
			"spec.tensorParallelSize is missing: must be set, or parallel sizes in spec.args, to use the 8 GPUs the master claims"},
		{"one GPU needs no parallelism", func(m *v1alpha1.ModelMaster) {
			m.Spec.Args, m.Spec.TensorParallelSize, m.Spec.PerReplicaGPUCount = nil, 0, 1
		}, ""},
		{"zero GPUs", func(m *v1alpha1.ModelMaster) {
			m.Spec.PerReplicaGPUCount, m.Spec.Args, m.Spec.TensorParallelSize = 0, nil, 0
		}, "spec.perReplicaGPUCount is 0: must be at least 1"},
		{"unknown runtime", func(m *v1alpha1.ModelMaster) { m.Spec.Runtime = "sglang" },
			`spec.runtime is "sglang": must be "vllm" or "parakeet"`},
		{"empty runtime", func(m *v1alpha1.ModelMaster) { m.Spec.Runtime = "" }, `spec.runtime is ""`},
		{"no model", func(m *v1alpha1.ModelMaster) { m.Spec.Model = "" }, `spec.model is ""`},
		{"tp x pp too small", func(m *v1alpha1.ModelMaster) { m.Spec.TensorParallelSize, m.Spec.Args = 2, nil },
			"spec.perReplicaGPUCount is 8: must equal the GPUs its parallelism uses, tensor 2 x pipeline 1 = 2"},
		{"tp x pp matches", func(m *v1alpha1.ModelMaster) {
			m.Spec.TensorParallelSize, m.Spec.PipelineParallelSize, m.Spec.Args = 4, 2, nil
		}, ""},
		{"args only", func(m *v1alpha1.ModelMaster) {
			m.Spec.TensorParallelSize, m.Spec.Args = 0, []string{"-tp=4", "--pipeline-parallel-size", "2"}
		}, ""},
		{"args disagree with fields", func(m *v1alpha1.ModelMaster) { m.Spec.Args = []string{"--tensor-parallel-size=4"} },
			"spec.tensorParallelSize is 8: spec.args sets --tensor-parallel-size 4: the two must agree"},
		{"data parallel counts", func(m *v1alpha1.ModelMaster) {
			m.Spec.TensorParallelSize, m.Spec.Args = 0, []string{"--data-parallel-size", "8"}
		}, ""},
		{"data parallel field and args agree", func(m *v1alpha1.ModelMaster) {
			m.Spec.TensorParallelSize, m.Spec.DataParallelSize, m.Spec.Args = 0, 8, []string{"--data-parallel-size", "8"}
		}, ""},
		{"data parallel field alone", func(m *v1alpha1.ModelMaster) {
			m.Spec.TensorParallelSize, m.Spec.DataParallelSize, m.Spec.Args = 1, 8, nil
		}, ""},
		{"data parallel field disagrees with the args", func(m *v1alpha1.ModelMaster) {
			m.Spec.TensorParallelSize, m.Spec.DataParallelSize, m.Spec.Args = 0, 4, []string{"--data-parallel-size", "8"}
		}, "spec.dataParallelSize is 4: spec.args sets --data-parallel-size 8: the two must agree"},
		{"bad flag value", func(m *v1alpha1.ModelMaster) { m.Spec.Args = []string{"--tensor-parallel-size", "eight"} },
			`spec.args is "--tensor-parallel-size eight": the size must be a positive whole number`},
		{"flag without value", func(m *v1alpha1.ModelMaster) { m.Spec.Args = []string{"-tp"} }, `"-tp (no value)"`},
		{"huge parallelism", func(m *v1alpha1.ModelMaster) {
			m.Spec.TensorParallelSize, m.Spec.PipelineParallelSize, m.Spec.Args = 2147483647, 2147483647, nil
		}, "spec.perReplicaGPUCount is 8: must equal"},
		{"negative tp", func(m *v1alpha1.ModelMaster) { m.Spec.TensorParallelSize, m.Spec.Args = -1, nil },
			"spec.tensorParallelSize is -1: must be at least 1 when set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := pt.Master("m", 8)
			tc.mutate(m)
			assertViolations(t, policy.CheckMaster(m), tc.want)
		})
	}

	t.Run("parakeet has no parallelism", func(t *testing.T) {
		m := pt.Parakeet()
		assert.Empty(t, policy.CheckMaster(m))
		m.Spec.TensorParallelSize = 1
		assert.Empty(t, policy.CheckMaster(m), "a size of 1 is no parallelism")
		m.Spec.TensorParallelSize = 2
		assertViolations(t, policy.CheckMaster(m), "spec: a tensor parallel size of 2: a Parakeet master has no parallelism")
		m.Spec.TensorParallelSize, m.Spec.Args = 0, []string{"--data-parallel-size", "2"}
		assertViolations(t, policy.CheckMaster(m), "a data parallel size of 2")
	})
}

func TestReviewJob(t *testing.T) {
	qwen4 := pt.Master("qwen-4", 4)
	cases := []struct {
		name   string
		mutate func(j *v1alpha1.ManagedInferenceJob)
		want   string
	}{
		{"allowed", func(j *v1alpha1.ManagedInferenceJob) {}, ""},
		{"master from spec.model", func(j *v1alpha1.ManagedInferenceJob) {
			delete(j.Labels, v1alpha1.LabelModelMaster)
			j.Spec.Model = "qwen-4"
		}, ""},
		{"gpuCount differs from the master", func(j *v1alpha1.ManagedInferenceJob) { j.Spec.GPUCount = 8 },
			"ManagedInferenceJob/acme/chat: spec.gpuCount is 8: must equal perReplicaGPUCount 4 of ModelMaster qwen-4"},
		{"huge gpuCount", func(j *v1alpha1.ManagedInferenceJob) { j.Spec.GPUCount = 2147483647 },
			"spec.gpuCount is 2147483647: must equal perReplicaGPUCount 4"},
		{"no master named", func(j *v1alpha1.ManagedInferenceJob) {
			delete(j.Labels, v1alpha1.LabelModelMaster)
			j.Spec.Model = ""
		}, `spec.model is "": the job names no ModelMaster`},
		{"unknown master", func(j *v1alpha1.ManagedInferenceJob) { j.Labels[v1alpha1.LabelModelMaster] = "gpt-5" },
			`metadata.labels[inferplane.io/model-master] is "gpt-5": no ModelMaster "gpt-5" in the policy data`},
		{"unknown master from spec.model", func(j *v1alpha1.ManagedInferenceJob) {
			delete(j.Labels, v1alpha1.LabelModelMaster)
			j.Spec.Model = "Qwen/Qwen3-32B"
		}, `spec.model is "Qwen/Qwen3-32B": no ModelMaster "Qwen/Qwen3-32B"`},
		{"node type not allowed", func(j *v1alpha1.ManagedInferenceJob) { j.Spec.NodeType = "gcp.l4" },
			`spec.nodeType is "gcp.l4": not allowed for Tenant acme (allowedNodeTypes: [aws.*])`},
		{"empty allow list", func(j *v1alpha1.ManagedInferenceJob) { setTenant(&j.ObjectMeta, "none") },
			`spec.nodeType is "aws.h100": not allowed for Tenant none (allowedNodeTypes: [] (no node type))`},
		{"null allow list", func(j *v1alpha1.ManagedInferenceJob) {
			setTenant(&j.ObjectMeta, "all")
			j.Spec.NodeType = "gcp.l4"
		}, ""},
		{"unknown node type", func(j *v1alpha1.ManagedInferenceJob) { j.Spec.NodeType = "aws.b200" },
			`spec.nodeType is "aws.b200": no NodeType "aws.b200" in the policy data`},
		{"empty node type", func(j *v1alpha1.ManagedInferenceJob) { j.Spec.NodeType = "" }, `spec.nodeType is missing: must name a NodeType; Tenant acme may use: aws.h100, aws.l40s`},
		{"unknown tenant", func(j *v1alpha1.ManagedInferenceJob) { setTenant(&j.ObjectMeta, "globex") },
			`metadata.labels[inferplane.io/tenant] is "globex": no Tenant "globex" in the policy data`},
		{"empty tenant label", func(j *v1alpha1.ManagedInferenceJob) { j.Labels[v1alpha1.LabelTenant] = "" },
			`metadata.labels[inferplane.io/tenant] is "": must name the tenant`},
		{"another tenant's namespace", func(j *v1alpha1.ManagedInferenceJob) { j.Namespace = "globex" },
			`metadata.namespace is "globex": a tenant's workloads live in the namespace named after it: must be "acme"`},
		{"runtime differs", func(j *v1alpha1.ManagedInferenceJob) { j.Spec.Runtime = v1alpha1.RuntimeParakeet },
			`spec.runtime is "parakeet": must match runtime "vllm" of ModelMaster qwen-4`},
		{"no replicas", func(j *v1alpha1.ManagedInferenceJob) { j.Spec.Replicas = 0 }, "spec.replicas is 0: must be at least 1"},
		{"extra args change the GPUs", func(j *v1alpha1.ManagedInferenceJob) {
			j.Spec.ExtraArgs = []string{"--max-model-len", "8192", "--tensor-parallel-size", "8"}
		}, "spec.extraArgs[2]: sets --tensor-parallel-size, which a job may not: the master's parallelism decides the GPUs of a replica"},
		{"extra args set the parallelism, in short forms too", func(j *v1alpha1.ManagedInferenceJob) {
			j.Spec.ExtraArgs = []string{"-tp=2", "--pipeline-parallel-size=2"}
		}, "spec.extraArgs[0]: sets -tp, which a job may not: the master's parallelism decides the GPUs of a replica; pick another master or variant; " +
			"spec.extraArgs[1]: sets --pipeline-parallel-size, which a job may not"},
		{"extra args carry a key, which is not repeated", func(j *v1alpha1.ManagedInferenceJob) {
			j.Spec.ExtraArgs = []string{"--api-key=sk-secret"}
		}, "spec.extraArgs[0]: sets --api-key, which a job may not: API keys are checked by Envoy"},
		{"a master over four L40S nodes", func(j *v1alpha1.ManagedInferenceJob) {
			j.Labels[v1alpha1.LabelModelMaster] = "deepseek-16"
			j.Spec.GPUCount = 16
			j.Spec.NodeType = "aws.l40s"
		}, ""},
		{"insane master", func(j *v1alpha1.ManagedInferenceJob) { j.Labels[v1alpha1.LabelModelMaster] = "broken" },
			`metadata.labels[inferplane.io/model-master] is "broken": ModelMaster broken is invalid: spec.perReplicaGPUCount is 4: must equal the GPUs its parallelism uses, tensor 2 x pipeline 1 = 2`},
	}
	store := pt.Store()
	broken := pt.Master("broken", 4)
	broken.Spec.TensorParallelSize, broken.Spec.Args = 2, nil
	require.NoError(t, store.Add(broken))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := pt.Job("chat", qwen4, "aws.h100")
			tc.mutate(j)
			assertReview(t, store, j, tc.want)
		})
	}

	t.Run("a multi-node master on a node type it does not divide", func(t *testing.T) {
		twelve := pt.Master("odd-12", 12)
		s := pt.Store()
		require.NoError(t, s.Add(twelve))
		assertReview(t, s, pt.Job("chat", twelve, "aws.h100"),
			`spec.nodeType is "aws.h100": perReplicaGPUCount 12 of ModelMaster odd-12 is more than one node of NodeType aws.h100 holds (8 GPUs) and not a whole number of such nodes`)
	})
	t.Run("a parakeet job on more than one node", func(t *testing.T) {
		p := pt.Parakeet()
		p.Name, p.Spec.PerReplicaGPUCount = "parakeet-2", 2
		s := pt.Store()
		require.NoError(t, s.Add(p))
		j := pt.Job("asr", p, "gcp.l4")
		setTenant(&j.ObjectMeta, "all")
		j.Namespace = "all"
		assertReview(t, s, j, "a Parakeet replica runs on one node, but perReplicaGPUCount 2 of ModelMaster parakeet-2 exceeds the 1 GPU per node of NodeType gcp.l4")
	})
}

func TestReviewVirtualMachine(t *testing.T) {
	h100, l40s := pt.H100(), pt.L40S()
	qwen4, deepseek16, dep16 := pt.Master("qwen-4", 4), pt.Master("deepseek-16", 16), pt.DataParallelMaster("dep-16", 2, 8)
	single := func() *kubevirtv1.VirtualMachine { return pt.VM("chat", 0, 0, qwen4, h100) }
	worker := func() *kubevirtv1.VirtualMachine { return pt.VM("big", 1, 1, deepseek16, h100) }
	type tc struct {
		name string
		vm   func() *kubevirtv1.VirtualMachine
		want string
	}
	mut := func(name string, base func() *kubevirtv1.VirtualMachine, f func(vm *kubevirtv1.VirtualMachine), want string) tc {
		return tc{name, func() *kubevirtv1.VirtualMachine { vm := base(); f(vm); return vm }, want}
	}
	ok := func(*kubevirtv1.VirtualMachine) {}
	tmpl := func(vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachineInstanceSpec {
		return &vm.Spec.Template.Spec
	}
	setLabel := func(k, v string) func(vm *kubevirtv1.VirtualMachine) {
		return func(vm *kubevirtv1.VirtualMachine) {
			vm.Labels[k] = v
			vm.Spec.Template.ObjectMeta.Labels[k] = v
		}
	}
	cases := []tc{
		mut("single-node replica", single, ok, ""),
		mut("multi-node head", func() *kubevirtv1.VirtualMachine { return pt.VM("big", 0, 0, deepseek16, h100) }, ok, ""),
		mut("multi-node worker", worker, ok, ""),
		mut("four-node replica on L40S", func() *kubevirtv1.VirtualMachine { return pt.VM("big", 0, 3, deepseek16, l40s) }, ok, ""),
		mut("too many GPUs on one VM", single, func(vm *kubevirtv1.VirtualMachine) {
			d := &tmpl(vm).Domain.Devices
			d.GPUs = append(d.GPUs, d.GPUs[0])
		}, "VirtualMachine/acme/chat-r0-n0: spec.template.spec.domain.devices.gpus is 5: must be 4: a replica of ModelMaster qwen-4 needs 4 GPUs, which fit one node of NodeType aws.h100 (8 GPUs): one VM with all 4"),
		mut("too few GPUs on one VM", single, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).Domain.Devices.GPUs = tmpl(vm).Domain.Devices.GPUs[:2]
		}, "gpus is 2: must be 4"),
		mut("a multi-node VM with part of a node", worker, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).Domain.Devices.GPUs = tmpl(vm).Domain.Devices.GPUs[:4]
		}, "gpus is 4: must be 8: a replica of ModelMaster deepseek-16 needs 16 GPUs, 2 whole nodes of NodeType aws.h100: each VM takes all 8 GPUs of its node"),
		mut("a node rank beyond the replica", func() *kubevirtv1.VirtualMachine {
			vm := pt.VM("big", 1, 1, deepseek16, h100)
			vm.Name = "big-r1-n2"
			setLabel(v1alpha1.LabelNodeRank, "2")(vm)
			return vm
		}, ok, `spec.template.metadata.labels[inferplane.io/node-rank] is "2": must be below 2, the nodes of one replica of ModelMaster deepseek-16 on NodeType aws.h100`),
		mut("a second VM on a single-node replica", func() *kubevirtv1.VirtualMachine {
			vm := pt.VM("chat", 0, 0, qwen4, h100)
			vm.Name = "chat-r0-n1"
			setLabel(v1alpha1.LabelNodeRank, "1")(vm)
			setLabel(v1alpha1.LabelRole, v1alpha1.RoleWorker)(vm)
			return vm
		}, ok, `node-rank] is "1": must be below 1`),
		mut("name does not follow the labels", single, func(vm *kubevirtv1.VirtualMachine) { vm.Name = "chat-extra" },
			`metadata.name is "chat-extra": must be "chat-r0-n0", <job>-r<replica>-n<node-rank> from its labels`),
		mut("data-parallel worker: it serves", func() *kubevirtv1.VirtualMachine { return pt.VM("dep", 0, 1, dep16, h100) }, ok, ""),
		mut("data-parallel worker without the serving label", func() *kubevirtv1.VirtualMachine { return pt.VM("dep", 0, 1, dep16, h100) },
			func(vm *kubevirtv1.VirtualMachine) {
				delete(vm.Labels, v1alpha1.LabelServing)
				delete(vm.Spec.Template.ObjectMeta.Labels, v1alpha1.LabelServing)
			}, `spec.template.metadata.labels[inferplane.io/serving] is missing: must be "true" on node-rank 1: every node of a replica of ModelMaster dep-16 runs its own 8 data-parallel ranks and answers requests for them`),
		mut("head without the serving label", single, func(vm *kubevirtv1.VirtualMachine) {
			delete(vm.Labels, v1alpha1.LabelServing)
			delete(vm.Spec.Template.ObjectMeta.Labels, v1alpha1.LabelServing)
		}, `spec.template.metadata.labels[inferplane.io/serving] is missing: must be "true" on node-rank 0: the head of a replica answers requests`),
		mut("a --headless worker labelled serving", worker, setLabel(v1alpha1.LabelServing, v1alpha1.ServingValue),
			`spec.template.metadata.labels[inferplane.io/serving] is "true": must be absent on node-rank 1: a worker of a replica of ModelMaster deepseek-16 runs --headless and answers no requests`),
		mut("serving label with another value", single, setLabel(v1alpha1.LabelServing, "yes"),
			`spec.template.metadata.labels[inferplane.io/serving] is "yes": must be "true" on node-rank 0`),
		mut("template drops the VM's serving label", single, func(vm *kubevirtv1.VirtualMachine) {
			delete(vm.Spec.Template.ObjectMeta.Labels, v1alpha1.LabelServing)
		}, `spec.template.metadata.labels[inferplane.io/serving] is missing: must repeat the VirtualMachine's label inferplane.io/serving="true"`),
		mut("worker labelled head", worker, setLabel(v1alpha1.LabelRole, v1alpha1.RoleHead),
			`spec.template.metadata.labels[inferplane.io/role] is "head": must be "worker" for node-rank 1 (rank 0 is the head)`),
		mut("replica label not a number", single, setLabel(v1alpha1.LabelReplica, "01"),
			`spec.template.metadata.labels[inferplane.io/replica] is "01": must be a whole number`),
		mut("multi-node without rack affinity", worker, func(vm *kubevirtv1.VirtualMachine) { tmpl(vm).Affinity = nil },
			`spec.template.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution: no rack term: a replica spanning 2 nodes runs in one rack: it needs a required pod affinity with topologyKey "topology.inferplane.io/rack"`),
		mut("rack affinity on another topology key", worker, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey = corev1.LabelHostname
		}, "no rack term"),
		mut("rack affinity that ignores the replica", worker, func(vm *kubevirtv1.VirtualMachine) {
			delete(tmpl(vm).Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels, v1alpha1.LabelReplica)
		}, "no rack term"),
		mut("rack affinity through matchLabelKeys", worker, func(vm *kubevirtv1.VirtualMachine) {
			term := &tmpl(vm).Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
			delete(term.LabelSelector.MatchLabels, v1alpha1.LabelReplica)
			term.MatchLabelKeys = []string{v1alpha1.LabelReplica}
		}, ""),
		mut("rack affinity with a custom rack label", func() *kubevirtv1.VirtualMachine {
			nt := pt.H100()
			nt.Spec.RackLabel = "example.com/rack"
			return pt.VM("big", 1, 1, deepseek16, nt)
		}, ok, `topologyKey "topology.inferplane.io/rack"`),
		mut("node type not allowed", func() *kubevirtv1.VirtualMachine { return pt.VM("small", 0, 0, pt.Master("qwen-4", 4), l4()) }, ok,
			`spec.template.metadata.labels[inferplane.io/node-type] is "gcp.l4": not allowed for Tenant acme (allowedNodeTypes: [aws.*])`),
		mut("wrong GPU device", single, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).Domain.Devices.GPUs[1].DeviceName = "nvidia.com/GB200"
		}, `spec.template.spec.domain.devices.gpus[1].deviceName is "nvidia.com/GB200": must be "nvidia.com/GH100_H100_SXM5_80GB", the GPU of NodeType aws.h100`),
		mut("GPU through a DRA claim", single, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).Domain.Devices.GPUs[0].DeviceName = ""
		}, `gpus[0].deviceName is "": must be "nvidia.com/GH100_H100_SXM5_80GB"`),
		mut("GPU passed as a host device", worker, func(vm *kubevirtv1.VirtualMachine) {
			d := &tmpl(vm).Domain.Devices
			d.HostDevices[0].DeviceName = h100.Spec.GPU.ResourceName
		}, `spec.template.spec.domain.devices.hostDevices[0].deviceName is "nvidia.com/GH100_H100_SXM5_80GB": must be "nvidia.com/mlnx_ib_vf", the InfiniBand function of NodeType aws.h100 (GPUs go in devices.gpus)`),
		mut("host device on a node type without any", func() *kubevirtv1.VirtualMachine {
			vm := pt.VM("chat", 0, 0, qwen4, l40s)
			tmpl(vm).Domain.Devices.HostDevices = []kubevirtv1.HostDevice{{Name: "x", DeviceName: "nvidia.com/AD102GL_L40S"}}
			return vm
		}, ok, "NodeType aws.l40s passes through no host devices"),
		mut("too many InfiniBand functions", worker, func(vm *kubevirtv1.VirtualMachine) {
			d := &tmpl(vm).Domain.Devices
			d.HostDevices = append(d.HostDevices, d.HostDevices[0])
		}, "spec.template.spec.domain.devices.hostDevices is 5: must be at most 4"),
		mut("GPU as a plain resource", single, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).Domain.Resources.Limits = corev1.ResourceList{"nvidia.com/GH100_H100_SXM5_80GB": resource.MustParse("8")}
		}, `spec.template.spec.domain.resources.limits[nvidia.com/GH100_H100_SXM5_80GB] is "8": device-plugin resources are passed through devices.gpus`),
		mut("node selector of another node type", single, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).NodeSelector = map[string]string{v1alpha1.DefaultNodeTypeLabel: "aws.l40s"}
		}, `spec.template.spec.nodeSelector[inferplane.io/node-type] is "aws.l40s": must be "aws.h100" to select nodes of NodeType aws.h100`),
		mut("no node selector", single, func(vm *kubevirtv1.VirtualMachine) { tmpl(vm).NodeSelector = nil },
			`spec.template.spec.nodeSelector[inferplane.io/node-type] is missing`),
		mut("extra node selector keys narrow further", single, func(vm *kubevirtv1.VirtualMachine) {
			tmpl(vm).NodeSelector["zone"] = "a"
		}, ""),
		mut("template label differs from the VM's", single, func(vm *kubevirtv1.VirtualMachine) {
			vm.Spec.Template.ObjectMeta.Labels[v1alpha1.LabelNodeType] = "aws.l40s"
		}, `spec.template.metadata.labels[inferplane.io/node-type] is "aws.l40s": must repeat the VirtualMachine's label inferplane.io/node-type="aws.h100"`),
		mut("template without labels", single, func(vm *kubevirtv1.VirtualMachine) { vm.Spec.Template.ObjectMeta.Labels = nil },
			`spec.template.metadata.labels[inferplane.io/tenant] is missing: must repeat`),
		mut("no master label", single, func(vm *kubevirtv1.VirtualMachine) {
			delete(vm.Labels, v1alpha1.LabelModelMaster)
			delete(vm.Spec.Template.ObjectMeta.Labels, v1alpha1.LabelModelMaster)
		}, "spec.template.metadata.labels[inferplane.io/model-master] is missing: required on inferplane workloads"),
		mut("unknown master", single, setLabel(v1alpha1.LabelModelMaster, "gpt-5"), `no ModelMaster "gpt-5"`),
		mut("runtime label differs from the master", single, setLabel(v1alpha1.LabelRuntime, "parakeet"),
			`spec.template.metadata.labels[inferplane.io/runtime] is "parakeet": must match runtime "vllm" of ModelMaster qwen-4`),
		mut("annotation lies about the GPU count", single, func(vm *kubevirtv1.VirtualMachine) {
			vm.Spec.Template.ObjectMeta.Annotations[v1alpha1.AnnotationPerReplicaGPUCount] = "2"
		}, `spec.template.metadata.annotations[inferplane.io/per-replica-gpu-count] is "2": must be "4" when set (ModelMaster qwen-4)`),
		mut("annotation lies about the nodes", worker, func(vm *kubevirtv1.VirtualMachine) {
			vm.Spec.Template.ObjectMeta.Annotations[v1alpha1.AnnotationReplicaNodes] = "1"
		}, `annotations[inferplane.io/replica-nodes] is "1": must be "2" when set`),
		mut("another tenant's namespace", single, func(vm *kubevirtv1.VirtualMachine) { vm.Namespace = "globex" },
			`metadata.namespace is "globex"`),
		mut("no template", single, func(vm *kubevirtv1.VirtualMachine) { vm.Spec.Template = nil },
			"spec.template is missing: an inferplane VirtualMachine needs a VMI template"),
		mut("guarded through the template only", single, func(vm *kubevirtv1.VirtualMachine) { vm.Labels = nil }, ""),
	}
	store := pt.Store()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { assertReview(t, store, tc.vm(), tc.want) })
	}

	t.Run("a parakeet VM", func(t *testing.T) {
		vm := pt.VM("asr", 0, 0, pt.Parakeet(), l40s)
		assertReview(t, store, vm, "")
	})
}

func l4() *v1alpha1.NodeType { return pt.L4() }

func TestReviewVirtualMachineInstance(t *testing.T) {
	store := pt.Store()
	qwen4, deepseek16 := pt.Master("qwen-4", 4), pt.Master("deepseek-16", 16)
	assertReview(t, store, pt.VMI("chat", 0, 0, qwen4, pt.H100()), "")
	assertReview(t, store, pt.VMI("big", 2, 1, deepseek16, pt.H100()), "")

	vmi := pt.VMI("chat", 0, 0, qwen4, pt.H100())
	vmi.Spec.Domain.Devices.GPUs = append(vmi.Spec.Domain.Devices.GPUs, vmi.Spec.Domain.Devices.GPUs...)
	assertReview(t, store, vmi, "VirtualMachineInstance/acme/chat-r0-n0: spec.domain.devices.gpus is 8: must be 4")

	vmi = pt.VMI("big", 0, 1, deepseek16, pt.H100())
	vmi.Spec.Affinity = nil
	assertReview(t, store, vmi, "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution: no rack term")

	vmi = pt.VMI("chat", 0, 0, qwen4, pt.H100())
	vmi.Labels[v1alpha1.LabelNodeType] = "gcp.l4"
	assertReview(t, store, vmi, `metadata.labels[inferplane.io/node-type] is "gcp.l4": not allowed for Tenant acme`)
}

func TestReviewModelMaster(t *testing.T) {
	store := pt.Store()
	assertReview(t, store, pt.Master("m", 8), "")
	m := pt.Master("m", 8)
	m.Spec.PerReplicaGPUCount = 6
	assertReview(t, store, m, "ModelMaster/m: spec.perReplicaGPUCount is 6: must equal the GPUs its parallelism uses, tensor 8 x pipeline 1 = 8")
	delete(m.Labels, v1alpha1.LabelTenant)
	res, err := policy.Review(context.Background(), store, m)
	require.NoError(t, err)
	assert.True(t, res.Allowed() && !res.Guarded, "an unlabelled master is not inferplane's")
}

// TestUnlabelledObjectsPassUntouched: without the inferplane.io/tenant label nothing is checked,
// however wrong the object would be for inferplane.
func TestUnlabelledObjectsPassUntouched(t *testing.T) {
	store := pt.Store()
	job := pt.Job("chat", pt.Master("qwen-4", 4), "gcp.l4")
	job.Labels = nil
	job.Spec.GPUCount = 64
	vm := pt.VM("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100())
	vm.Labels, vm.Spec.Template.ObjectMeta.Labels = map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}, nil
	vm.Spec.Template.Spec.Domain.Devices.GPUs = append(vm.Spec.Template.Spec.Domain.Devices.GPUs, vm.Spec.Template.Spec.Domain.Devices.GPUs...)
	vmi := pt.VMI("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100())
	vmi.Labels = nil
	vmi.Spec.NodeSelector = nil
	for _, obj := range []client.Object{job, vm, vmi, pt.Tenant("x", nil), pt.H100()} {
		res, err := policy.Review(context.Background(), store, obj)
		require.NoError(t, err)
		assert.False(t, res.Guarded, res.Ref.String())
		assert.True(t, res.Allowed(), res.Message())
	}
}

type failingSource struct{ policy.Source }

func (failingSource) Tenant(context.Context, string) (*v1alpha1.Tenant, error) {
	return nil, errors.New("cache not started")
}

// TestReadErrorsFailClosed: policy data that cannot be read is an error, never an allow.
func TestReadErrorsFailClosed(t *testing.T) {
	src := failingSource{pt.Store()}
	_, err := policy.Review(context.Background(), src, pt.Job("chat", pt.Master("qwen-4", 4), "aws.h100"))
	require.ErrorContains(t, err, "cache not started")
	_, err = policy.Review(context.Background(), src, pt.VM("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100()))
	require.ErrorContains(t, err, "cache not started")
}

func TestStore(t *testing.T) {
	s, err := policy.NewStore(pt.Master("m", 8), pt.Master("m", 8))
	require.NoError(t, err, "the same master twice is fine")
	other := pt.Master("m", 4)
	require.ErrorContains(t, s.Add(other), `ModelMaster "m" is defined twice with different specs`)
	require.ErrorContains(t, s.Add(&v1alpha1.Tenant{}), "Tenant without metadata.name")
	require.NoError(t, s.Add(&kubevirtv1.VirtualMachine{}), "other kinds are ignored")
	_, err = s.Master(context.Background(), "nope")
	require.True(t, policy.IsNotFound(err))
	assert.Equal(t, []string{"m"}, s.Names(v1alpha1.KindModelMaster))
}

// TestReviewObjects: offline, policy data comes from the objects themselves.
func TestReviewObjects(t *testing.T) {
	qwen := pt.Master("qwen-4", 4)
	good := pt.VM("chat", 0, 0, qwen, pt.H100())
	bad := pt.VM("chat", 1, 0, qwen, pt.H100())
	bad.Spec.Template.Spec.Domain.Devices.GPUs = nil
	objs := []client.Object{pt.Acme(), pt.H100(), qwen, pt.Job("chat", qwen, "aws.h100"), good, bad}
	res, err := policy.ReviewObjects(context.Background(), nil, objs)
	require.NoError(t, err)
	require.Len(t, res, len(objs))
	for i, r := range res[:5] {
		assert.True(t, r.Allowed(), "%d %s", i, r.Message())
	}
	assert.Equal(t, "VirtualMachine/acme/chat-r1-n0", res[5].Ref.String())
	assert.Contains(t, res[5].Reasons(), "gpus is 0: must be 4")

	conflicting := pt.Master("qwen-4", 8)
	_, err = policy.ReviewObjects(context.Background(), nil, append(objs, conflicting))
	require.ErrorContains(t, err, "defined twice")

	// The objects' own data wins over the base; the base fills in what they lack.
	base, err := policy.NewStore(pt.Tenant("acme", []string{}), pt.H100(), pt.Master("deepseek-16", 16))
	require.NoError(t, err)
	res, err = policy.ReviewObjects(context.Background(), base, objs)
	require.NoError(t, err)
	assert.True(t, res[3].Allowed(), "the tenant in objs allows aws.*: %s", res[3].Message())
	res, err = policy.ReviewObjects(context.Background(), base, []client.Object{pt.VM("big", 0, 0, pt.Master("deepseek-16", 16), pt.H100())})
	require.NoError(t, err)
	assert.Contains(t, res[0].Message(), "allowedNodeTypes: [] (no node type)", "the tenant comes from the base")
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name    string
		raw     string
		strict  bool
		wantErr string
	}{
		{"job", `{"apiVersion":"inferplane.io/v1alpha1","kind":"ManagedInferenceJob","metadata":{"name":"a"},"spec":{"gpuCount":4}}`, true, ""},
		{"unknown field, lenient", `{"kind":"ManagedInferenceJob","spec":{"gpus":4}}`, false, ""},
		{"unknown field, strict", `{"kind":"ManagedInferenceJob","spec":{"gpus":4}}`, true, `unknown field "spec.gpus"`},
		{"duplicate field, strict", `{"kind":"ManagedInferenceJob","spec":{"gpuCount":4,"gpuCount":8}}`, true, `duplicate field "spec.gpuCount"`},
		{"wrong kind", `{"kind":"Pod"}`, false, `the object says kind "Pod" where "ManagedInferenceJob" was expected`},
		{"huge number", `{"spec":{"gpuCount":1e40}}`, false, "gpuCount"},
		{"string for number", `{"spec":{"gpuCount":"4"}}`, false, "gpuCount"},
		{"not an object", `[1,2]`, false, "not a JSON object"},
		{"null", `null`, false, "not a JSON object"},
		{"empty", ``, false, "not a JSON object"},
		{"truncated", `{"spec":`, false, "ManagedInferenceJob"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := policy.Decode(policy.GroupKindJob, []byte(tc.raw), tc.strict)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.IsType(t, &v1alpha1.ManagedInferenceJob{}, obj)
		})
	}
	obj, err := policy.Decode(policy.GroupKindTenant, []byte(`{"metadata":{"name":"acme"},"spec":{"tier":"x","allowedNodeTypes":[]}}`), true)
	require.NoError(t, err)
	assert.NotNil(t, obj.(*v1alpha1.Tenant).Spec.AllowedNodeTypes, "an empty list stays empty, not null")
	obj, err = policy.Decode(policy.GroupKindTenant, []byte(`{"metadata":{"name":"acme"},"spec":{"tier":"x","allowedNodeTypes":null}}`), true)
	require.NoError(t, err)
	assert.Nil(t, obj.(*v1alpha1.Tenant).Spec.AllowedNodeTypes)
	obj, err = policy.Decode(metav1.SchemeGroupVersion.WithKind("Status").GroupKind(), []byte(`{}`), true)
	require.NoError(t, err)
	assert.Nil(t, obj, "kinds the policy does not read decode to nil")
}

func setTenant(m *metav1.ObjectMeta, tenant string) {
	m.Labels[v1alpha1.LabelTenant] = tenant
	m.Namespace = tenant
}

func assertViolations(t *testing.T, errs field.ErrorList, want string) {
	t.Helper()
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = fielderr.Describe(e)
	}
	got := strings.Join(msgs, "; ")
	if want == "" {
		assert.Empty(t, got)
		return
	}
	assert.Contains(t, got, want)
}

func assertReview(t *testing.T, src policy.Source, obj client.Object, want string) {
	t.Helper()
	res, err := policy.Review(context.Background(), src, obj)
	require.NoError(t, err)
	require.True(t, res.Guarded, "the fixture is guarded")
	if want == "" {
		assert.True(t, res.Allowed(), res.Message())
		return
	}
	require.False(t, res.Allowed(), "want a denial containing %q", want)
	assert.Contains(t, res.Message(), want)
}

func TestReviewFiles(t *testing.T) {
	qwen := pt.Master("qwen-4", 4)
	vm := pt.VM("chat", 0, 0, qwen, pt.H100())
	bad := pt.VM("chat", 1, 0, qwen, pt.H100())
	bad.Spec.Template.Spec.Domain.Devices.GPUs = nil
	enc := func(objs ...client.Object) []byte {
		var out []byte
		for _, o := range objs {
			b, err := json.Marshal(o)
			require.NoError(t, err)
			out = append(out, b...)
			out = append(out, '\n')
		}
		return out
	}
	files := map[string][]byte{
		"vcluster.yaml":           []byte("controlPlane:\n  distro: {}\n"),
		"platform/tenant.yaml":    enc(pt.Acme()),
		"platform/nodetypes.yaml": enc(pt.H100()),
		"jobs/chat/master.yaml":   enc(qwen),
		"jobs/chat/vms.yaml":      enc(vm, bad),
		"jobs/chat/other.yaml":    []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
	}
	d, err := policy.DecodeFiles(files)
	require.NoError(t, err)
	assert.Equal(t, []string{"vcluster.yaml"}, d.Skipped)
	assert.Equal(t, 5, d.Files)
	assert.Equal(t, 6, d.Documents)
	assert.Len(t, d.Objects, 5, "the ConfigMap is not the policy's")

	denied, err := policy.ReviewFiles(context.Background(), nil, files)
	require.NoError(t, err)
	require.Len(t, denied, 1)
	assert.Equal(t, "VirtualMachine/acme/chat-r1-n0", denied[0].Ref.String())

	files["jobs/chat/broken.yaml"] = []byte("apiVersion: v1\nmetadata: {name: x}\n")
	_, err = policy.ReviewFiles(context.Background(), nil, files)
	require.ErrorContains(t, err, "jobs/chat/broken.yaml: document 1: apiVersion and kind are required")
}
