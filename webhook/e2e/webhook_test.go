package e2e

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

// TestThroughAPIServer registers the webhook with the real API server and creates allowed and
// denied jobs, masters, VMs and VMIs, for real and as dry-runs: the API server calls the webhook
// over TLS, the denial reaches the client with our message, and the policy data comes from the
// cluster through the webhook's cache. Then the webhook goes down: a guarded object is refused
// (fail closed), an unlabelled one is not.
func TestThroughAPIServer(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	applyPolicyData(t)
	srv := startServer(t, webhook.ServeOptions{})
	register(t, "inferplane-policy-e2e", srv.URL, srv.CA)

	qwen, deepseek := pt.Master("qwen-4", 4), pt.Master("deepseek-16", 16)
	denied := func(t *testing.T, err error, webhookName, want string) {
		t.Helper()
		require.Error(t, err)
		assert.Contains(t, err.Error(), `admission webhook "`+webhookName+`" denied the request: `+want)
	}

	t.Run("job", func(t *testing.T) {
		require.NoError(t, env.Client.Create(ctx, pt.Job("chat", qwen, "aws.h100")))
		bad := pt.Job("chat-8", qwen, "aws.h100")
		bad.Spec.GPUCount = 8
		denied(t, env.Client.Create(ctx, bad), "managedinferencejobs.policy.inferplane.io",
			"ManagedInferenceJob/acme/chat-8: spec.gpuCount is 8: must equal perReplicaGPUCount 4 of ModelMaster qwen-4")
		denied(t, env.DryRun(ctx, bad), "managedinferencejobs.policy.inferplane.io", "ManagedInferenceJob/acme/chat-8: spec.gpuCount is 8")
		other := pt.Job("chat-l4", pt.Master("qwen-4", 1), "gcp.l4")
		other.Labels[v1alpha1.LabelModelMaster] = "qwen-4"
		other.Spec.GPUCount = 4
		denied(t, env.DryRun(ctx, other), "managedinferencejobs.policy.inferplane.io",
			`ManagedInferenceJob/acme/chat-l4: spec.nodeType is "gcp.l4": not allowed for Tenant acme (allowedNodeTypes: [aws.*])`)
	})

	t.Run("master", func(t *testing.T) {
		bad := pt.Master("qwen-bad", 8)
		bad.Spec.PerReplicaGPUCount = 6
		denied(t, env.Client.Create(ctx, bad), "modelmasters.policy.inferplane.io",
			"ModelMaster/qwen-bad: spec.perReplicaGPUCount is 6: must equal the GPUs its parallelism uses, tensor 8 x pipeline 1 = 8")
	})

	t.Run("virtual machines, dry-run", func(t *testing.T) {
		require.NoError(t, env.DryRun(ctx, pt.VM("chat", 0, 0, qwen, pt.H100())))
		require.NoError(t, env.DryRun(ctx, pt.VM("big", 0, 0, deepseek, pt.H100())))
		require.NoError(t, env.DryRun(ctx, pt.VM("big", 0, 1, deepseek, pt.H100())))

		tooMany := pt.VM("chat", 1, 0, qwen, pt.H100())
		tooMany.Spec.Template.Spec.Domain.Devices.GPUs = pt.VM("x", 0, 0, pt.Master("m", 8), pt.H100()).Spec.Template.Spec.Domain.Devices.GPUs
		denied(t, env.DryRun(ctx, tooMany), "virtualmachines.policy.inferplane.io",
			"VirtualMachine/acme/chat-r1-n0: spec.template.spec.domain.devices.gpus is 8: must be 4")

		noRack := pt.VM("big", 0, 1, deepseek, pt.H100())
		noRack.Spec.Template.Spec.Affinity = nil
		denied(t, env.DryRun(ctx, noRack), "virtualmachines.policy.inferplane.io",
			"VirtualMachine/acme/big-r0-n1: spec.template.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution: no rack term")

		wrongGPU := pt.VM("chat", 2, 0, qwen, pt.H100())
		wrongGPU.Spec.Template.Spec.Domain.Devices.GPUs[0].DeviceName = "nvidia.com/GB200"
		denied(t, env.DryRun(ctx, wrongGPU), "virtualmachines.policy.inferplane.io",
			`VirtualMachine/acme/chat-r2-n0: spec.template.spec.domain.devices.gpus[0].deviceName is "nvidia.com/GB200"`)

		// A dry-run stores nothing, allowed or not.
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(tooMany), &kubevirtv1.VirtualMachine{})
		require.True(t, apierrors.IsNotFound(err), "%v", err)
	})

	t.Run("virtual machine updates", func(t *testing.T) {
		vm := pt.VM("upd", 0, 0, qwen, pt.H100())
		require.NoError(t, env.Client.Create(ctx, vm))
		t.Cleanup(func() { _ = env.Client.Delete(ctx, vm) })

		vm.Annotations = map[string]string{"example.com/note": "not the policy's business"}
		require.NoError(t, env.Client.Update(ctx, vm))

		vm.Spec.Template.Spec.Domain.Devices.GPUs = vm.Spec.Template.Spec.Domain.Devices.GPUs[:3]
		denied(t, env.Client.Update(ctx, vm), "virtualmachines.policy.inferplane.io", "VirtualMachine/acme/upd-r0-n0: spec.template.spec.domain.devices.gpus is 3")

		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm))
		delete(vm.Labels, v1alpha1.LabelTenant)
		denied(t, env.Client.Update(ctx, vm), "virtualmachines.policy.inferplane.io",
			"VirtualMachine/acme/upd-r0-n0: metadata.labels[inferplane.io/tenant] is removed")
	})

	t.Run("virtual machine instances", func(t *testing.T) {
		require.NoError(t, env.DryRun(ctx, pt.VMI("chat", 0, 0, qwen, pt.H100())))
		bad := pt.VMI("chat", 0, 0, qwen, pt.H100())
		bad.Labels[v1alpha1.LabelNodeType] = "gcp.l4"
		denied(t, env.DryRun(ctx, bad), "virtualmachineinstances.policy.inferplane.io",
			`VirtualMachineInstance/acme/chat-r0-n0: metadata.labels[inferplane.io/node-type] is "gcp.l4": not allowed for Tenant acme`)
	})

	t.Run("unlabelled objects pass untouched", func(t *testing.T) {
		vm := probeVM().(*kubevirtv1.VirtualMachine)
		vm.Labels, vm.Spec.Template.ObjectMeta.Labels = nil, nil
		require.NoError(t, env.DryRun(ctx, vm))
	})

	t.Run("policy data comes from the cluster", func(t *testing.T) {
		// A master created after the webhook started is seen (cache, or the live read on a miss).
		fresh := pt.Master("fresh-8", 8)
		require.NoError(t, env.Client.Create(ctx, fresh))
		require.NoError(t, env.DryRun(ctx, pt.VM("fresh", 0, 0, fresh, pt.H100())))

		// Tightening a tenant's allowedNodeTypes takes effect through the cache.
		var acme v1alpha1.Tenant
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "acme"}, &acme))
		acme.Spec.AllowedNodeTypes = []string{}
		require.NoError(t, env.Client.Update(ctx, &acme))
		t.Cleanup(func() {
			require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "acme"}, &acme))
			acme.Spec.AllowedNodeTypes = []string{"aws.*"}
			require.NoError(t, env.Client.Update(ctx, &acme))
			require.NoError(t, eventually(func() error { return env.DryRun(ctx, pt.VM("chat", 0, 0, qwen, pt.H100())) }))
		})
		var last error
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			last = env.DryRun(ctx, pt.VM("chat", 0, 0, qwen, pt.H100()))
			return last != nil, nil
		})
		require.NoError(t, err, "the webhook never saw the tenant change")
		assert.Contains(t, last.Error(), `not allowed for Tenant acme (allowedNodeTypes: [] (no node type))`)
	})

	t.Run("health and metrics", func(t *testing.T) {
		code, _ := get(srv.ProbeURL + "/healthz")
		assert.Equal(t, http.StatusOK, code)
		code, body := get(srv.MetricsURL)
		require.Equal(t, http.StatusOK, code)
		for _, want := range []string{
			`inferplane_webhook_decisions_total{kind="VirtualMachine",result="denied"}`,
			`inferplane_webhook_decisions_total{kind="ManagedInferenceJob",result="allowed"}`,
			`inferplane_webhook_decision_duration_seconds_bucket{kind="VirtualMachine",le="0.0008"}`,
			`controller_runtime_webhook_requests_total{code="200",webhook="/validate/virtualmachines"}`,
		} {
			assert.Contains(t, body, want)
		}
	})

	t.Run("webhook down: guarded objects fail closed", func(t *testing.T) {
		// An object admitted while the webhook ran, to update once it is down.
		vm := pt.VM("down", 0, 0, qwen, pt.H100())
		require.NoError(t, env.Client.Create(ctx, vm))
		t.Cleanup(func() { _ = env.Client.Delete(ctx, vm) })

		srv.Stop(t)
		err := env.DryRun(ctx, pt.VM("chat", 0, 0, qwen, pt.H100()))
		require.Error(t, err, "a guarded VM must not pass while the webhook is down")
		assert.Contains(t, err.Error(), `failed calling webhook "virtualmachines.policy.inferplane.io"`)
		require.Error(t, env.Client.Create(ctx, pt.Job("chat-down", qwen, "aws.h100")))

		unlabelled := pt.VM("chat", 0, 0, qwen, pt.H100())
		unlabelled.Labels, unlabelled.Spec.Template.ObjectMeta.Labels = nil, nil
		require.NoError(t, env.DryRun(ctx, unlabelled), "an unlabelled VM does not need the webhook")

		// The matchConditions keep updates that the policy does not read (KubeVirt's own labels,
		// finalizers, a VMI's status) away from the webhook, so they work while it is down.
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm))
		vm.Labels["kubevirt.io/vm"] = "down"
		vm.Finalizers = append(vm.Finalizers, "example.com/cleanup")
		require.NoError(t, env.Client.Update(ctx, vm))
		vm.Spec.Template.Spec.Domain.Devices.GPUs = vm.Spec.Template.Spec.Domain.Devices.GPUs[:1]
		require.Error(t, env.Client.Update(ctx, vm), "a spec change still needs the webhook")
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm))
		vm.Finalizers = nil
		require.NoError(t, env.Client.Update(ctx, vm), "removing a finalizer needs no webhook")
	})
}

func eventually(f func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		return last
	}
	return nil
}

// TestManifestsServerSideDryRun proves the install manifests against the real API server's
// schemas (strict field validation, dry-run): every object, the CEL match condition included.
func TestManifestsServerSideDryRun(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	objs, err := install.Manifests(install.ManifestOptions{Namespace: "inferplane-dryrun"})
	require.NoError(t, err)
	// The YAML `inferplane webhook manifests` prints, checked below (the client clears the typed
	// objects' apiVersion and kind once it has sent them).
	data, err := install.YAML(objs)
	require.NoError(t, err)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind] = true
		// The namespace itself first: DryRun creates a missing namespace for namespaced objects.
		require.NoError(t, env.DryRun(ctx, o), "%s %s", o.GetObjectKind().GroupVersionKind().Kind, o.GetName())
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"Service", "Deployment", "PodDisruptionBudget", "ValidatingWebhookConfiguration"} {
		assert.True(t, kinds[k], "missing %s", k)
	}

	for _, err := range env.DryRunYAML(ctx, data) {
		if !apierrors.IsAlreadyExists(errors.Unwrap(err)) { // the namespace, created above
			t.Error(err)
		}
	}

	dev, err := install.Manifests(install.ManifestOptions{URL: "https://127.0.0.1:9443", CABundle: []byte("-----BEGIN CERTIFICATE-----\n")})
	require.NoError(t, err)
	require.NoError(t, env.DryRun(ctx, dev[0]))

	// The API server compiles the match condition: the same configuration with a broken
	// expression is rejected, so the accepted one was really checked.
	broken := dev[0].(*admissionregistrationv1.ValidatingWebhookConfiguration).DeepCopy()
	broken.Webhooks[0].MatchConditions[0].Expression += " ||"
	err = env.DryRun(ctx, broken)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "matchConditions[0].expression")
}
