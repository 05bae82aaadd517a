package clusters

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/internal/kubewatch"
)

// Registry watches the registry's Secrets in the host cluster.
type Registry struct {
	// Config reaches the host cluster (where Argo CD and vCluster keep their Secrets).
	Config  *rest.Config
	Options Options
	// Debounce gathers a burst of Secret events into one snapshot (default 100ms).
	Debounce time.Duration
	Logger   *slog.Logger
	// OnWatchError, when set, is told about every failed list or watch; the last snapshot
	// stays in force meanwhile.
	OnWatchError func(error)
}

// Run sends a Snapshot on out once the Secrets are first read and after every change, until
// ctx ends. It returns an error when it cannot start.
func (r *Registry) Run(ctx context.Context, out chan<- Snapshot) error {
	if err := r.Options.Validate(); err != nil {
		return err
	}
	log := cmp.Or(r.Logger, slog.Default())
	c, err := cache.New(r.Config, r.cacheOptions(log))
	if err != nil {
		return fmt.Errorf("cluster registry: %w", err)
	}
	changed := kubewatch.NewSignal()
	if err := kubewatch.Inform(ctx, c, &corev1.Secret{}, changed); err != nil {
		return fmt.Errorf("cluster registry: informer for Secrets: %w", err)
	}
	stop, err := kubewatch.Start(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cluster registry: %w", err)
	}
	defer stop()
	changed.Raise()
	return r.loop(ctx, c, changed.C, out, log)
}

// loop turns Secret events into snapshots until ctx ends.
func (r *Registry) loop(ctx context.Context, c client.Reader, changed <-chan struct{}, out chan<- Snapshot, log *slog.Logger) error {
	debounce := cmp.Or(r.Debounce, 100*time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(debounce):
		}
		snap, err := List(ctx, c, r.Options)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			log.Error("cluster registry: listing cached Secrets", "error", err)
			continue
		}
		select {
		case out <- snap:
		case <-ctx.Done():
			return nil
		}
	}
}

// cacheOptions watch only the registry's Secrets: Argo CD's cluster Secrets by label, and
// in vCluster's namespaces the Secrets its selector picks (or, by name, all of them, with the
// data of those not named vc-* dropped from the cache).
func (r *Registry) cacheOptions(log *slog.Logger) cache.Options {
	o := r.Options
	scheme := k8sruntime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	namespaces := map[string]cache.Config{}
	for _, ns := range o.VClusterNamespaces {
		namespaces[ns] = cache.Config{LabelSelector: o.VClusterSelector}
	}
	if ns := o.argoNamespace(); ns != "-" {
		if _, both := namespaces[ns]; both {
			namespaces[ns] = cache.Config{} // both kinds: selected in Read
		} else {
			namespaces[ns] = cache.Config{LabelSelector: labels.SelectorFromSet(labels.Set{ArgoCDSecretTypeKey: ArgoCDSecretTypeValue})}
		}
	}
	return cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: namespaces,
		DefaultTransform: func(obj any) (any, error) {
			if s, ok := obj.(*corev1.Secret); ok {
				s.ManagedFields = nil
				if _, selected := o.selects(s); !selected {
					s.Data, s.StringData = nil, nil
				}
			}
			return obj, nil
		},
		DefaultWatchErrorHandler: func(ctx context.Context, rf *toolscache.Reflector, err error) {
			log.Warn("cluster registry: watching Secrets failed; keeping the last known clusters", "error", err)
			if r.OnWatchError != nil {
				r.OnWatchError(err)
			}
			toolscache.DefaultWatchErrorHandler(ctx, rf, err)
		},
	}
}

// List reads the registry once (for commands, and from a cache).
func List(ctx context.Context, c client.Reader, o Options) (Snapshot, error) {
	if err := o.Validate(); err != nil {
		return Snapshot{}, err
	}
	var all []corev1.Secret
	namespaces := slices.Clone(o.VClusterNamespaces)
	if ns := o.argoNamespace(); ns != "-" && !slices.Contains(namespaces, ns) {
		namespaces = append(namespaces, ns)
	}
	for _, ns := range namespaces {
		var list corev1.SecretList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return Snapshot{}, fmt.Errorf("list Secrets in %s: %w", ns, err)
		}
		all = append(all, list.Items...)
	}
	return Read(all, o), nil
}

// Find is the entry of the cluster a tenant's Applications are synced to. cluster is their
// destination.name (the tenant's spec.argoCD.destination, by default its name; "" looks by
// tenant only): the Argo CD cluster of that name is the one, as it is for Argo CD; failing
// that, the entry the gateway uses for the tenant (label inferplane.io/tenant, or vc-<tenant>).
// The error names the tenant, the Secrets o reads, the known tenants and why Secrets were
// skipped; o is only read for it.
func Find(s Snapshot, o Options, tenant, cluster string) (Cluster, error) {
	if cluster != "" {
		for _, c := range s.Clusters {
			if c.Kind == KindArgoCD && c.Name == cluster {
				return c, nil
			}
		}
	}
	if c, ok := s.Get(tenant); ok {
		return c, nil
	}
	missing := fmt.Sprintf("no cluster of tenant %s", tenant)
	if cluster != "" && cluster != tenant {
		missing = fmt.Sprintf("no Argo CD cluster named %s (the tenant's destination) and no cluster of tenant %s", cluster, tenant)
	}
	known := make([]string, 0, len(s.Clusters))
	for _, c := range s.Clusters {
		known = append(known, c.Tenant)
	}
	msg := fmt.Sprintf("%s in the cluster registry (read: %s); known tenants: %s", missing, o.Sources(), cmp.Or(strings.Join(known, ", "), "none"))
	errs := []error{errors.New(msg)}
	for _, p := range s.Problems {
		errs = append(errs, errors.New(p.String()))
	}
	return Cluster{}, errors.Join(errs...)
}

// Change is one difference between two snapshots.
type Change struct {
	Type    ChangeType
	Cluster Cluster // the new one (Added, Changed) or the old one (Removed)
}

// ChangeType says what happened to a tenant's cluster.
type ChangeType string

const (
	Added   ChangeType = "added"
	Changed ChangeType = "changed" // another Secret, server or credentials
	Removed ChangeType = "removed"
)

// Changes lists what differs from prev to next, by tenant.
func Changes(prev, next Snapshot) []Change {
	var out []Change
	for _, c := range next.Clusters {
		old, ok := prev.Get(c.Tenant)
		switch {
		case !ok:
			out = append(out, Change{Type: Added, Cluster: c})
		case old.Fingerprint != c.Fingerprint || old.Secret != c.Secret:
			out = append(out, Change{Type: Changed, Cluster: c})
		}
	}
	for _, c := range prev.Clusters {
		if _, ok := next.Get(c.Tenant); !ok {
			out = append(out, Change{Type: Removed, Cluster: c})
		}
	}
	return out
}
