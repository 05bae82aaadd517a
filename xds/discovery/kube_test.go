package discovery

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/internal/manifest"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
)

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

func running(vmi *kubevirtv1.VirtualMachineInstance, ifaces []kubevirtv1.VirtualMachineInstanceNetworkInterface, ready bool) *kubevirtv1.VirtualMachineInstance {
	vmi.Status.Phase = kubevirtv1.Running
	vmi.Status.Interfaces = ifaces
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	vmi.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstanceReady, Status: st}}
	return vmi
}

// nextUpdate is the first update from updates that cond accepts.
func nextUpdate(t *testing.T, ctx context.Context, updates <-chan Update, what string, cond func(Update) bool) Update {
	t.Helper()
	for {
		select {
		case u := <-updates:
			if cond(u) {
				return u
			}
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestReplicaFromVMI(t *testing.T) {
	head := func() *kubevirtv1.VirtualMachineInstance {
		return vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "chat", Runtime: "vllm", Replica: 1, ServingPort: 8000, RequireAPIKey: true})
	}
	pod := []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.244.1.7"}}
	cases := []struct {
		name     string
		vmi      *kubevirtv1.VirtualMachineInstance
		foreign  bool
		want     *Replica
		problems []string
	}{
		{
			name: "running, ready head",
			vmi:  running(head(), pod, true),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Running: true, Address: "10.244.1.7", Port: 8000, Ready: true},
		},
		{
			name: "scheduling: no phase, no IP",
			vmi:  head(),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Port: 8000},
		},
		{
			name: "multi-node head: the pod network's IP, not the overlay's",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "big", Runtime: "vllm", Nodes: 2, ServingPort: 8000})
				return running(v, []kubevirtv1.VirtualMachineInstanceNetworkInterface{
					{Name: "overlay", IP: "192.168.50.3"}, {Name: "default", IP: "10.244.2.9"}}, true)
			}(),
			want: &Replica{Tenant: "acme", Job: "big", Runtime: "vllm", Index: "0",
				Namespace: "acme", Name: "big-r0-n0", Running: true, Address: "10.244.2.9", Port: 8000, Ready: true},
		},
		{
			name: "address mode network: the IP of the named interface",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Annotations[v1alpha1.AnnotationAddressMode] = "network"
				v.Annotations[v1alpha1.AnnotationAddressNetwork] = "serving"
				return running(v, append(pod, kubevirtv1.VirtualMachineInstanceNetworkInterface{Name: "serving", IP: "172.16.4.2"}), true)
			}(),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Running: true, Address: "172.16.4.2", Port: 8000, Ready: true},
		},
		{
			name: "address mode network, running without an IP there: reported, not served",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Annotations[v1alpha1.AnnotationAddressMode] = "network"
				v.Annotations[v1alpha1.AnnotationAddressNetwork] = "serving"
				return running(v, pod, true)
			}(),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Running: true, Port: 8000, Ready: true},
			problems: []string{`not served yet: running, but its interface "serving" has no IP`},
		},
		{
			name: "address mode loadbalancer: the Service is resolved by the source",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Annotations[v1alpha1.AnnotationAddressMode] = "loadbalancer"
				v.Annotations[v1alpha1.AnnotationAddressService] = "chat-r1-n0"
				return running(v, pod, true)
			}(),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Running: true, Port: 8000, Ready: true, Service: "chat-r1-n0"},
		},
		{
			name: "unknown address mode: reported, not served",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Annotations[v1alpha1.AnnotationAddressMode] = "ingress"
				return running(v, pod, true)
			}(),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Running: true, Port: 8000, Ready: true},
			problems: []string{`not served: annotation inferplane.io/address-mode "ingress": expected pod, network or loadbalancer`},
		},
		{
			name: "worker node is not a replica",
			vmi:  vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "big", Runtime: "vllm", Nodes: 2, Rank: 1, ServingPort: 8000}),
		},
		{
			name: "no tenant label: not inferplane's",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				delete(v.Labels, v1alpha1.LabelTenant)
				return v
			}(),
		},
		{
			name: "a serving worker of a data-parallel replica is an endpoint of its own",
			vmi: running(vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "dep", Runtime: "vllm", Nodes: 2, Rank: 1, Serving: true, ServingPort: 8000}),
				[]kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.244.2.10"}}, true),
			want: &Replica{Tenant: "acme", Job: "dep", Runtime: "vllm", Index: "0",
				Namespace: "acme", Name: "dep-r0-n1", Running: true, Address: "10.244.2.10", Port: 8000, Ready: true},
		},
		{
			name: "a head without the serving label is not routed to",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				delete(v.Labels, v1alpha1.LabelServing)
				return v
			}(),
		},
		{
			name: "unknown runtime",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Labels[v1alpha1.LabelRuntime] = "sglang"
				return v
			}(),
			problems: []string{`skipped: label inferplane.io/runtime "sglang": expected one of parakeet, vllm`},
		},
		{
			name: "tenant label from another namespace",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Namespace = "mallory"
				return v
			}(),
			problems: []string{`skipped: namespace "mallory" differs from label inferplane.io/tenant "acme"`},
		},
		{
			name: "tenant label from another namespace, allowed",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Namespace = "vcluster-acme"
				return v
			}(),
			foreign: true,
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "vcluster-acme", Name: "chat-r1-n0", Port: 8000},
		},
		{
			name: "serving port annotation: custom, missing, invalid",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Annotations[v1alpha1.AnnotationServingPort] = "http"
				return v
			}(),
			problems: []string{`skipped: annotation inferplane.io/serving-port "http": expected a port number 1-65535`},
		},
		{
			name: "missing serving port uses 8000",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				delete(v.Annotations, v1alpha1.AnnotationServingPort)
				return v
			}(),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Port: 8000},
			problems: []string{"annotation inferplane.io/serving-port missing: using 8000"},
		},
		{
			name: "unreadable require-api-key fails closed",
			vmi: func() *kubevirtv1.VirtualMachineInstance {
				v := head()
				v.Annotations[v1alpha1.AnnotationRequireAPIKey] = "no"
				return v
			}(),
			want: &Replica{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true, Index: "1",
				Namespace: "acme", Name: "chat-r1-n0", Port: 8000},
			problems: []string{`annotation inferplane.io/require-api-key "no": expected "true" or "false"; requiring API keys`},
		},
		{
			name: "running but not ready (model loading behind a readiness probe)",
			vmi:  running(vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "asr", Runtime: "parakeet", ServingPort: 9000}), pod, false),
			want: &Replica{Tenant: "acme", Job: "asr", Runtime: "parakeet", Index: "0",
				Namespace: "acme", Name: "asr-r0-n0", Running: true, Address: "10.244.1.7", Port: 9000},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := ReplicaFromVMI(tc.vmi, tc.foreign)
			assert.Equal(t, tc.want, got)
			require.Len(t, problems, len(tc.problems))
			for i, p := range problems {
				assert.Contains(t, p.String(), tc.problems[i])
			}
		})
	}
}

// TestKubeSourceWatchesVMIs runs the source against the real API server: VMIs created as
// KubeVirt creates them from the generator's VMs appear, follow their status and leave.
func TestKubeSourceWatchesVMIs(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := env.Client
	for _, ns := range []string{"acme", "other"} {
		require.NoError(t, env.EnsureNamespace(ctx, ns))
	}

	head := vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "chat", Runtime: "vllm", Nodes: 2, ServingPort: 8000, RequireAPIKey: true})
	worker := vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "chat", Runtime: "vllm", Nodes: 2, Rank: 1, ServingPort: 8000, RequireAPIKey: true})
	// A replica started with vLLM's data-parallel launcher: both nodes serve.
	dep0 := vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "dep", Runtime: "vllm", Nodes: 2, ServingPort: 8000, RequireAPIKey: true})
	dep1 := vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "dep", Runtime: "vllm", Nodes: 2, Rank: 1, Serving: true, ServingPort: 8000, RequireAPIKey: true})
	// Someone else's VM in the same cluster: no inferplane labels.
	foreign := vmitest.VMI(vmitest.Node{Tenant: "other", Job: "db", Runtime: "vllm", ServingPort: 8000})
	foreign.Labels = map[string]string{"app": "db"}
	for _, v := range []*kubevirtv1.VirtualMachineInstance{head, worker, dep0, dep1, foreign} {
		require.NoError(t, c.Create(ctx, v))
	}

	var watchErrs int
	src := &Kube{Config: env.Config, Debounce: 10 * time.Millisecond, OnWatchError: func(error) { watchErrs++ }}
	updates := make(chan Update, 16)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, updates) }()

	next := func(cond func(Update) bool) Update {
		t.Helper()
		return nextUpdate(t, ctx, updates, "an update", cond)
	}
	u := next(func(Update) bool { return true })
	var names []string
	for _, r := range u.Replicas {
		names = append(names, r.Name)
	}
	assert.Equal(t, []string{"chat-r0-n0", "dep-r0-n0", "dep-r0-n1"}, names, "the serving nodes: chat's head (its worker runs --headless), both nodes of dep")
	for _, v := range []*kubevirtv1.VirtualMachineInstance{dep0, dep1} {
		require.NoError(t, c.Delete(ctx, v))
	}
	u = next(func(u Update) bool { return len(u.Replicas) == 1 })
	assert.Equal(t, "chat-r0-n0", u.Replicas[0].Name)
	assert.False(t, u.Replicas[0].Candidate())

	require.NoError(t, vmitest.SetStatus(ctx, c, head, kubevirtv1.Running, "10.244.3.4", true))
	u = next(func(u Update) bool { return len(u.Replicas) == 1 && u.Replicas[0].Candidate() })
	assert.Equal(t, "10.244.3.4", u.Replicas[0].Address)
	assert.True(t, u.Replicas[0].Ready)

	require.NoError(t, vmitest.SetStatus(ctx, c, head, kubevirtv1.Running, "10.244.3.4", false))
	next(func(u Update) bool { return len(u.Replicas) == 1 && !u.Replicas[0].Ready })

	require.NoError(t, c.Delete(ctx, head))
	next(func(u Update) bool { return len(u.Replicas) == 0 })

	for _, v := range []*kubevirtv1.VirtualMachineInstance{worker, foreign} {
		require.NoError(t, client.IgnoreNotFound(c.Delete(ctx, v)))
	}
	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, watchErrs)
}

// TestContractWithGenerator renders tenants with the real generator (generator/render), turns
// each rendered VirtualMachine into the VMI KubeVirt would create from its template (name,
// namespace, template labels, annotations and spec), stores them through the API server, and
// reads them back as the xDS server does: every replica's head is found, with its runtime, its
// key requirement and its port, and nothing is reported as a problem.
func TestContractWithGenerator(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type want struct {
		runtime    string
		requireKey bool
	}
	expected := map[string]want{ // head VMI key -> what xDS must read
		"acme/qwen-r0-n0":       {"vllm", true},
		"acme/qwen-r1-n0":       {"vllm", true},
		"acme/transcribe-r0-n0": {"parakeet", true},
		"globex/llama-r0-n0":    {"vllm", false},
		"globex/kimi-r0-n0":     {"vllm", true}, // its worker, kimi-r0-n1, is not a replica
	}
	got := map[string]Replica{}
	vms := 0
	for _, tp := range []plan.TenantPlan{rendertest.Acme(), rendertest.Globex()} {
		files, err := render.Tenant(tp, render.Options{})
		require.NoError(t, err)
		for name, data := range files {
			if !strings.HasPrefix(name, "jobs/") {
				continue
			}
			objs, err := manifest.Decode(data)
			require.NoError(t, err, name)
			for _, u := range objs {
				if u.GetKind() != "VirtualMachine" {
					continue
				}
				vms++
				var vm kubevirtv1.VirtualMachine
				require.NoError(t, k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vm), name)
				require.NotNil(t, vm.Spec.Template, name)
				vmi := &kubevirtv1.VirtualMachineInstance{
					ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: vm.Namespace,
						Labels: vm.Spec.Template.ObjectMeta.Labels, Annotations: vm.Spec.Template.ObjectMeta.Annotations},
					Spec: vm.Spec.Template.Spec,
				}
				require.NoError(t, env.EnsureNamespace(ctx, vmi.Namespace))
				require.NoError(t, env.Client.Create(ctx, vmi), "the API server must take the VMI of %s", vm.Name)
				var stored kubevirtv1.VirtualMachineInstance
				require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), &stored))
				r, problems := ReplicaFromVMI(&stored, false)
				assert.Empty(t, problems, vm.Name)
				if r != nil {
					got[r.Key()] = *r
				}
			}
		}
	}
	assert.Equal(t, 6, vms, "five single-node replicas' VMs and the kimi worker")
	require.Len(t, got, len(expected))
	for key, w := range expected {
		r, ok := got[key]
		require.True(t, ok, "%s not found", key)
		assert.Equal(t, w.runtime, r.Runtime, key)
		assert.Equal(t, w.requireKey, r.RequireAPIKey, key)
		assert.EqualValues(t, v1alpha1.ServingPort, r.Port, key)
		assert.False(t, r.Candidate(), "%s: not running yet", key)
	}
}
