package kubeenv

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a kubeconfig file with one context per server, named by the map's
// keys (the cluster and user take the same name), current being the current context: what
// a user's kubeconfig holds for several clusters.
func WriteKubeconfig(path, current string, contexts map[string]*rest.Config) error {
	kc := clientcmdapi.NewConfig()
	for name, cfg := range contexts {
		kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
		kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	kc.CurrentContext = current
	return clientcmd.WriteToFile(*kc, path)
}
