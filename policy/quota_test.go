package policy_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/policy"
	pt "github.com/inferplane/inferplane/policy/policytest"
)

// quotaTenant is acme with a quota in force.
func quotaTenant(gpus, jobs, replicasPerJob int32) *v1alpha1.Tenant {
	t := pt.Acme()
	t.Spec.Quota = &v1alpha1.Quota{GPUs: gpus, Jobs: jobs, ReplicasPerJob: replicasPerJob}
	return t
}

// TestCheckJobQuota is the quota's arithmetic: replicas x GPUs per replica summed over the
// tenant's jobs, multi-node replicas counted whole, Parakeet's one GPU, replica changes, and
// a quota lowered below what runs, which keeps what runs and refuses only growth.
func TestCheckJobQuota(t *testing.T) {
	job := func(name string, m *v1alpha1.ModelMaster, replicas int32) *v1alpha1.ManagedInferenceJob {
		j := pt.Job(name, m, "aws.h100")
		j.Spec.Replicas = replicas
		return j
	}
	claim := func(name string, replicas int32, gpus int64) policy.Claim {
		return policy.Claim{Job: name, Replicas: replicas, GPUs: gpus}
	}
	was := func(replicas int32, gpus int64) *policy.Claim { c := claim("x", replicas, gpus); return &c }
	qwen4, deepseek16, parakeet := pt.Master("qwen-4", 4), pt.Master("deepseek-16", 16), pt.Parakeet()
	others := []policy.Claim{claim("chat", 2, 8), claim("asr", 1, 1)} // 9 GPUs
	cases := []struct {
		name   string
		tenant *v1alpha1.Tenant
		job    *v1alpha1.ManagedInferenceJob
		others []policy.Claim
		before *policy.Claim
		want   string
	}{
		{"no quota: anything goes", pt.Acme(), job("big", deepseek16, 40), others, nil, ""},
		{"a new job that fits exactly", quotaTenant(17, 0, 0), job("x", qwen4, 2), others, nil, ""},
		{"a new job one GPU over", quotaTenant(16, 0, 0), job("x", qwen4, 2), others,
			nil, `spec.replicas is 2: needs 8 GPUs (2 replicas x 4), but Tenant acme's GPU quota is 16 and its other jobs use 9 (asr 1x1, chat 2x4): 7 left`},
		{"a multi-node replica counts its every node", quotaTenant(24, 0, 0), job("x", deepseek16, 1), others,
			nil, `spec.replicas is 1: needs 16 GPUs (1 replica x 16), but Tenant acme's GPU quota is 24 and its other jobs use 9 (asr 1x1, chat 2x4): 15 left`},
		{"a multi-node replica that fits", quotaTenant(25, 0, 0), job("x", deepseek16, 1), others, nil, ""},
		{"Parakeet's one GPU, one over", quotaTenant(9, 0, 0), job("x", parakeet, 1), others,
			nil, `spec.replicas is 1: needs 1 GPU (1 replica x 1), but Tenant acme's GPU quota is 9 and its other jobs use 9 (asr 1x1, chat 2x4): 0 left`},
		{"no other job", quotaTenant(4, 0, 0), job("x", qwen4, 2), nil,
			nil, `spec.replicas is 2: needs 8 GPUs (2 replicas x 4), but Tenant acme's GPU quota is 4 and its other jobs use 0: 4 left`},
		{"more replicas past the quota", quotaTenant(20, 0, 0), job("x", qwen4, 3), others,
			was(2, 8), `spec.replicas is 3: needs 12 GPUs (3 replicas x 4), but Tenant acme's GPU quota is 20 and its other jobs use 9 (asr 1x1, chat 2x4): 11 left`},
		{"more replicas within the quota", quotaTenant(21, 0, 0), job("x", qwen4, 3), others, was(2, 8), ""},
		{"a quota lowered below what runs keeps it", quotaTenant(4, 0, 0), job("x", qwen4, 2), others, was(2, 8), ""},
		{"and lets it shrink", quotaTenant(4, 0, 0), job("x", qwen4, 1), others, was(2, 8), ""},
		{"but refuses any growth", quotaTenant(4, 0, 0), job("x", qwen4, 3), others,
			was(2, 8), `spec.replicas is 3: needs 12 GPUs (3 replicas x 4), but Tenant acme's GPU quota is 4 and its other jobs use 9 (asr 1x1, chat 2x4): 0 left`},
		{"one job more than the jobs quota", quotaTenant(0, 2, 0), job("x", qwen4, 1), others,
			nil, `metadata.name is "x": would be job 3 of Tenant acme, whose quota is 2 jobs (it has asr, chat)`},
		{"a job that exists is not one more", quotaTenant(0, 2, 0), job("x", qwen4, 1), others, was(1, 4), ""},
		{"replicas past the replicas per job", quotaTenant(0, 0, 4), job("x", qwen4, 5), nil,
			nil, `spec.replicas is 5: must be at most 4, Tenant acme's quota of replicas per job`},
		{"replicas per job lowered below what runs keeps them", quotaTenant(0, 0, 4), job("x", qwen4, 5), nil, was(6, 24), ""},
		{"every figure at once", quotaTenant(10, 2, 1), job("x", qwen4, 2), others, nil,
			`spec.replicas is 2: must be at most 1, Tenant acme's quota of replicas per job; ` +
				`metadata.name is "x": would be job 3 of Tenant acme, whose quota is 2 jobs (it has asr, chat); ` +
				`spec.replicas is 2: needs 8 GPUs (2 replicas x 4), but Tenant acme's GPU quota is 10 and its other jobs use 9 (asr 1x1, chat 2x4): 1 left`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, fielderr.Join(policy.CheckJobQuota(c.tenant, c.job, c.others, c.before)))
		})
	}
}

// counter is the policy data of pt.Store with a count of what the tenant's cluster runs: a
// Counter as the webhook's is, in memory.
type counter struct {
	*policy.Store
	running *policy.Running
	err     error
	calls   int
}

func (c *counter) Running(context.Context, string, string) (*policy.Running, error) {
	c.calls++
	return c.running, c.err
}

// TestWorkloadQuota: admission holds a new VM to its tenant's GPU quota beside the GPUs of
// every VM the cluster runs (a multi-node replica's every node), keeps a VM that runs, skips
// a VMI its VM owns, and fails closed when the count fails.
func TestWorkloadQuota(t *testing.T) {
	tenant := quotaTenant(22, 0, 0)
	store, err := policy.NewStore(tenant, pt.H100(), pt.Master("deepseek-16", 16), pt.Master("qwen-4", 4))
	require.NoError(t, err)
	deepseek, qwen := pt.Master("deepseek-16", 16), pt.Master("qwen-4", 4)
	running := &policy.Running{Nodes: []policy.NodeClaim{
		{Name: "big-r0-n0", Job: "big", Replica: "0", GPUs: 8}, {Name: "big-r0-n1", Job: "big", Replica: "0", GPUs: 8},
		{Name: "chat-r0-n0", Job: "chat", Replica: "0", GPUs: 4},
	}}
	review := func(c *counter, obj client.Object) (policy.Result, error) {
		return policy.Review(context.Background(), c, obj)
	}
	t.Run("a new node over the quota", func(t *testing.T) {
		c := &counter{Store: store, running: running}
		res, err := review(c, pt.VM("chat", 1, 0, qwen, pt.H100()))
		require.NoError(t, err)
		assert.Equal(t, `spec.template.spec.domain.devices.gpus is 4: needs 4 GPUs (VirtualMachine acme/chat-r1-n0, node 0 of replica 1 of job chat), `+
			`but Tenant acme's GPU quota is 22 and its other VMs use 20 (big 1x16, chat 1x4): 2 left`, res.Reasons())
		assert.Equal(t, 1, c.calls)
	})
	t.Run("the second node of a multi-node replica counts the first", func(t *testing.T) {
		c := &counter{Store: store, running: &policy.Running{Nodes: running.Nodes[:1]}}
		res, err := review(c, pt.VM("big", 0, 1, deepseek, pt.H100()))
		require.NoError(t, err)
		assert.True(t, res.Allowed(), res.Reasons())
		c.running = &policy.Running{Nodes: append(append([]policy.NodeClaim{}, running.Nodes[:1]...), policy.NodeClaim{Name: "other-r0-n0", Job: "other", Replica: "0", GPUs: 12})}
		res, err = review(c, pt.VM("big", 0, 1, deepseek, pt.H100()))
		require.NoError(t, err)
		assert.Equal(t, `spec.template.spec.domain.devices.gpus is 8: needs 8 GPUs (VirtualMachine acme/big-r0-n1, node 1 of replica 0 of job big), `+
			`but Tenant acme's GPU quota is 22 and its other VMs use 20 (big 1x8, other 1x12): 2 left`, res.Reasons())
	})
	t.Run("a node that runs is kept under a lowered quota", func(t *testing.T) {
		low := quotaTenant(4, 0, 0)
		s, err := policy.NewStore(low, pt.H100(), deepseek)
		require.NoError(t, err)
		res, err := review(&counter{Store: s, running: running}, pt.VM("big", 0, 1, deepseek, pt.H100()))
		require.NoError(t, err)
		assert.True(t, res.Allowed(), res.Reasons())
	})
	t.Run("a VMI its VM owns was held to the quota with the VM", func(t *testing.T) {
		c := &counter{Store: store, running: running}
		vmi := pt.VMI("chat", 1, 0, qwen, pt.H100())
		vmi.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "chat-r1-n0", UID: "u"}}
		res, err := review(c, vmi)
		require.NoError(t, err)
		assert.True(t, res.Allowed(), res.Reasons())
		assert.Zero(t, c.calls, "nothing counted for it")
		vmi.OwnerReferences = nil
		res, err = review(c, vmi)
		require.NoError(t, err)
		assert.False(t, res.Allowed(), "a VMI no VM owns is held to the quota itself")
	})
	t.Run("the job over the quota beside the cluster's jobs", func(t *testing.T) {
		c := &counter{Store: store, running: &policy.Running{Jobs: []policy.Claim{{Job: "big", Replicas: 1, GPUs: 16}}}}
		j := pt.Job("chat", qwen, "aws.h100")
		j.Spec.Replicas = 3
		res, err := review(c, j)
		require.NoError(t, err)
		assert.Equal(t, `spec.replicas is 3: needs 12 GPUs (3 replicas x 4), but Tenant acme's GPU quota is 22 and its other jobs use 16 (big 1x16): 6 left`, res.Reasons())
		c.running.Jobs = append(c.running.Jobs, policy.Claim{Job: "chat", Replicas: 3, GPUs: 12})
		c.running.Jobs[0].GPUs = 20
		res, err = review(c, j)
		require.NoError(t, err)
		assert.True(t, res.Allowed(), "the job runs so already: %s", res.Reasons())
	})
	t.Run("a count that fails refuses (fail closed)", func(t *testing.T) {
		_, err := review(&counter{Store: store, err: errors.New("connection refused")}, pt.VM("chat", 1, 0, qwen, pt.H100()))
		require.ErrorContains(t, err, "count what tenant acme runs in namespace acme, for its quota: connection refused")
	})
	t.Run("no quota: nothing is counted", func(t *testing.T) {
		c := &counter{Store: pt.Store(), err: errors.New("never called")}
		res, err := review(c, pt.VM("chat", 1, 0, qwen, pt.H100()))
		require.NoError(t, err)
		assert.True(t, res.Allowed())
		assert.Zero(t, c.calls)
	})
}
