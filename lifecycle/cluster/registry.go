package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/clusters"
)

// Registry reaches the host cluster through a kubeconfig and a tenant's cluster through the
// cluster registry in the host cluster, as the gateway does (package clusters). The registry
// is read once, on the first tenant asked for, and kept: a command reads it once for every
// tenant it shows.
type Registry struct {
	// Kubeconfig reaches the host cluster, where the registry's Secrets are.
	Kubeconfig Kubeconfig
	Options    clusters.Options

	mu   sync.Mutex
	snap *clusters.Snapshot
	host string
}

// Host implements Access.
func (r *Registry) Host(ctx context.Context) (*rest.Config, error) { return r.Kubeconfig.Host(ctx) }

// Tenant implements Access: the registry's entry for the tenant's Argo CD destination cluster
// (clusters.Find).
func (r *Registry) Tenant(ctx context.Context, tenant, cluster string) (*rest.Config, error) {
	cfg, err := r.tenant(ctx, tenant, cluster)
	if err != nil {
		return nil, fmt.Errorf("the cluster of tenant %s: %w", tenant, err)
	}
	return cfg, nil
}

func (r *Registry) tenant(ctx context.Context, tenant, cluster string) (*rest.Config, error) {
	snap, host, err := r.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	c, err := clusters.Find(snap, r.Options, tenant, cluster)
	if err != nil {
		return nil, fmt.Errorf("host cluster (%s): %w", host, err)
	}
	return rest.CopyConfig(c.Config), nil
}

// snapshot reads the registry from the host cluster, once.
func (r *Registry) snapshot(ctx context.Context) (clusters.Snapshot, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snap != nil {
		return *r.snap, r.host, nil
	}
	if err := r.Options.Validate(); err != nil {
		return clusters.Snapshot{}, "", fmt.Errorf("cluster registry: %w", err)
	}
	cfg, err := r.Kubeconfig.Host(ctx)
	if err != nil {
		return clusters.Snapshot{}, "", fmt.Errorf("cluster registry: %w", err)
	}
	c, err := NewClient(cfg)
	if err != nil {
		return clusters.Snapshot{}, "", fmt.Errorf("cluster registry: host cluster (%s): %w", cfg.Host, err)
	}
	snap, err := clusters.List(ctx, c, r.Options)
	if err != nil {
		return clusters.Snapshot{}, "", clusterErr("host cluster", cfg.Host, "read the cluster registry", err)
	}
	r.snap, r.host = &snap, cfg.Host
	return snap, cfg.Host, nil
}

// Auto reaches a tenant's cluster through the kubeconfig when it has the tenant's context, and
// otherwise through the cluster registry (when set); the host cluster through the kubeconfig.
type Auto struct {
	Kubeconfig Kubeconfig
	Registry   *Registry
}

// Host implements Access.
func (a Auto) Host(ctx context.Context) (*rest.Config, error) { return a.Kubeconfig.Host(ctx) }

// Tenant implements Access. When neither way finds the cluster, the error gives both reasons
// and how to fix either.
func (a Auto) Tenant(ctx context.Context, tenant, cluster string) (*rest.Config, error) {
	cfg, kerr := a.Kubeconfig.tenant(tenant, cluster)
	var missing *NoContextError
	if !errors.As(kerr, &missing) || a.Registry == nil {
		if kerr != nil {
			return nil, fmt.Errorf("the cluster of tenant %s: %w", tenant, kerr)
		}
		return cfg, nil
	}
	cfg, rerr := a.Registry.tenant(ctx, tenant, cluster)
	if rerr == nil {
		return cfg, nil
	}
	return nil, fmt.Errorf("the cluster of tenant %s is neither in the kubeconfig nor in the cluster registry:\n"+
		"- kubeconfig: %w\n- cluster registry: %w\n"+
		"Fix either: add a context %q to the kubeconfig (or name the tenants' contexts with --tenant-context), "+
		"or give the host cluster an Argo CD cluster Secret whose name key is %q (in --argocd-namespace) or vCluster's Secret vc-%s (in a --vcluster-namespace)",
		tenant, kerr, rerr, missing.Context, cluster, tenant)
}
