// Package cluster reads what the clusters say about a job and restarts its VMs: the job's
// Argo CD Application in the host cluster, its VirtualMachines, instances, model-cache claims
// and their events in the tenant's own cluster. How a cluster is reached is behind Access:
// contexts of a kubeconfig (Kubeconfig), the cluster registry the gateway reads in the host
// cluster (Registry: Argo CD cluster Secrets, vCluster kubeconfig Secrets), or the first, else
// the second (Auto).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/kubeconfig"
)

// Access reaches the clusters a job lives in.
type Access interface {
	// Host is the cluster Argo CD runs in (the job's Application).
	Host(ctx context.Context) (*rest.Config, error)
	// Tenant is a tenant's own cluster (the job's VMs). cluster is the tenant's Argo CD
	// destination name (spec.argoCD.destination, by default the tenant's name).
	Tenant(ctx context.Context, tenant, cluster string) (*rest.Config, error)
}

// Kubeconfig reaches every cluster through contexts of one kubeconfig, as kubectl does.
type Kubeconfig struct {
	// Path is the kubeconfig file; empty means $KUBECONFIG, then ~/.kube/config.
	Path string
	// HostContext is the host cluster's context; empty means the current context.
	HostContext string
	// TenantContext names a tenant cluster's context: "{tenant}" is replaced by the tenant's
	// name and "{cluster}" by its Argo CD destination name. Empty means "{cluster}".
	TenantContext string
}

// DefaultTenantContext is the context a tenant cluster is reached through by default: its Argo
// CD cluster name, which is the tenant's name unless spec.argoCD.destination says otherwise.
const DefaultTenantContext = "{cluster}"

// Host implements Access.
func (k Kubeconfig) Host(context.Context) (*rest.Config, error) {
	cfg, err := k.load(k.HostContext, "--context")
	if err != nil {
		return nil, fmt.Errorf("the host cluster: %w", err)
	}
	return cfg, nil
}

// Tenant implements Access.
func (k Kubeconfig) Tenant(_ context.Context, tenant, cluster string) (*rest.Config, error) {
	cfg, err := k.tenant(tenant, cluster)
	if err != nil {
		return nil, fmt.Errorf("the cluster of tenant %s: %w", tenant, err)
	}
	return cfg, nil
}

func (k Kubeconfig) tenant(tenant, cluster string) (*rest.Config, error) {
	pattern := k.TenantContext
	if pattern == "" {
		pattern = DefaultTenantContext
	}
	name := strings.NewReplacer("{tenant}", tenant, "{cluster}", cluster).Replace(pattern)
	return k.load(name, "--tenant-context (e.g. '{tenant}' or 'vcluster_{tenant}_host')")
}

func (k Kubeconfig) load(contextName, flag string) (*rest.Config, error) {
	cc, rules := kubeconfig.Loader(k.Path, contextName)
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", k.describe(rules), err)
	}
	if contextName != "" {
		if _, ok := raw.Contexts[contextName]; !ok {
			return nil, fmt.Errorf("%w in kubeconfig %s (contexts: %s); name it with %s",
				&NoContextError{Context: contextName}, k.describe(rules), fielderr.List(slices.Sorted(maps.Keys(raw.Contexts))), flag)
		}
	}
	cfg, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		// client-go would say "try setting KUBERNETES_MASTER", a variable nothing reads.
		return nil, fmt.Errorf("%w: %s does not exist or names no cluster", ErrNoKubeconfig, k.describe(rules))
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", k.describe(rules), err)
	}
	return cfg, nil
}

// ErrNoKubeconfig is a kubeconfig that names no cluster at all (none given, none at the
// default place): the caller says how to give one.
var ErrNoKubeconfig = errors.New("no kubeconfig")

// NoContextError is a kubeconfig without the context asked for: the one failure after which
// another way to the cluster (Auto) is worth trying.
type NoContextError struct{ Context string }

func (e *NoContextError) Error() string { return fmt.Sprintf("no context %q", e.Context) }

func (k Kubeconfig) describe(rules *clientcmd.ClientConfigLoadingRules) string {
	if k.Path != "" {
		return k.Path
	}
	if files := rules.GetLoadingPrecedence(); len(files) > 0 {
		return strings.Join(files, ":")
	}
	return "(none)"
}
