// Package clusterdouble is a TEST DOUBLE of what runs in the clusters and cannot run here:
// Argo CD's application controller, KubeVirt's controllers and the GPU VMs' model servers. It
// follows the tenants' rendered repositories (out/<tenant>: the commit on their branch, as Argo
// CD follows a repository) and, against real API servers (strict field validation):
//
//   - a new commit: writes each job's Application into the host cluster as OutOfSync, then,
//     one step later, applies the job's objects to the tenant's cluster and marks the
//     Application Synced at that revision; what the commit no longer has is pruned;
//   - the model-cache claims are bound, as the volume binder would;
//   - each VirtualMachine gets its instance, which walks one step at a time through the phases
//     KubeVirt reports (Scheduled on a node, Running with an address, Ready); an instance
//     someone deleted (jobs restart) is made again, as runStrategy Always does;
//   - each serving node's model server is a replica double (e2e/replicadouble) on 127.0.0.1,
//     whose address and port the instance reports, so the real gateway probes and routes to it.
//
// The local demo (hack/demo, make demo) runs it. Nothing here runs a VM.
package clusterdouble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/generator/publish"
	"github.com/inferplane/inferplane/internal/manifest"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

// FieldManager owns what the double applies, as Argo CD's own field manager would.
const FieldManager = "argocd-controller"

// Options configure a World.
type Options struct {
	// Host is the cluster Argo CD runs in; Tenant is a tenant's own cluster (its Argo CD
	// destination). Both may be the same API server.
	Host   client.Client
	Tenant func(tenant string) client.Client
	// OutDir holds the tenants' repositories (out/<tenant>).
	OutDir string
	// Step is the time between two stages (default 1s).
	Step time.Duration
	// Log says what the double does (default: nothing).
	Log *slog.Logger
}

// World is the clusters' side of every tenant repository under OutDir.
type World struct {
	o Options

	mu      sync.Mutex
	synced  map[string]string      // tenant -> revision applied
	pending map[string]pendingSync // tenant -> revision seen, applied after a step
	vmis    map[string]time.Time   // namespace/name -> when its instance was made
	doubles map[string]*replicadouble.Double
	models  map[string]string // master name -> the model it serves
	nss     map[nsKey]bool    // namespaces made
	nodes   int
}

// nsKey is a namespace of one cluster.
type nsKey struct {
	c  client.Client
	ns string
}

type pendingSync struct {
	rev   string
	since time.Time
}

// New is a World; Run drives it.
func New(o Options) *World {
	if o.Step <= 0 {
		o.Step = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &World{o: o, synced: map[string]string{}, pending: map[string]pendingSync{}, vmis: map[string]time.Time{},
		doubles: map[string]*replicadouble.Double{}, models: map[string]string{}, nss: map[nsKey]bool{}}
}

// Run reconciles every step until ctx ends; an error in one round is logged and the next round
// tries again. It stops the replica doubles when it returns.
func (w *World) Run(ctx context.Context) error {
	defer w.Close()
	t := time.NewTicker(w.o.Step)
	defer t.Stop()
	for {
		if err := w.Reconcile(ctx); err != nil && ctx.Err() == nil {
			w.o.Log.Warn("reconcile", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Close stops every replica double.
func (w *World) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, d := range w.doubles {
		d.Close()
		delete(w.doubles, k)
	}
}

// Reconcile is one round over every tenant repository.
func (w *World) Reconcile(ctx context.Context) error {
	entries, err := os.ReadDir(w.o.OutDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(w.o.OutDir, e.Name(), ".git")); e.IsDir() && err == nil {
			if err := w.tenant(ctx, e.Name()); err != nil {
				errs = append(errs, fmt.Errorf("tenant %s: %w", e.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

func (w *World) tenant(ctx context.Context, tenant string) error {
	dir := filepath.Join(w.o.OutDir, tenant)
	rev, err := revision(dir)
	if err != nil || rev == "" {
		return err
	}
	w.mu.Lock()
	done, p := w.synced[tenant], w.pending[tenant]
	w.mu.Unlock()
	if rev != done {
		if p.rev != rev {
			// A new commit: Argo CD notices it first and syncs it a moment later.
			w.mu.Lock()
			w.pending[tenant] = pendingSync{rev: rev, since: time.Now()}
			w.mu.Unlock()
			return w.notice(ctx, tenant, dir, rev)
		}
		if time.Since(p.since) < w.o.Step {
			return nil
		}
		if err := w.sync(ctx, tenant, dir, rev); err != nil {
			return err
		}
		w.mu.Lock()
		w.synced[tenant] = rev
		w.mu.Unlock()
	}
	return w.workloads(ctx, tenant)
}

// revision is the commit on the repository's branch.
func revision(dir string) (string, error) {
	repo, err := git.PlainOpen(dir)
	if err != nil {
		return "", err
	}
	ref, err := repo.Reference("refs/heads/"+publish.DefaultBranch, true)
	if err != nil {
		return "", nil // no commit yet
	}
	return ref.Hash().String(), nil
}

// repoJobs reads the committed files of the repository and groups those of each job.
func repoJobs(ctx context.Context, tenant, dir string) (map[string][]*unstructured.Unstructured, map[string]*unstructured.Unstructured, error) {
	files, _, err := publish.Current(ctx, publish.Target{Name: tenant, Dir: dir})
	if err != nil {
		return nil, nil, err
	}
	jobs, apps := map[string][]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, "jobs/")
		job, file, nested := strings.Cut(rest, "/")
		switch {
		case ok && nested && file != "kustomization.yaml":
			objs, err := manifest.Decode(files[name])
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", name, err)
			}
			jobs[job] = append(jobs[job], objs...)
		case strings.HasPrefix(name, "argocd/applications/"):
			objs, err := manifest.Decode(files[name])
			if err != nil || len(objs) != 1 {
				return nil, nil, fmt.Errorf("%s: one Application expected: %v", name, err)
			}
			apps[strings.TrimSuffix(path.Base(name), ".yaml")] = objs[0]
		}
	}
	return jobs, apps, nil
}

// notice writes the jobs' Applications as OutOfSync at rev: what Argo CD shows between seeing
// a commit and syncing it.
func (w *World) notice(ctx context.Context, tenant, dir, rev string) error {
	_, apps, err := repoJobs(ctx, tenant, dir)
	if err != nil {
		return err
	}
	for _, app := range apps {
		if err := w.apply(ctx, w.o.Host, app); err != nil {
			return err
		}
		now := metav1.Now()
		st := lifecycle.ApplicationStatus{Sync: lifecycle.SyncStatus{Status: lifecycle.SyncOutOfSync, Revision: rev},
			OperationState: &lifecycle.OperationState{Phase: lifecycle.PhaseRunning, StartedAt: now,
				Operation: lifecycle.Operation{Sync: &lifecycle.SyncOperation{Revision: rev}, InitiatedBy: &lifecycle.OperationInitiator{Automated: true}},
				Message:   "syncing revision " + rev[:12]}}
		if err := w.setStatus(ctx, app, st); err != nil {
			return err
		}
	}
	w.o.Log.Info("noticed a commit", "tenant", tenant, "revision", rev[:12])
	return nil
}

// sync applies the commit: each job's objects to the tenant's cluster and its Application,
// Synced, to the host; then prunes what the commit no longer has.
func (w *World) sync(ctx context.Context, tenant, dir, rev string) error {
	jobs, apps, err := repoJobs(ctx, tenant, dir)
	if err != nil {
		return err
	}
	tc := w.o.Tenant(tenant)
	for job, objs := range jobs {
		for _, o := range objs {
			if o.GetKind() == v1alpha1.KindModelMaster {
				model, _, _ := unstructured.NestedString(o.Object, "spec", "model")
				w.mu.Lock()
				w.models[o.GetName()] = model
				w.mu.Unlock()
			}
			if o.GetNamespace() != "" {
				if err := ensureNamespace(ctx, tc, o.GetNamespace()); err != nil {
					return err
				}
			}
			if err := w.apply(ctx, tc, o); err != nil {
				return fmt.Errorf("job %s: %w", job, err)
			}
		}
	}
	now := metav1.Now()
	for _, app := range apps {
		st := lifecycle.ApplicationStatus{
			Sync:   lifecycle.SyncStatus{Status: lifecycle.SyncSynced, Revision: rev},
			Health: lifecycle.HealthStatus{Status: lifecycle.HealthProgressing},
			OperationState: &lifecycle.OperationState{Phase: lifecycle.PhaseSucceeded, StartedAt: now, FinishedAt: &now,
				Operation: lifecycle.Operation{Sync: &lifecycle.SyncOperation{Revision: rev}, InitiatedBy: &lifecycle.OperationInitiator{Automated: true}},
				Message:   "successfully synced (all tasks run)"},
			ReconciledAt: &now,
		}
		if err := w.setStatus(ctx, app, st); err != nil {
			return err
		}
	}
	w.o.Log.Info("synced", "tenant", tenant, "revision", rev[:12], "jobs", len(jobs))
	return w.prune(ctx, tenant, jobs)
}

// prune deletes the Applications and the tenant-cluster objects of jobs the commit does not
// have, as Argo CD's prune and the Application's resources finalizer do.
func (w *World) prune(ctx context.Context, tenant string, jobs map[string][]*unstructured.Unstructured) error {
	gone := func(labels map[string]string) bool {
		_, keep := jobs[labels[v1alpha1.LabelJob]]
		return labels[v1alpha1.LabelJob] != "" && !keep
	}
	var apps unstructured.UnstructuredList
	apps.SetGroupVersionKind(cluster.ApplicationGVK.GroupVersion().WithKind("ApplicationList"))
	if err := w.o.Host.List(ctx, &apps, client.MatchingLabels{v1alpha1.LabelTenant: tenant}); err != nil {
		return err
	}
	for i := range apps.Items {
		if gone(apps.Items[i].GetLabels()) {
			if err := client.IgnoreNotFound(w.o.Host.Delete(ctx, &apps.Items[i])); err != nil {
				return err
			}
		}
	}
	tc := w.o.Tenant(tenant)
	sel := client.MatchingLabels{v1alpha1.LabelTenant: tenant}
	lists := []client.ObjectList{&kubevirtv1.VirtualMachineInstanceList{}, &kubevirtv1.VirtualMachineList{},
		&corev1.PersistentVolumeClaimList{}, &corev1.ServiceList{}, &corev1.SecretList{},
		&v1alpha1.ManagedInferenceJobList{}}
	for _, l := range lists {
		if err := tc.List(ctx, l, sel); err != nil {
			return err
		}
		items, err := meta(l)
		if err != nil {
			return err
		}
		for _, o := range items {
			if gone(o.GetLabels()) {
				if err := client.IgnoreNotFound(tc.Delete(ctx, o)); err != nil {
					return err
				}
				w.forget(o)
			}
		}
	}
	return nil
}

// meta are a list's items as objects.
func meta(l client.ObjectList) ([]client.Object, error) {
	var out []client.Object
	switch l := l.(type) {
	case *kubevirtv1.VirtualMachineInstanceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *kubevirtv1.VirtualMachineList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.PersistentVolumeClaimList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.SecretList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1alpha1.ManagedInferenceJobList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unknown list %T", l)
	}
	return out, nil
}

// forget stops the replica double of a deleted instance.
func (w *World) forget(o client.Object) {
	if _, ok := o.(*kubevirtv1.VirtualMachineInstance); !ok {
		return
	}
	key := o.GetNamespace() + "/" + o.GetName()
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.doubles[key]; d != nil {
		d.Close()
		delete(w.doubles, key)
	}
	delete(w.vmis, key)
}

func (w *World) apply(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	if ns := u.GetNamespace(); ns != "" {
		key := nsKey{c, ns}
		w.mu.Lock()
		made := w.nss[key]
		w.mu.Unlock()
		if !made {
			if err := ensureNamespace(ctx, c, ns); err != nil {
				return err
			}
			w.mu.Lock()
			w.nss[key] = true
			w.mu.Unlock()
		}
	}
	u = u.DeepCopy()
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// setStatus writes an Application's status, as Argo CD's controller does.
func (w *World) setStatus(ctx context.Context, app *unstructured.Unstructured, st lifecycle.ApplicationStatus) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(cluster.ApplicationGVK)
	if err := w.o.Host.Get(ctx, client.ObjectKeyFromObject(app), u); err != nil {
		return err
	}
	obj, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	u.Object["status"] = obj
	return w.o.Host.Update(ctx, u)
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// workloads binds the tenant's claims and walks each VM's instance on.
func (w *World) workloads(ctx context.Context, tenant string) error {
	tc := w.o.Tenant(tenant)
	sel := client.MatchingLabels{v1alpha1.LabelTenant: tenant}
	var pvcs corev1.PersistentVolumeClaimList
	if err := tc.List(ctx, &pvcs, sel); err != nil {
		return err
	}
	for i := range pvcs.Items {
		if p := &pvcs.Items[i]; p.Status.Phase != corev1.ClaimBound {
			p.Status.Phase = corev1.ClaimBound
			if err := tc.Status().Update(ctx, p); err != nil {
				return err
			}
		}
	}
	var vms kubevirtv1.VirtualMachineList
	if err := tc.List(ctx, &vms, sel); err != nil {
		return err
	}
	var errs []error
	for i := range vms.Items {
		if err := w.instance(ctx, tc, &vms.Items[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// instance makes the VM's instance if it has none, then moves it one stage on per step:
// Scheduled, Running (its model server a replica double), Ready.
func (w *World) instance(ctx context.Context, c client.Client, vm *kubevirtv1.VirtualMachine) error {
	key := vm.Namespace + "/" + vm.Name
	var vmi kubevirtv1.VirtualMachineInstance
	err := c.Get(ctx, client.ObjectKeyFromObject(vm), &vmi)
	now := time.Now()
	if apierrors.IsNotFound(err) {
		tmpl := vm.Spec.Template
		vmi = kubevirtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: vm.Namespace, Labels: tmpl.ObjectMeta.Labels, Annotations: tmpl.ObjectMeta.Annotations,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}},
			Spec: tmpl.Spec,
		}
		w.mu.Lock()
		w.nodes++
		node := "demo-gpu-" + strconv.Itoa(w.nodes)
		w.vmis[key] = now
		w.mu.Unlock()
		phase(&vmi, kubevirtv1.Scheduled, node, now)
		condition(&vmi, "PodScheduled", corev1.ConditionTrue, "", now)
		w.o.Log.Info("instance scheduled", "vmi", key, "node", node)
		return c.Create(ctx, &vmi)
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	made, known := w.vmis[key]
	if !known { // made before this process started: carry on from here
		w.vmis[key], made = now, now
	}
	w.mu.Unlock()
	age := now.Sub(made)
	switch {
	case vmi.Status.Phase == kubevirtv1.Scheduled && age >= w.o.Step:
		port, err := w.modelServer(key, vm)
		if err != nil {
			return err
		}
		phase(&vmi, kubevirtv1.Running, vmi.Status.NodeName, now)
		vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "127.0.0.1", IPs: []string{"127.0.0.1"}}}
		if port > 0 {
			vmi.Annotations[v1alpha1.AnnotationServingPort] = strconv.Itoa(port)
		}
		condition(&vmi, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "HTTP probe failed with statuscode: 503", now)
		w.o.Log.Info("instance running", "vmi", key, "port", port)
		return c.Update(ctx, &vmi)
	case vmi.Status.Phase == kubevirtv1.Running && !ready(&vmi) && age >= 2*w.o.Step:
		condition(&vmi, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", now)
		w.o.Log.Info("instance ready", "vmi", key)
		return c.Update(ctx, &vmi)
	}
	return nil
}

// modelServer starts the replica double of a serving node (once) and returns its port; 0 for
// a node that serves no HTTP (a --headless worker).
func (w *World) modelServer(key string, vm *kubevirtv1.VirtualMachine) (int, error) {
	labels := vm.Spec.Template.ObjectMeta.Labels
	if labels[v1alpha1.LabelServing] != "true" {
		return 0, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.doubles[key]; d != nil {
		return d.Port(), nil
	}
	runtime := replicadouble.RuntimeVLLM
	if labels[v1alpha1.LabelRuntime] == string(v1alpha1.RuntimeParakeet) {
		runtime = replicadouble.RuntimeParakeet
	}
	model := w.models[labels[v1alpha1.LabelModelMaster]]
	if model == "" {
		model = labels[v1alpha1.LabelModelMaster]
	}
	d, err := replicadouble.Start(replicadouble.Options{Name: vm.Name, Model: model, Runtime: runtime})
	if err != nil {
		return 0, err
	}
	w.doubles[key] = d
	return d.Port(), nil
}

func ready(v *kubevirtv1.VirtualMachineInstance) bool {
	for _, c := range v.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func phase(v *kubevirtv1.VirtualMachineInstance, p kubevirtv1.VirtualMachineInstancePhase, node string, at time.Time) {
	v.Status.Phase, v.Status.NodeName = p, node
	v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
		kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: metav1.NewTime(at)})
}

func condition(v *kubevirtv1.VirtualMachineInstance, typ kubevirtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, msg string, at time.Time) {
	c := kubevirtv1.VirtualMachineInstanceCondition{Type: typ, Status: status, Message: msg, LastTransitionTime: metav1.NewTime(at)}
	for i := range v.Status.Conditions {
		if v.Status.Conditions[i].Type == typ {
			v.Status.Conditions[i] = c
			return
		}
	}
	v.Status.Conditions = append(v.Status.Conditions, c)
}
