// Package lifecycletest plays Argo CD's and KubeVirt's controllers in tests, which cannot run
// here: it applies a job's rendered objects to a host and a tenant API server as Argo CD would
// sync them, and writes the Application status, the VMIs and their status that Argo CD's and
// KubeVirt's controllers would write. The API servers are real, so every object and status
// written passes their schemas with strict field validation. Nothing here runs a VM.
package lifecycletest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/internal/manifest"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

// World is one tenant's rendered repository and the two clusters it syncs to.
type World struct {
	Host, Cluster *kubeenv.Env
	// Repo is the tenant's rendered repository (out/<tenant>).
	Repo   string
	Tenant string
	// ArgoCDNamespace holds the Applications in the host (default argocd).
	ArgoCDNamespace string
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func (w *World) argoNS() string {
	if w.ArgoCDNamespace == "" {
		return render.DefaultArgoCDNamespace
	}
	return w.ArgoCDNamespace
}

// Sync applies the job's Application to the host cluster and the job's objects (VMs,
// claims, Secrets, Services, its ModelMaster and ManagedInferenceJob) to the tenant's
// cluster, as an Argo CD sync would. When the test ends, whatever its outcome, they are
// removed again with the VMIs and claim events written since: tests share API servers, and
// one test's Application or VMI would be the next one's stale state.
func (w *World) Sync(t testing.TB, job string) {
	t.Helper()
	c := ctx(t)
	require.NoError(t, w.Host.EnsureNamespace(c, w.argoNS()))
	app := apply(t, w.Host, filepath.Join(w.Repo, filepath.FromSlash(render.ApplicationFile(job))))
	t.Cleanup(func() { w.remove(t, w.Host, app) })
	require.NoError(t, w.Cluster.EnsureNamespace(c, w.Tenant))
	files, err := filepath.Glob(filepath.Join(w.Repo, filepath.FromSlash(render.JobDir(job)), "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no rendered files for job %s in %s", job, w.Repo)
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			objs := apply(t, w.Cluster, f)
			t.Cleanup(func() { w.remove(t, w.Cluster, objs) })
		}
	}
}

func apply(t testing.TB, env *kubeenv.Env, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	objs, err := manifest.Decode(data)
	require.NoError(t, err, file)
	for _, u := range objs {
		require.NoError(t, env.Client.Apply(ctx(t), client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner(kubeenv.FieldManager), client.ForceOwnership), "%s: %s", file, kubeenv.Describe(u))
	}
	return objs
}

// remove deletes what Sync applied, as Argo CD's prune and the controllers would: a VM's
// instance with it, a claim's events, and the finalizers (Argo CD's on the Application, the
// claim's protection) that no controller here removes.
func (w *World) remove(t testing.TB, env *kubeenv.Env, objs []*unstructured.Unstructured) {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gone := func(o client.Object) {
		if err := env.Client.Delete(c, o); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("lifecycletest: removing %s/%s: %v", o.GetNamespace(), o.GetName(), err)
			return
		}
		if err := env.Client.Get(c, client.ObjectKeyFromObject(o), o); err == nil && len(o.GetFinalizers()) > 0 {
			o.SetFinalizers(nil)
			if err := env.Client.Update(c, o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("lifecycletest: removing the finalizers of %s/%s: %v", o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	for _, u := range objs {
		key := client.ObjectKeyFromObject(u)
		switch u.GetKind() {
		case "VirtualMachine":
			gone(&kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
		case "PersistentVolumeClaim":
			_ = env.Client.DeleteAllOf(c, &corev1.Event{}, client.InNamespace(key.Namespace),
				client.MatchingFields{"involvedObject.name": key.Name})
		}
		gone(u.DeepCopy())
	}
}

// SetApplication writes the job's Application status, as Argo CD's application controller
// would.
func (w *World) SetApplication(t testing.TB, job string, status lifecycle.ApplicationStatus) {
	t.Helper()
	c := ctx(t)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(cluster.ApplicationGVK)
	require.NoError(t, w.Host.Client.Get(c, client.ObjectKey{Namespace: w.argoNS(), Name: render.ApplicationName(w.Tenant, job)}, u))
	st, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&status)
	require.NoError(t, err)
	u.Object["status"] = st
	require.NoError(t, w.Host.Client.Update(c, u), "the Application CRD takes the status as written")
}

// Synced is the status of an Application whose last automated sync succeeded at t.
func Synced(at time.Time, revision string) lifecycle.ApplicationStatus {
	return lifecycle.ApplicationStatus{
		Sync:   lifecycle.SyncStatus{Status: lifecycle.SyncSynced, Revision: revision},
		Health: lifecycle.HealthStatus{Status: lifecycle.HealthProgressing},
		OperationState: &lifecycle.OperationState{
			Operation: lifecycle.Operation{Sync: &lifecycle.SyncOperation{Revision: revision},
				InitiatedBy: &lifecycle.OperationInitiator{Automated: true}},
			Phase: lifecycle.PhaseSucceeded, Message: "successfully synced (all tasks run)",
			StartedAt: metav1.NewTime(at), FinishedAt: &metav1.Time{Time: at},
		},
		ReconciledAt: &metav1.Time{Time: at},
	}
}

// SetVMStatus writes a VM's status, as KubeVirt's virt-controller would.
func (w *World) SetVMStatus(t testing.TB, name string, status kubevirtv1.VirtualMachineStatus) {
	t.Helper()
	c := ctx(t)
	var vm kubevirtv1.VirtualMachine
	require.NoError(t, w.Cluster.Client.Get(c, client.ObjectKey{Namespace: w.Tenant, Name: name}, &vm))
	vm.Status = status
	require.NoError(t, w.Cluster.Client.Status().Update(c, &vm))
}

// PutVMI creates the VM's instance from its template, as virt-controller does for runStrategy
// Always, or updates it; set then writes what virt-controller and virt-handler would report
// (phase, node, interfaces, conditions).
func (w *World) PutVMI(t testing.TB, name string, set func(*kubevirtv1.VirtualMachineInstance)) {
	t.Helper()
	c := ctx(t)
	var vmi kubevirtv1.VirtualMachineInstance
	err := w.Cluster.Client.Get(c, client.ObjectKey{Namespace: w.Tenant, Name: name}, &vmi)
	if apierrors.IsNotFound(err) {
		var vm kubevirtv1.VirtualMachine
		require.NoError(t, w.Cluster.Client.Get(c, client.ObjectKey{Namespace: w.Tenant, Name: name}, &vm))
		tmpl := vm.Spec.Template
		vmi = kubevirtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Tenant, Labels: tmpl.ObjectMeta.Labels, Annotations: tmpl.ObjectMeta.Annotations,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&vm, kubevirtv1.VirtualMachineGroupVersionKind)}},
			Spec: tmpl.Spec,
		}
		set(&vmi)
		require.NoError(t, w.Cluster.Client.Create(c, &vmi))
		return
	}
	require.NoError(t, err)
	set(&vmi)
	require.NoError(t, w.Cluster.Client.Update(c, &vmi))
}

// BindClaims marks the job's model-cache claims Bound, as the volume binder would.
func (w *World) BindClaims(t testing.TB, job string) {
	t.Helper()
	c := ctx(t)
	var pvcs corev1.PersistentVolumeClaimList
	require.NoError(t, w.Cluster.Client.List(c, &pvcs, client.InNamespace(w.Tenant)))
	for _, p := range pvcs.Items {
		if strings.HasPrefix(p.Name, job+"-r") {
			p.Status.Phase = corev1.ClaimBound
			require.NoError(t, w.Cluster.Client.Status().Update(c, &p))
		}
	}
}

// ClaimEvent records an event about a claim, as the volume binder or a provisioner would.
func (w *World) ClaimEvent(t testing.TB, claim, reason, message string) {
	t.Helper()
	now := metav1.Now()
	require.NoError(t, w.Cluster.Client.Create(ctx(t), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: claim + ".", Namespace: w.Tenant},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: w.Tenant, Name: claim, APIVersion: "v1"},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning,
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "persistentvolume-controller"},
	}))
}

// Phase sets a VMI's phase, node and the phase's transition time as KubeVirt reports them.
func Phase(phase kubevirtv1.VirtualMachineInstancePhase, node string, at time.Time) func(*kubevirtv1.VirtualMachineInstance) {
	return func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.Phase, v.Status.NodeName = phase, node
		v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
			kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(at)})
	}
}

// Condition sets (or replaces) one VMI condition.
func Condition(typ kubevirtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason, message string, at time.Time) func(*kubevirtv1.VirtualMachineInstance) {
	return func(v *kubevirtv1.VirtualMachineInstance) {
		c := kubevirtv1.VirtualMachineInstanceCondition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(at)}
		for i := range v.Status.Conditions {
			if v.Status.Conditions[i].Type == typ {
				v.Status.Conditions[i] = c
				return
			}
		}
		v.Status.Conditions = append(v.Status.Conditions, c)
	}
}

// Interface sets the VMI's pod-network interface address.
func Interface(ip string) func(*kubevirtv1.VirtualMachineInstance) {
	return func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: ip, IPs: []string{ip}}}
	}
}

// All applies several changes in order.
func All(fs ...func(*kubevirtv1.VirtualMachineInstance)) func(*kubevirtv1.VirtualMachineInstance) {
	return func(v *kubevirtv1.VirtualMachineInstance) {
		for _, f := range fs {
			f(v)
		}
	}
}
