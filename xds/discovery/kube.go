package discovery

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/kubewatch"
	"github.com/inferplane/inferplane/internal/warning"
)

// Kube discovers replicas from KubeVirt VirtualMachineInstances through a controller-runtime
// cache. It watches only VMIs labelled as inferplane's serving nodes (managed-by inferplane,
// serving "true", with a tenant label), so a cluster's other VMs cost nothing.
type Kube struct {
	Config *rest.Config
	// Namespaces limits the watch; empty watches every namespace.
	Namespaces []string
	// AllowForeignNamespace accepts a VMI whose namespace differs from its tenant label. Off
	// by default: a tenant's workloads live in the namespace named after it, and a VMI that
	// claims another tenant's label must not receive that tenant's traffic.
	AllowForeignNamespace bool
	// Debounce gathers a burst of VMI events into one update (default 50ms).
	Debounce time.Duration
	Logger   *slog.Logger
	// OnWatchError, when set, is told about every failed list or watch (the API server is
	// unreachable, access was revoked, ...). The last state stays in place meanwhile.
	OnWatchError func(error)
}

// Selector is the label selector of the VMIs Kube watches.
func Selector() labels.Selector {
	must := func(key string, op selection.Operator, vals ...string) labels.Requirement {
		r, err := labels.NewRequirement(key, op, vals)
		if err != nil {
			panic(err) // static keys and values: only a programming error gets here
		}
		return *r
	}
	return labels.NewSelector().Add(
		must(v1alpha1.LabelManagedBy, selection.Equals, v1alpha1.ManagedByValue),
		must(v1alpha1.LabelServing, selection.Equals, v1alpha1.ServingValue),
		must(v1alpha1.LabelTenant, selection.Exists),
	)
}

// Run implements Source.
func (k *Kube) Run(ctx context.Context, updates chan<- Update) error {
	log := cmp.Or(k.Logger, slog.Default())
	c, err := cache.New(k.Config, k.cacheOptions(log))
	if err != nil {
		return fmt.Errorf("kubernetes source: %w", err)
	}
	changed := kubewatch.NewSignal()
	if err := kubewatch.Inform(ctx, c, &kubevirtv1.VirtualMachineInstance{}, changed); err != nil {
		return fmt.Errorf("kubernetes source: informer for VirtualMachineInstances: %w", err)
	}
	log.Info("waiting for the VirtualMachineInstance cache to sync", "selector", Selector().String())
	stop, err := kubewatch.Start(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("kubernetes source: %w", err)
	}
	defer stop()
	changed.Raise()
	k.loop(ctx, c, changed, updates, log)
	return nil
}

// loop sends an update for every settled burst of changes until ctx ends.
func (k *Kube) loop(ctx context.Context, c cache.Cache, changed *kubewatch.Signal, updates chan<- Update, log *slog.Logger) {
	debounce := cmp.Or(k.Debounce, 50*time.Millisecond)
	svc := &services{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed.C:
		}
		// Let a burst of events (a rollout, a resync) settle into one update.
		select {
		case <-ctx.Done():
			return
		case <-time.After(debounce):
		}
		var list kubevirtv1.VirtualMachineInstanceList
		if err := c.List(ctx, &list); err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("listing cached VirtualMachineInstances", "error", err)
			continue
		}
		u := k.convert(list.Items)
		svc.resolve(ctx, c, &u, changed, log)
		select {
		case updates <- u:
		case <-ctx.Done():
			return
		}
	}
}

// cacheOptions keep in the cache only the VMIs of serving nodes (and, once a replica in mode
// loadbalancer needs them, inferplane's Services), trimmed to what is read.
func (k *Kube) cacheOptions(log *slog.Logger) cache.Options {
	scheme := k8sruntime.NewScheme()
	_ = kubevirtv1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	opts := cache.Options{
		Scheme:               scheme,
		DefaultLabelSelector: Selector(),
		ByObject:             map[client.Object]cache.ByObject{&corev1.Service{}: {Label: serviceSelector()}},
		DefaultTransform:     trim,
		DefaultWatchErrorHandler: func(ctx context.Context, r *toolscache.Reflector, err error) {
			log.Warn("watching the cluster failed; keeping the last known replicas", "error", err)
			if k.OnWatchError != nil {
				k.OnWatchError(err)
			}
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		},
	}
	if len(k.Namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range k.Namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// services resolves the addresses of replicas in mode loadbalancer. The Service informer
// starts when the first such replica appears, so a cluster without any needs no permission
// to read Services.
type services struct {
	started bool
	synced  atomic.Bool
}

// resolve fills in u's loadbalancer addresses from the cached Services, or reports why not.
func (s *services) resolve(ctx context.Context, c cache.Cache, u *Update, changed *kubewatch.Signal, log *slog.Logger) {
	need := slices.ContainsFunc(u.Replicas, func(r Replica) bool { return r.Service != "" })
	if need && !s.started {
		s.started = true
		go func() {
			// Blocks until the Services are read (or ctx ends).
			if err := kubewatch.Inform(ctx, c, &corev1.Service{}, changed); err != nil {
				if ctx.Err() == nil {
					log.Error("kubernetes source: informer for Services", "error", err)
				}
				return
			}
			s.synced.Store(true)
			changed.Raise()
		}()
	}
	if !need {
		return
	}
	byName := map[string]*corev1.Service{}
	var list corev1.ServiceList
	if s.synced.Load() {
		if err := c.List(ctx, &list); err != nil {
			log.Error("listing cached Services", "error", err)
		}
		for i := range list.Items {
			byName[list.Items[i].Namespace+"/"+list.Items[i].Name] = &list.Items[i]
		}
	}
	for i := range u.Replicas {
		r := &u.Replicas[i]
		if r.Service == "" {
			continue
		}
		reason := "not served yet: reading Services (address mode loadbalancer)"
		if s.synced.Load() {
			reason = resolveService(r, byName[r.Namespace+"/"+r.Service])
		}
		if reason != "" {
			u.Problems = append(u.Problems, warning.Warning{Object: "VirtualMachineInstance/" + r.Key(), Reason: reason})
		}
	}
}

func (k *Kube) convert(vmis []kubevirtv1.VirtualMachineInstance) Update {
	var u Update
	for i := range vmis {
		r, problems := ReplicaFromVMI(&vmis[i], k.AllowForeignNamespace)
		u.Problems = append(u.Problems, problems...)
		if r != nil {
			u.Replicas = append(u.Replicas, *r)
		}
	}
	slices.SortFunc(u.Replicas, func(a, b Replica) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name)) // without building each Key

	})
	return u
}

// ReplicaFromVMI reads one VMI by the workload contract (docs/design.md). It returns nil when
// the VMI is not a serving node inferplane can route to, with the reasons; a VMI read with a
// default (no serving-port annotation) comes back with a problem too.
func ReplicaFromVMI(vmi *kubevirtv1.VirtualMachineInstance, allowForeignNamespace bool) (*Replica, []warning.Warning) {
	obj := "VirtualMachineInstance/" + vmi.Namespace + "/" + vmi.Name
	var problems []warning.Warning
	skip := func(format string, args ...any) (*Replica, []warning.Warning) {
		return nil, append(problems, warning.Warning{Object: obj, Reason: "skipped: " + fmt.Sprintf(format, args...)})
	}
	l, a := vmi.Labels, vmi.Annotations
	if l[v1alpha1.LabelTenant] == "" {
		return nil, nil // not inferplane's
	}
	if l[v1alpha1.LabelServing] != v1alpha1.ServingValue {
		return nil, nil // a --headless worker adds GPUs to its head; it answers nothing
	}
	r := &Replica{
		Tenant:    l[v1alpha1.LabelTenant],
		Job:       l[v1alpha1.LabelJob],
		Runtime:   l[v1alpha1.LabelRuntime],
		Index:     l[v1alpha1.LabelReplica],
		Namespace: vmi.Namespace,
		Name:      vmi.Name,
	}
	for _, f := range []struct{ label, value string }{
		{v1alpha1.LabelTenant, r.Tenant}, {v1alpha1.LabelJob, r.Job},
	} {
		if errs := validation.IsDNS1123Label(f.value); len(errs) > 0 {
			return skip("label %s %q: %s", f.label, f.value, strings.Join(errs, "; "))
		}
	}
	if _, ok := gatewayv1.RuntimePaths(r.Runtime); !ok {
		return skip("label %s %q: expected one of %s", v1alpha1.LabelRuntime, r.Runtime, strings.Join(gatewayv1.Runtimes(), ", "))
	}
	if r.Namespace != r.Tenant && !allowForeignNamespace {
		return skip("namespace %q differs from label %s %q (a tenant's workloads live in the namespace named after it)",
			r.Namespace, v1alpha1.LabelTenant, r.Tenant)
	}
	switch v, ok := a[v1alpha1.AnnotationServingPort]; {
	case !ok:
		r.Port = DefaultServingPort
		problems = append(problems, warning.Warning{Object: obj, Reason: fmt.Sprintf("annotation %s missing: using %d",
			v1alpha1.AnnotationServingPort, DefaultServingPort)})
	default:
		p, err := parsePort(v)
		if err != nil {
			return skip("annotation %s %v", v1alpha1.AnnotationServingPort, err)
		}
		r.Port = p
	}
	switch v, ok := a[v1alpha1.AnnotationRequireAPIKey]; {
	case !ok, v == "true":
		r.RequireAPIKey = true // missing means the job's default: keys required
	case v == "false":
		r.RequireAPIKey = false
	default:
		// Fail closed: an unreadable value must not open the endpoint.
		r.RequireAPIKey = true
		problems = append(problems, warning.Warning{Object: obj, Reason: fmt.Sprintf(
			"annotation %s %q: expected \"true\" or \"false\"; requiring API keys", v1alpha1.AnnotationRequireAPIKey, v)})
	}
	r.Running = vmi.Status.Phase == kubevirtv1.Running
	if reason := setAddress(r, vmi); reason != "" {
		problems = append(problems, warning.Warning{Object: obj, Reason: reason})
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceReady {
			r.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return r, problems
}

// trim keeps in the cache only what is read: a VMI's spec (disks, devices, cloud-init) and
// managed fields are most of its size, and 10,000 of them add up.
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *kubevirtv1.VirtualMachineInstance:
		o.ManagedFields = nil
		o.Spec = kubevirtv1.VirtualMachineInstanceSpec{Networks: o.Spec.Networks}
		o.Status = kubevirtv1.VirtualMachineInstanceStatus{
			Phase:      o.Status.Phase,
			Conditions: o.Status.Conditions,
			Interfaces: o.Status.Interfaces,
		}
	case *corev1.Service:
		trimService(o)
	}
	return obj, nil
}
