package resources

import (
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Filters lets other parts of the server (API keys, usage accounting) add Envoy configuration
// to the listener without the resource builder knowing what they do. A nil Filters adds nothing.
type Filters interface {
	// HTTPFilters are inserted, in order, before the router filter.
	HTTPFilters() ([]*hcmv3.HttpFilter, error)
	// VirtualHostFilterConfig is the typed_per_filter_config of one job endpoint's virtual host,
	// e.g. ext_authz disabled where the job requires no API key. It is also asked with a zero
	// EndpointInfo (no tenant or job, no key required) for the catch-all virtual host.
	VirtualHostFilterConfig(ep EndpointInfo) (map[string]*anypb.Any, error)
	// AccessLogs are the connection manager's access loggers.
	AccessLogs() ([]*accesslogv3.AccessLog, error)
	// Clusters are the extra clusters those filters call (the ext_authz and access-log services).
	Clusters() ([]*clusterv3.Cluster, error)
}

// EndpointInfo is what a Filters implementation may know about one job endpoint.
type EndpointInfo struct {
	Tenant        string
	Job           string
	Runtime       string
	RequireAPIKey bool
}

// IdentityHeaders are the request headers that tell a replica who called: the key check sets
// them (overwriting anything a client sent) on endpoints that require a key, and the routes of
// endpoints that do not remove them, so no client can forge them.
var IdentityHeaders = []string{"x-inferplane-tenant", "x-inferplane-key-id"}
