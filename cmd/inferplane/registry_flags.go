package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"

	registry "github.com/inferplane/inferplane/clusters"
)

// registryFlags select the cluster registry's Secrets in the host cluster. xds serve
// --source clusters and the jobs commands that reach tenant clusters read the same registry
// with the same flags.
type registryFlags struct {
	opts     registry.Options
	selector string
}

// registryFlagNames are the flags register adds.
var registryFlagNames = []string{"argocd-namespace", "vcluster-namespace", "vcluster-selector"}

// register adds the registry's flags; when names the setting of the command they are for
// (e.g. "--source clusters").
func (r *registryFlags) register(fs *pflag.FlagSet, when string) {
	fs.StringVar(&r.opts.ArgoCDNamespace, "argocd-namespace", registry.ArgoCDNamespace,
		"namespace of Argo CD's cluster Secrets, the registry of tenant clusters ("+when+"; - reads none)")
	fs.StringSliceVar(&r.opts.VClusterNamespaces, "vcluster-namespace", nil,
		"host namespace where vCluster writes a virtual cluster's kubeconfig Secret vc-<name> ("+when+"; repeatable)")
	fs.StringVar(&r.selector, "vcluster-selector", "",
		"label selector of the vCluster kubeconfig Secrets to read instead of every vc-* Secret ("+when+")")
}

// options are the registry's options; an error names the flag.
func (r *registryFlags) options() (registry.Options, error) {
	o := r.opts
	if r.selector != "" {
		sel, err := labels.Parse(r.selector)
		if err != nil {
			return o, fmt.Errorf("--vcluster-selector %q: %w", r.selector, err)
		}
		o.VClusterSelector = sel
	}
	return o, nil
}
