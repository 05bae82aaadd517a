// Package kubeconfig reaches a cluster the way kubectl does: the kubeconfig file named, else
// $KUBECONFIG, else ~/.kube/config, else the in-cluster service account; a context by name,
// else the current one. Every command and component that talks to a cluster loads its client
// configuration here.
package kubeconfig

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Loader is the client configuration of context (empty: the current one) of the kubeconfig
// at path (empty: $KUBECONFIG, then ~/.kube/config), with the rules it loads by, for
// messages that name the files.
func Loader(path, context string) (clientcmd.ClientConfig, *clientcmd.ClientConfigLoadingRules) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}), rules
}

// Load is the REST configuration of context of the kubeconfig at path (Loader), or the
// in-cluster one when there is no kubeconfig at all.
func Load(path, context string) (*rest.Config, error) {
	cc, _ := Loader(path, context)
	cfg, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, errors.New("no cluster to talk to: no kubeconfig at $KUBECONFIG or ~/.kube/config and not in a cluster; " +
			"pass --kubeconfig FILE (and --context NAME) or set $KUBECONFIG")
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}
