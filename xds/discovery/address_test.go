package discovery

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/internal/manifest"
)

// storeRendered stores through the API server what KubeVirt and the generator's folder would
// put there: each rendered VM's VMI (from its template) and the rendered Services.
func storeRendered(t *testing.T, ctx context.Context, tp plan.TenantPlan) map[string]*kubevirtv1.VirtualMachineInstance {
	t.Helper()
	files, err := render.Tenant(tp, render.Options{})
	require.NoError(t, err)
	vmis := map[string]*kubevirtv1.VirtualMachineInstance{}
	require.NoError(t, env.EnsureNamespace(ctx, tp.Tenant.Name))
	for name, data := range files {
		if !strings.HasPrefix(name, "jobs/") || strings.HasSuffix(name, "kustomization.yaml") {
			continue
		}
		objs, err := manifest.Decode(data)
		require.NoError(t, err, name)
		for _, u := range objs {
			switch u.GetKind() {
			case "Service":
				require.NoError(t, env.Client.Create(ctx, u), name)
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
			case "VirtualMachine":
				var vm kubevirtv1.VirtualMachine
				require.NoError(t, k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vm), name)
				vmi := &kubevirtv1.VirtualMachineInstance{
					ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: vm.Namespace,
						Labels: vm.Spec.Template.ObjectMeta.Labels, Annotations: vm.Spec.Template.ObjectMeta.Annotations},
					Spec: vm.Spec.Template.Spec,
				}
				require.NoError(t, env.Client.Create(ctx, vmi), name)
				vmis[vmi.Name] = vmi
				// Other tests of the package watch every namespace of the same API server.
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vmi) })
			}
		}
	}
	return vmis
}

// setRunning plays virt-controller and the guest agent: Running, Ready, an IP on each interface.
func setRunning(t *testing.T, ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, ips map[string]string) {
	t.Helper()
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), vmi))
	vmi.Status.Phase = kubevirtv1.Running
	vmi.Status.Interfaces = nil
	for _, n := range vmi.Spec.Networks {
		if ip := ips[n.Name]; ip != "" {
			vmi.Status.Interfaces = append(vmi.Status.Interfaces, kubevirtv1.VirtualMachineInstanceNetworkInterface{Name: n.Name, IP: ip, IPs: []string{ip}})
		}
	}
	vmi.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstanceReady,
		Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	require.NoError(t, env.Client.Update(ctx, vmi))
}

// TestAddressModesWithGenerator: node types in mode Network and LoadBalancer, rendered by the
// generator, stored through the real API server as KubeVirt would create them, and read by the
// Kube source: each serving node's address is its serving interface's IP, or its Service's
// load-balancer IP once the load balancer gives one; until then it is reported and not served.
func TestAddressModesWithGenerator(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	netco := rendertest.Tenant("netco", "t", nil, 0, [2]string{"kimi", rendertest.ShapeMultiNode})
	netco.Tenant.Spec.ServingAddress = &v1alpha1.ServingAddress{Mode: v1alpha1.AddressNetwork, Network: "dc-serving"}
	lbco := rendertest.Tenant("lbco", "t", nil, 0, [2]string{"qwen", rendertest.ShapeSingleGPU})
	lbco.Tenant.Spec.ServingAddress = &v1alpha1.ServingAddress{Mode: v1alpha1.AddressLoadBalancer}

	vmis := storeRendered(t, ctx, netco)
	for name, ips := range map[string]map[string]string{
		"kimi-r0-n0": {"default": "10.244.0.10", "fabric": "192.168.50.10", "serving": "172.16.0.10"},
		"kimi-r0-n1": {"default": "10.244.0.11", "fabric": "192.168.50.11", "serving": "172.16.0.11"},
	} {
		setRunning(t, ctx, vmis[name], ips)
	}
	for name, v := range storeRendered(t, ctx, lbco) {
		setRunning(t, ctx, v, map[string]string{"default": "10.244.1." + name[len(name)-4:len(name)-3]})
	}

	src := &Kube{Config: env.Config, Namespaces: []string{"netco", "lbco"}, Debounce: 10 * time.Millisecond}
	updates := make(chan Update)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(sctx, updates) }()
	next := func(what string, cond func(Update) bool) Update {
		t.Helper()
		return nextUpdate(t, ctx, updates, what, cond)
	}
	byKey := func(u Update) map[string]Replica {
		m := map[string]Replica{}
		for _, r := range u.Replicas {
			m[r.Key()] = r
		}
		return m
	}
	u := next("load balancers not ready yet", func(u Update) bool {
		return strings.Count(problemText(u), "has no load-balancer IP yet") == 2
	})
	reps := byKey(u)
	assert.Equal(t, "172.16.0.10", reps["netco/kimi-r0-n0"].Address, "the serving interface, not the pod network or the fabric")
	assert.False(t, reps["lbco/qwen-r0-n0"].Candidate(), "no address until the load balancer gives one")

	// The load balancer (MetalLB, a cloud's) writes the Services' status.
	for i, name := range []string{"qwen-r0-n0", "qwen-r1-n0"} {
		var svc corev1.Service
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "lbco", Name: name}, &svc))
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100." + string(rune('1'+i))}}
		require.NoError(t, env.Client.Status().Update(ctx, &svc))
	}
	u = next("load-balancer IPs", func(u Update) bool { return !strings.Contains(problemText(u), "load-balancer") })
	reps = byKey(u)
	assert.Equal(t, "198.51.100.1", reps["lbco/qwen-r0-n0"].Address)
	assert.Equal(t, "198.51.100.2", reps["lbco/qwen-r1-n0"].Address)
	assert.EqualValues(t, 8000, reps["lbco/qwen-r1-n0"].Port)
	assert.True(t, reps["lbco/qwen-r1-n0"].Candidate())

	// A Service that goes away takes the address with it, reported.
	require.NoError(t, env.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "lbco", Name: "qwen-r1-n0"}}))
	u = next("Service deleted", func(u Update) bool {
		return strings.Contains(problemText(u), "Service lbco/qwen-r1-n0 (its address, mode loadbalancer) does not exist")
	})
	assert.Empty(t, byKey(u)["lbco/qwen-r1-n0"].Address)
	stop()
	require.NoError(t, <-done)
}
