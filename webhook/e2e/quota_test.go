package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook"
)

// quotaTenant is the tenant of the quota tests, apart from acme (which the other tests share):
// aws node types, 8 GPUs.
const quotaTenant = "quotaco"

// asQuotaTenant moves a policytest object of acme to quotaTenant: labels, template labels and
// namespace.
func asQuotaTenant[T client.Object](o T) T {
	relabel := func(l map[string]string) {
		if _, ok := l[v1alpha1.LabelTenant]; ok {
			l[v1alpha1.LabelTenant] = quotaTenant
		}
	}
	relabel(o.GetLabels())
	o.SetNamespace(quotaTenant)
	if vm, ok := any(o).(*kubevirtv1.VirtualMachine); ok {
		relabel(vm.Spec.Template.ObjectMeta.Labels)
	}
	return o
}

// TestQuotaThroughAPIServer: the webhook, called by a real API server, holds a tenant's new VMs
// and jobs to its GPU quota, counting the VMs and jobs its cluster already holds: what fits is
// stored, one more is refused with what it needs, the quota and what runs; a quota lowered
// below what runs keeps what runs (an update that does not grow passes); and a webhook that
// cannot count refuses (fail closed).
func TestQuotaThroughAPIServer(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	applyPolicyData(t)
	tenant := pt.Tenant(quotaTenant, []string{"aws.*"})
	tenant.Spec.Quota = &v1alpha1.Quota{GPUs: 8}
	require.NoError(t, env.Client.Create(ctx, tenant))
	require.NoError(t, env.EnsureNamespace(ctx, quotaTenant))
	srv := startServer(t, webhook.ServeOptions{})
	register(t, "inferplane-quota-e2e", srv.URL, srv.CA)

	qwen := pt.Master("qwen-4", 4)
	vm := func(replica int) *kubevirtv1.VirtualMachine {
		return asQuotaTenant(pt.VM("chat", replica, 0, qwen, pt.H100()))
	}
	const vmHook = `admission webhook "virtualmachines.policy.inferplane.io" denied the request: `

	require.NoError(t, env.Client.Create(ctx, vm(0)), "4 of 8 GPUs")
	require.NoError(t, env.Client.Create(ctx, vm(1)), "8 of 8 GPUs")
	err := env.Client.Create(ctx, vm(2))
	require.Error(t, err)
	assert.Contains(t, err.Error(), vmHook+"VirtualMachine/quotaco/chat-r2-n0: spec.template.spec.domain.devices.gpus is 4: "+
		"needs 4 GPUs (VirtualMachine quotaco/chat-r2-n0, node 0 of replica 2 of job chat), but Tenant quotaco's GPU quota is 8 "+
		"and its other VMs use 8 (chat 2x4): 0 left")

	t.Run("the job, beside the jobs the cluster holds", func(t *testing.T) {
		job := func(name string, replicas int32) *v1alpha1.ManagedInferenceJob {
			j := asQuotaTenant(pt.Job(name, qwen, "aws.h100"))
			j.Labels[v1alpha1.LabelJob] = name
			j.Spec.Replicas = replicas
			return j
		}
		require.NoError(t, env.Client.Create(ctx, job("chat", 1)))
		err := env.DryRun(ctx, job("more", 2))
		require.Error(t, err)
		assert.Contains(t, err.Error(), `admission webhook "managedinferencejobs.policy.inferplane.io" denied the request: `+
			"ManagedInferenceJob/quotaco/more: spec.replicas is 2: needs 8 GPUs (2 replicas x 4), but Tenant quotaco's GPU quota is 8 "+
			"and its other jobs use 4 (chat 1x4): 4 left")
		require.NoError(t, env.DryRun(ctx, job("more", 1)))
	})

	t.Run("a quota lowered below what runs keeps it and refuses growth", func(t *testing.T) {
		var tn v1alpha1.Tenant
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: quotaTenant}, &tn))
		tn.Spec.Quota.GPUs = 4
		require.NoError(t, env.Client.Update(ctx, &tn))
		// Once the webhook's cache has the lowered quota, one VM more is refused...
		var err error
		require.Eventually(t, func() bool {
			err = env.DryRun(ctx, vm(3))
			return err != nil && strings.Contains(err.Error(), "GPU quota is 4")
		}, 30*time.Second, 100*time.Millisecond, "last answer: %v", err)
		assert.Contains(t, err.Error(), "but Tenant quotaco's GPU quota is 4 and its other VMs use 8 (chat 2x4): 0 left")
		// ...and a VM that runs is kept: an update the rules review (its spec changed), that
		// does not grow it, is admitted.
		var running kubevirtv1.VirtualMachine
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vm(1)), &running))
		running.Spec.Template.Spec.Domain.CPU.Cores++
		require.NoError(t, env.Client.Update(ctx, &running, client.DryRunAll))
	})

	t.Run("fail closed: a webhook that cannot count refuses", func(t *testing.T) {
		// The policy data, but no right to list what runs.
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "quota-blind"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"tenants", "nodetypes", "modelmasters"},
			Verbs: []string{"get", "list", "watch"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "quota-blind"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "quota-blind"}}}
		for _, o := range []client.Object{role, binding} {
			require.NoError(t, env.Client.Create(ctx, o))
			t.Cleanup(func() { _ = env.Client.Delete(ctx, o) })
		}
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "quota-blind"}
		blind := startServerWithConfig(t, cfg, webhook.ServeOptions{})
		register(t, "inferplane-quota-blind", blind.URL, blind.CA)
		err := env.DryRun(ctx, vm(5))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "VirtualMachine/quotaco/chat-r5-n0: policy data unavailable, refusing: count what tenant quotaco runs in namespace quotaco, for its quota: list ManagedInferenceJobs")
		assert.Contains(t, err.Error(), "forbidden")
	})
}
