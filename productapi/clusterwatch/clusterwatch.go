// Package clusterwatch is the product API's view of the clusters, kept by watches rather than
// read per request: the cluster registry of the host cluster (clusters.Registry), the tenants'
// Argo CD Applications in the host cluster, and per tenant its VirtualMachines, instances,
// model-cache claims and their events in its own cluster. A tenant's watches start on the
// first read of that tenant and last while its registry entry is unchanged (a rotated token
// restarts them), so an API server watches the tenants its customers look at.
package clusterwatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

// Watcher keeps the watch caches.
type Watcher struct {
	// Host reaches the host cluster (Argo CD's Applications, the cluster registry).
	Host *rest.Config
	// Registry selects the registry's Secrets, as for `xds serve --source clusters`.
	Registry clusters.Options
	Logger   *slog.Logger
	// SyncTimeout bounds the wait for a new watch's first list (default 20 s); RetryAfter is
	// how long a watch that failed to start is not tried again (default 10 s).
	SyncTimeout, RetryAfter time.Duration

	mu      sync.Mutex
	snap    *clusters.Snapshot
	first   chan struct{}
	regErr  error
	caches  map[string]*watched // by what it watches (cluster, namespace, tenant)
	started bool
	ctx     context.Context
}

// watched is one cache, starting or started.
type watched struct {
	ready chan struct{}
	c     cache.Cache
	stop  func()
	err   error
	at    time.Time
}

// Start starts the registry's watch; it returns at once (reads wait for the first snapshot).
func (w *Watcher) Start(ctx context.Context) error {
	if w.Host == nil {
		return errors.New("clusterwatch: no host cluster")
	}
	if err := w.Registry.Validate(); err != nil {
		return err
	}
	w.mu.Lock()
	w.first, w.caches, w.started, w.ctx = make(chan struct{}), map[string]*watched{}, true, ctx
	w.mu.Unlock()
	log := w.log()
	out := make(chan clusters.Snapshot)
	reg := &clusters.Registry{Config: w.Host, Options: w.Registry, Logger: log}
	go func() {
		if err := reg.Run(ctx, out); err != nil && ctx.Err() == nil {
			log.Error("cluster registry: watch stopped", "error", err)
			w.mu.Lock()
			w.regErr = err
			w.mu.Unlock()
			w.closeFirst()
		}
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-out:
				w.setSnapshot(s)
			}
		}
	}()
	return nil
}

func (w *Watcher) log() *slog.Logger { return cmp.Or(w.Logger, slog.Default()) }

func (w *Watcher) closeFirst() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.first:
	default:
		close(w.first)
	}
}

// setSnapshot keeps the registry's latest snapshot and stops the watches of tenant clusters
// whose entry changed (the next read starts them again with the new credentials).
func (w *Watcher) setSnapshot(s clusters.Snapshot) {
	w.mu.Lock()
	prev := w.snap
	w.snap = &s
	w.mu.Unlock()
	w.closeFirst()
	if prev == nil {
		return
	}
	for _, ch := range clusters.Changes(*prev, s) {
		w.log().Info("cluster registry: tenant cluster changed; its watches restart on the next read", "tenant", ch.Cluster.Tenant, "change", ch.Type)
		w.dropPrefix("tenant/" + ch.Cluster.Secret + "/")
	}
}

func (w *Watcher) dropPrefix(prefix string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.caches {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			if c.stop != nil {
				c.stop()
			}
			delete(w.caches, k)
		}
	}
}

// snapshot is the registry, once first read (bounded by SyncTimeout).
func (w *Watcher) snapshot(ctx context.Context) (clusters.Snapshot, error) {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return clusters.Snapshot{}, errors.New("clusterwatch: not started")
	}
	first := w.first
	w.mu.Unlock()
	t := time.NewTimer(w.syncTimeout())
	defer t.Stop()
	select {
	case <-first:
	case <-ctx.Done():
		return clusters.Snapshot{}, ctx.Err()
	case <-t.C:
		return clusters.Snapshot{}, fmt.Errorf("the cluster registry in the host cluster (%s) was not read within %s", w.Host.Host, w.syncTimeout())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.snap == nil {
		return clusters.Snapshot{}, fmt.Errorf("the cluster registry in the host cluster (%s): %v", w.Host.Host, w.regErr)
	}
	return *w.snap, nil
}

func (w *Watcher) syncTimeout() time.Duration { return cmp.Or(w.SyncTimeout, 20*time.Second) }

// get returns the cache named key, starting it with newCache on first use; a cache that
// failed to start is retried after RetryAfter.
func (w *Watcher) get(ctx context.Context, key string, newCache func() (cache.Cache, []client.Object, error)) (cache.Cache, error) {
	w.mu.Lock()
	e := w.caches[key]
	if e != nil && e.err != nil && time.Since(e.at) > cmp.Or(w.RetryAfter, 10*time.Second) {
		delete(w.caches, key)
		e = nil
	}
	if e == nil {
		e = &watched{ready: make(chan struct{}), at: time.Now()}
		w.caches[key] = e
		go w.start(e, newCache)
	}
	w.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.c, e.err
}

func (w *Watcher) start(e *watched, newCache func() (cache.Cache, []client.Object, error)) {
	defer close(e.ready)
	c, objs, err := newCache()
	if err != nil {
		e.err = err
		return
	}
	for _, o := range objs {
		if _, err := c.GetInformer(w.ctx, o, cache.BlockUntilSynced(false)); err != nil {
			e.err = err
			return
		}
	}
	runCtx, stop := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Start(runCtx) }()
	syncCtx, cancel := context.WithTimeout(runCtx, w.syncTimeout())
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		stop()
		select {
		case err := <-done:
			if err != nil {
				e.err = err
				return
			}
		case <-time.After(time.Second):
		}
		e.err = fmt.Errorf("no complete list within %s (are the kinds served and readable?)", w.syncTimeout())
		return
	}
	e.c, e.stop = c, stop
}

// Objects reads a tenant's Applications and workloads from the caches.
func (w *Watcher) Objects(ctx context.Context, t cluster.Tenant) (*cluster.Objects, error) {
	objs := &cluster.Objects{}
	apps, err := w.applications(ctx, t)
	if err != nil {
		return nil, err
	}
	objs.Apps = apps
	c, host, err := w.tenantCache(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := cluster.ReadWorkloads(ctx, readerOf{c}, host, t, objs); err != nil {
		return nil, err
	}
	return objs, nil
}

// readerOf lists events from the cache without a field selector (the cache's watch already
// selects claim events; a cache has no index for field selectors).
type readerOf struct{ cache.Cache }

func (r readerOf) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.EventList); ok {
		var kept []client.ListOption
		for _, o := range opts {
			if _, isField := o.(client.MatchingFieldsSelector); !isField {
				kept = append(kept, o)
			}
		}
		opts = kept
	}
	return r.Cache.List(ctx, list, opts...)
}

var appGVK = cluster.ApplicationGVK

// applications are the tenant's Applications by job, from the host cache of the tenant's
// Argo CD namespace.
func (w *Watcher) applications(ctx context.Context, t cluster.Tenant) (map[string]*lifecycle.Application, error) {
	c, err := w.get(ctx, "host/"+t.ArgoCDNamespace, func() (cache.Cache, []client.Object, error) {
		app := &unstructured.Unstructured{}
		app.SetGroupVersionKind(appGVK)
		sel, err := labels.NewRequirement(v1alpha1.LabelTenant, selection.Exists, nil)
		if err != nil {
			return nil, nil, err
		}
		c, err := cache.New(w.Host, cache.Options{
			Scheme:                       k8sruntime.NewScheme(),
			DefaultUnsafeDisableDeepCopy: ptr(true), // read only: a list shares the cache's objects
			DefaultNamespaces:            map[string]cache.Config{t.ArgoCDNamespace: {}},
			ByObject:                     map[client.Object]cache.ByObject{app: {Label: labels.NewSelector().Add(*sel)}},
		})
		return c, []client.Object{app}, err
	})
	if err != nil {
		return nil, fmt.Errorf("host cluster (%s): watch Argo CD Applications in namespace %s: %w", w.Host.Host, t.ArgoCDNamespace, err)
	}
	return cluster.ReadApplications(ctx, c, w.Host.Host, t)
}

// tenantCache is the cache of a tenant's workloads in its own cluster.
func (w *Watcher) tenantCache(ctx context.Context, t cluster.Tenant) (cache.Cache, string, error) {
	snap, err := w.snapshot(ctx)
	if err != nil {
		return nil, "", err
	}
	cl, err := clusters.Find(snap, w.Registry, t.Name, t.Cluster)
	if err != nil {
		return nil, "", fmt.Errorf("the cluster of tenant %s: host cluster (%s): %w", t.Name, w.Host.Host, err)
	}
	key := "tenant/" + cl.Secret + "/" + cl.Fingerprint + "/" + t.Namespace + "/" + t.Name
	c, err := w.get(ctx, key, func() (cache.Cache, []client.Object, error) {
		mine := labels.SelectorFromSet(labels.Set{v1alpha1.LabelTenant: t.Name})
		c, err := cache.New(rest.CopyConfig(cl.Config), cache.Options{
			Scheme:                       cluster.Scheme(),
			DefaultUnsafeDisableDeepCopy: ptr(true), // read only: a list shares the cache's objects
			DefaultNamespaces:            map[string]cache.Config{t.Namespace: {}},
			ByObject: map[client.Object]cache.ByObject{
				&kubevirtv1.VirtualMachine{}:         {Label: mine},
				&kubevirtv1.VirtualMachineInstance{}: {Label: mine},
				&corev1.PersistentVolumeClaim{}:      {Label: mine},
				&corev1.Event{}:                      {Field: fields.OneTermEqualSelector("involvedObject.kind", "PersistentVolumeClaim")},
			},
		})
		return c, []client.Object{&kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}, &corev1.PersistentVolumeClaim{}, &corev1.Event{}}, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("cluster of tenant %s (%s): watch its VMs, VMIs, claims and events in namespace %s: %w", t.Name, cl.Server, t.Namespace, err)
	}
	return c, cl.Server, nil
}

// GuestLogs reaches the VMs' console logs in a tenant's cluster: its virt-launcher pods from a
// watch cache of their own (started on first use, like the workloads', and apart from them, so
// credentials that may not list pods leave the stages readable), their logs through its API
// server (pods/log).
func (w *Watcher) GuestLogs(ctx context.Context, t cluster.Tenant) (joblogs.Cluster, error) {
	snap, err := w.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := clusters.Find(snap, w.Registry, t.Name, t.Cluster)
	if err != nil {
		return nil, fmt.Errorf("the cluster of tenant %s: host cluster (%s): %w", t.Name, w.Host.Host, err)
	}
	key := "tenant/" + cl.Secret + "/" + cl.Fingerprint + "/" + t.Namespace + "/" + t.Name + "/pods"
	c, err := w.get(ctx, key, func() (cache.Cache, []client.Object, error) {
		sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelTenant: t.Name, kubevirtv1.AppLabel: joblogs.LauncherValue})
		c, err := cache.New(rest.CopyConfig(cl.Config), cache.Options{
			Scheme:                       cluster.Scheme(),
			DefaultUnsafeDisableDeepCopy: ptr(true), // read only
			DefaultTransform:             cache.TransformStripManagedFields(),
			DefaultNamespaces:            map[string]cache.Config{t.Namespace: {}},
			ByObject:                     map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: sel}},
		})
		return c, []client.Object{&corev1.Pod{}}, err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster of tenant %s (%s): watch its virt-launcher pods in namespace %s: %w", t.Name, cl.Server, t.Namespace, err)
	}
	kube, err := joblogs.NewKube(cl.Config)
	if err != nil {
		return nil, err
	}
	return cachedPods{c: c, Kube: kube}, nil
}

// cachedPods lists pods from the watch cache and reads their logs from the API server.
type cachedPods struct {
	c cache.Cache
	joblogs.Kube
}

func (p cachedPods) Pods(ctx context.Context, namespace string, sel labels.Selector) ([]corev1.Pod, error) {
	var l corev1.PodList
	if err := p.c.List(ctx, &l, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Restart restarts a job's VMs in the tenant's cluster, reached through the registry.
func (w *Watcher) Restart(ctx context.Context, t cluster.Tenant, job string, replica int32) ([]cluster.Restarted, error) {
	snap, err := w.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := clusters.Find(snap, w.Registry, t.Name, t.Cluster)
	if err != nil {
		return nil, fmt.Errorf("the cluster of tenant %s: %w", t.Name, err)
	}
	return cluster.Restart(ctx, rest.CopyConfig(cl.Config), t, job, replica)
}

func ptr[T any](v T) *T { return &v }
