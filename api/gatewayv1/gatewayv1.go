// Package gatewayv1 is what the gateway (`inferplane xds serve`) says on its admin address to
// those that read it: the endpoints and replicas of /debug/endpoints, and the OpenAI paths it
// routes for each runtime. The xDS server writes these; its clients (lifecycle/gateway, and the
// CLI and console through it) and the test stand-in for Envoy read them without importing the
// server. It depends on nothing of inferplane's but api/v1alpha1 (the runtimes' names).
package gatewayv1

import (
	"maps"
	"slices"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Host is the host name clients call a job's endpoint at: <job>.<tenant>.<domain>. The
// gateway routes by it; everything that shows an endpoint names it so.
func Host(tenant, job, domain string) string { return job + "." + tenant + "." + domain }

// URL is the endpoint's base URL, https://<job>.<tenant>.<domain>.
func URL(tenant, job, domain string) string { return "https://" + Host(tenant, job, domain) }

// DebugEndpointsPath is the xDS server's per-replica view on its admin address (Debug).
const DebugEndpointsPath = "/debug/endpoints"

// Debug is the part of /debug/endpoints' document that clients read: the endpoints. The
// document holds more for operators (ADS nodes, problems, the replica source's state).
type Debug struct {
	Endpoints []EndpointStatus `json:"endpoints"`
}

// EndpointStatus is one endpoint as the status page shows it.
type EndpointStatus struct {
	// Endpoint is "<tenant>/<job>".
	Endpoint      string `json:"endpoint"`
	Host          string `json:"host"`
	Runtime       string `json:"runtime"`
	RequireAPIKey bool   `json:"requireAPIKey"`
	Serving       int    `json:"serving"`
	// TLS is the certificate that serves the endpoint's host, or why none does (when the
	// server serves TLS).
	TLS      *TLSChoice      `json:"tls,omitempty"`
	Replicas []ReplicaStatus `json:"replicas"`
}

// ReplicaStatus is one replica's state and why it does or does not take traffic.
type ReplicaStatus struct {
	// Name is "<namespace>/<name>" of the replica's head VMI.
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	Running bool   `json:"running"`
	Ready   bool   `json:"ready"`
	// Probe is "up", "down" or "unknown", with the last probe's result.
	Probe   string `json:"probe"`
	Result  string `json:"result,omitempty"`
	Serving bool   `json:"serving"`
}

// TLSChoice is one endpoint's TLS: Certificate is the serving certificate's name, or "" with
// the reason in Reason.
type TLSChoice struct {
	Certificate string `json:"certificate,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// runtimePaths are the OpenAI paths each runtime serves: the allow-list of its routes.
var runtimePaths = map[string][]string{
	string(v1alpha1.RuntimeVLLM): {
		"/v1/chat/completions",
		"/v1/completions",
		"/v1/embeddings",
		"/v1/models",
	},
	string(v1alpha1.RuntimeParakeet): {
		"/v1/audio/transcriptions",
		"/v1/models",
	},
}

// RuntimePaths returns the paths a runtime serves, and whether the runtime is known. The
// list is the caller's own copy.
func RuntimePaths(runtime string) ([]string, bool) {
	p, ok := runtimePaths[runtime]
	return slices.Clone(p), ok
}

// Runtimes lists the known runtimes, sorted.
func Runtimes() []string {
	return slices.Sorted(maps.Keys(runtimePaths))
}
