package metering

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/kubewatch"
)

// ClusterRegistry reports the tenant clusters in full every time they change
// (clusters.Registry).
type ClusterRegistry interface {
	Run(ctx context.Context, out chan<- clusters.Snapshot) error
}

// Watch keeps a cache of every tenant cluster's metered VMIs (inferplane's, of the tenant, in
// the tenant's namespace: workers included, since a worker holds GPUs as the head does) and
// says which tenants changed. It reads what the gateway reads (the cluster registry of the host
// cluster), with a watch of its own per cluster: one process, one writer of the records.
type Watch struct {
	Registry ClusterRegistry
	Logger   *slog.Logger

	mu       sync.Mutex
	tenants  map[string]*tenantWatch
	read     bool // a registry snapshot arrived
	changed  map[string]bool
	signal   *kubewatch.Signal
	removed  []string
	ctx      context.Context
	newCache func(c clusters.Cluster, onWatchError func()) (cache.Cache, error)
}

// tenantWatch is one tenant cluster's cache.
type tenantWatch struct {
	cluster clusters.Cluster
	c       cache.Cache
	writer  client.Client // the finalizer's patches
	stop    context.CancelFunc
	synced  atomic.Bool
	// errors counts failed lists and watches; a look is live only when none failed since the
	// look before.
	errors atomic.Uint64
}

// NewWatch returns a watch of the registry's clusters.
func NewWatch(reg ClusterRegistry, log *slog.Logger) *Watch {
	w := &Watch{Registry: reg, Logger: cmp.Or(log, slog.Default()), tenants: map[string]*tenantWatch{},
		changed: map[string]bool{}, signal: kubewatch.NewSignal()}
	w.newCache = w.defaultCache
	return w
}

// Changed is raised when a tenant's VMIs or the registry changed.
func (w *Watch) Changed() <-chan struct{} { return w.signal.C }

// Run follows the registry until ctx ends, starting, restarting and stopping the clusters'
// caches.
func (w *Watch) Run(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	out := make(chan clusters.Snapshot)
	errc := make(chan error, 1)
	go func() { errc <- w.Registry.Run(ctx, out) }()
	var prev clusters.Snapshot
	for {
		select {
		case <-ctx.Done():
			w.stopAll()
			return nil
		case err := <-errc:
			w.stopAll()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("cluster registry: %w", err)
		case s := <-out:
			w.apply(prev, s)
			prev = s
		}
	}
}

func (w *Watch) apply(prev, next clusters.Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := !w.read
	w.read = true
	for _, ch := range clusters.Changes(prev, next) {
		t := ch.Cluster.Tenant
		if old := w.tenants[t]; old != nil {
			old.stop()
			delete(w.tenants, t)
		}
		switch ch.Type {
		case clusters.Removed:
			w.removed = append(w.removed, t)
			w.Logger.Info("meter: tenant cluster left the registry; its VMIs are closed where last seen", "tenant", t)
		default:
			w.startLocked(ch.Cluster)
		}
		w.changed[t] = true
	}
	if first {
		w.changed[""] = true // the registry itself: tenants the meter knows and it does not list
	}
	w.signal.Raise()
}

func (w *Watch) startLocked(cl clusters.Cluster) {
	ctx, stop := context.WithCancel(w.ctx)
	tw := &tenantWatch{cluster: cl, stop: stop}
	w.tenants[cl.Tenant] = tw
	go w.run(ctx, tw)
}

// run starts a tenant's cache and marks it synced; the informers retry a cluster that does not
// answer on their own, and the look reports it not synced meanwhile.
func (w *Watch) run(ctx context.Context, tw *tenantWatch) {
	t := tw.cluster.Tenant
	c, err := w.newCache(tw.cluster, func() { tw.errors.Add(1) })
	if err == nil {
		tw.c = c
		var inf cache.Informer
		inf, err = c.GetInformer(ctx, &kubevirtv1.VirtualMachineInstance{}, cache.BlockUntilSynced(false))
		if err == nil {
			_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { w.mark(t) },
				UpdateFunc: func(any, any) { w.mark(t) },
				DeleteFunc: func(any) { w.mark(t) },
			})
		}
	}
	if err == nil {
		tw.writer, err = writerFor(tw.cluster.Config)
	}
	if err != nil {
		w.Logger.Error("meter: cannot watch the tenant's VMIs", "tenant", t, "server", tw.cluster.Server, "error", kubewatch.Cause(err, tw.cluster.Server))
		return
	}
	stop, err := kubewatch.Start(ctx, c)
	if err != nil {
		if ctx.Err() == nil {
			w.Logger.Error("meter: cannot watch the tenant's VMIs", "tenant", t, "server", tw.cluster.Server, "error", kubewatch.Cause(err, tw.cluster.Server))
		}
		return
	}
	tw.synced.Store(true)
	w.mark(t)
	<-ctx.Done()
	stop()
}

func (w *Watch) mark(tenant string) {
	w.mu.Lock()
	w.changed[tenant] = true
	w.mu.Unlock()
	w.signal.Raise()
}

func (w *Watch) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for t, tw := range w.tenants {
		tw.stop()
		delete(w.tenants, t)
	}
}

// defaultCache caches the tenant's metered VMIs, trimmed to what a Fact reads.
func (w *Watch) defaultCache(cl clusters.Cluster, onWatchError func()) (cache.Cache, error) {
	scheme := k8sruntime.NewScheme()
	if err := kubevirtv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelTenant: cl.Tenant})
	return cache.New(rest.CopyConfig(cl.Config), cache.Options{
		Scheme:               scheme,
		DefaultNamespaces:    map[string]cache.Config{cl.Tenant: {}},
		DefaultLabelSelector: sel,
		DefaultTransform:     trimVMI,
		DefaultWatchErrorHandler: func(ctx context.Context, r *toolscache.Reflector, err error) {
			onWatchError()
			w.Logger.Warn("meter: watching a tenant's VMIs failed; retrying", "tenant", cl.Tenant, "error", kubewatch.Cause(err, cl.Server))
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		},
	})
}

// trimVMI keeps what FactOf reads.
func trimVMI(obj any) (any, error) {
	if o, ok := obj.(*kubevirtv1.VirtualMachineInstance); ok {
		o.ManagedFields = nil
		if m := o.Annotations[v1alpha1.AnnotationModel]; m != "" {
			o.Annotations = map[string]string{v1alpha1.AnnotationModel: m}
		} else {
			o.Annotations = nil
		}
		o.Spec = kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{GPUs: o.Spec.Domain.Devices.GPUs}}}
		o.Status = kubevirtv1.VirtualMachineInstanceStatus{Phase: o.Status.Phase, PhaseTransitionTimestamps: o.Status.PhaseTransitionTimestamps}
	}
	return obj, nil
}

// Changes are what changed since the last call: tenants whose VMIs may have (all tenants when
// the registry was first read: all is true), and tenants whose cluster left the registry.
func (w *Watch) Changes() (tenants []string, all bool, removed []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for t := range w.changed {
		if t == "" {
			all = true
			continue
		}
		tenants = append(tenants, t)
	}
	clear(w.changed)
	removed, w.removed = w.removed, nil
	slices.Sort(tenants)
	return tenants, all, removed
}

// Listed are the tenants the registry lists now, and whether it has been read.
func (w *Watch) Listed() (map[string]bool, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]bool, len(w.tenants))
	for t := range w.tenants {
		out[t] = true
	}
	return out, w.read
}

// Look is one full look at a tenant's cluster: its metered VMIs as facts, and the count of
// failed lists and watches so far (a look is live when it did not grow since the last one).
// ok is false while the cluster has not been read.
func (w *Watch) Look(ctx context.Context, tenant string) (facts []Fact, errors uint64, ok bool, err error) {
	w.mu.Lock()
	tw := w.tenants[tenant]
	w.mu.Unlock()
	if tw == nil || !tw.synced.Load() {
		return nil, 0, false, nil
	}
	errors = tw.errors.Load()
	var list kubevirtv1.VirtualMachineInstanceList
	if err := tw.c.List(ctx, &list, client.InNamespace(tenant)); err != nil {
		return nil, 0, false, err
	}
	for i := range list.Items {
		if Metered(&list.Items[i]) {
			facts = append(facts, FactOf(&list.Items[i]))
		}
	}
	return facts, errors, true, nil
}

// writerFor is a client for the finalizer's patches, allowed a burst: a meter's first start
// holds every running VMI of the cluster at once.
func writerFor(cfg *rest.Config) (client.Client, error) {
	scheme := k8sruntime.NewScheme()
	if err := kubevirtv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	return client.New(cfg, client.Options{Scheme: scheme})
}

// SetHold adds the meter's finalizer to a VMI (hold) or removes it. It reads the VMI from the
// API server, not the cache (which may lag a change just made), and patches with its
// resourceVersion, so that a change it did not see is never overwritten: a conflict reads again.
func (w *Watch) SetHold(ctx context.Context, st VMIState, hold bool) error {
	w.mu.Lock()
	tw := w.tenants[st.Labels.Tenant]
	w.mu.Unlock()
	if tw == nil || !tw.synced.Load() {
		return fmt.Errorf("the cluster of tenant %s is not watched", st.Labels.Tenant)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var vmi kubevirtv1.VirtualMachineInstance
		if err := tw.writer.Get(ctx, client.ObjectKey{Namespace: st.Namespace, Name: st.Name}, &vmi); err != nil {
			return err
		}
		if string(vmi.UID) != st.UID || slices.Contains(vmi.Finalizers, Finalizer) == hold {
			return nil
		}
		orig := vmi.DeepCopy()
		if hold {
			vmi.Finalizers = append(vmi.Finalizers, Finalizer)
		} else {
			vmi.Finalizers = slices.DeleteFunc(vmi.Finalizers, func(f string) bool { return f == Finalizer })
		}
		return tw.writer.Patch(ctx, &vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
	return client.IgnoreNotFound(kubewatch.Cause(err, tw.cluster.Server))
}
