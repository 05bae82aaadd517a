// Package envoyfilters is the Envoy configuration that API keys and usage accounting add to the
// xDS server's listener (it implements xds/resources.Filters):
//
//   - the ext_authz HTTP filter, calling the key check (auth/extauthz) over gRPC; it fails
//     closed, and each job's virtual host either passes the job's tenant and name to the check
//     as context extensions or, for a job that requires no key, disables the filter;
//   - the Lua filter that lifts the OpenAI "usage" of each response into dynamic metadata
//     (usage/envoylua);
//   - the gRPC access log to the usage service (usage), which carries that metadata;
//   - one cluster for both services: the xDS server process's gRPC port, over HTTP/2.
package envoyfilters

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/usage/envoylua"
	"github.com/inferplane/inferplane/xds/resources"
)

// Filter names. ExtAuthzName is also the key of the per-virtual-host config and the namespace
// of the dynamic metadata the check returns, so it must stay the canonical name.
const (
	ExtAuthzName  = extauthz.MetadataNamespace
	UsageLuaName  = "inferplane.usage"
	AccessLogName = "envoy.access_loggers.http_grpc"
	// DefaultCluster is the cluster of the auth and usage services.
	DefaultCluster = "inferplane_services"
	// LogName identifies inferplane's log stream in StreamAccessLogs' identifier.
	LogName = "inferplane"
)

// Config says where Envoy reaches the auth and usage gRPC services.
type Config struct {
	// Address is host:port of the xDS server process's gRPC port as Envoy sees it
	// (an IP gives a STATIC cluster, a name a STRICT_DNS one).
	Address string
	// Cluster names the services' cluster (default DefaultCluster).
	Cluster string
	// CheckTimeout bounds one key check (default 250 ms); past it the request is refused
	// with 503, never let through.
	CheckTimeout time.Duration
	// LogFlushInterval is how often Envoy flushes buffered access log entries (default 1 s).
	LogFlushInterval time.Duration
	// MaxRequests is the services cluster's circuit breaker on concurrent requests, pending
	// requests and connections (default 4096, as the job clusters). Every request a job
	// serves holds one key check open while it waits: Envoy's default of 1,024 would refuse
	// checks (and so requests) well before the job clusters are full.
	MaxRequests uint32
}

// Filters implements resources.Filters.
type Filters struct {
	cfg  Config
	host string
	port uint32
}

var _ resources.Filters = (*Filters)(nil)

// New checks cfg and fills in defaults.
func New(cfg Config) (*Filters, error) {
	host, portStr, err := net.SplitHostPort(cfg.Address)
	if err != nil || host == "" {
		return nil, fmt.Errorf("auth/usage service address %q: want host:port", cfg.Address)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("auth/usage service address %q: bad port", cfg.Address)
	}
	if cfg.Cluster == "" {
		cfg.Cluster = DefaultCluster
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 250 * time.Millisecond
	}
	if cfg.LogFlushInterval <= 0 {
		cfg.LogFlushInterval = time.Second
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = 4096
	}
	return &Filters{cfg: cfg, host: host, port: uint32(port)}, nil
}

func (f *Filters) grpcService(timeout time.Duration) *corev3.GrpcService {
	g := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
		EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: f.cfg.Cluster},
	}}
	if timeout > 0 {
		g.Timeout = durationpb.New(timeout)
	}
	return g
}

// HTTPFilters are ext_authz, then the usage Lua filter.
func (f *Filters) HTTPFilters() ([]*hcmv3.HttpFilter, error) {
	authz, err := anypb.New(&extauthzv3.ExtAuthz{
		Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: f.grpcService(f.cfg.CheckTimeout)},
		TransportApiVersion: corev3.ApiVersion_V3,
		// Fail closed: without the auth service no request passes.
		FailureModeAllow: false,
		StatusOnError:    &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		// Send the check only the headers a key can come in (and the pseudo-headers Envoy
		// always adds): less to copy per request, and no other caller data leaves Envoy.
		AllowedHeaders: &matcherv3.ListStringMatcher{Patterns: exact(extauthz.CredentialHeaders...)},
	})
	if err != nil {
		return nil, err
	}
	lua, err := anypb.New(&luav3.Lua{
		DefaultSourceCode: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: envoylua.Script}},
	})
	if err != nil {
		return nil, err
	}
	return []*hcmv3.HttpFilter{
		{Name: ExtAuthzName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: authz}},
		{Name: UsageLuaName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: lua}},
	}, nil
}

func exact(names ...string) []*matcherv3.StringMatcher {
	out := make([]*matcherv3.StringMatcher, 0, len(names))
	for _, n := range names {
		out = append(out, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: n}, IgnoreCase: true})
	}
	return out
}

// VirtualHostFilterConfig tells the check which endpoint a request is for, or turns it off
// for a job that requires no key.
func (f *Filters) VirtualHostFilterConfig(ep resources.EndpointInfo) (map[string]*anypb.Any, error) {
	per := &extauthzv3.ExtAuthzPerRoute{}
	if ep.RequireAPIKey {
		if ep.Tenant == "" || ep.Job == "" {
			return nil, errors.New("endpoint filter config: tenant and job are required")
		}
		per.Override = &extauthzv3.ExtAuthzPerRoute_CheckSettings{CheckSettings: &extauthzv3.CheckSettings{
			ContextExtensions: map[string]string{extauthz.ContextTenant: ep.Tenant, extauthz.ContextJob: ep.Job},
		}}
	} else {
		per.Override = &extauthzv3.ExtAuthzPerRoute_Disabled{Disabled: true}
	}
	a, err := anypb.New(per)
	if err != nil {
		return nil, err
	}
	return map[string]*anypb.Any{ExtAuthzName: a}, nil
}

// AccessLogs stream every request's log entry to the usage service.
func (f *Filters) AccessLogs() ([]*accesslogv3.AccessLog, error) {
	a, err := anypb.New(&grpcalsv3.HttpGrpcAccessLogConfig{
		CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{
			LogName:             LogName,
			GrpcService:         f.grpcService(0),
			TransportApiVersion: corev3.ApiVersion_V3,
			BufferFlushInterval: durationpb.New(f.cfg.LogFlushInterval),
		},
	})
	if err != nil {
		return nil, err
	}
	return []*accesslogv3.AccessLog{{Name: AccessLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: a}}}, nil
}

// Clusters is the services' cluster: HTTP/2 (gRPC) to the xDS server process.
func (f *Filters) Clusters() ([]*clusterv3.Cluster, error) {
	h2, err := anypb.New(&upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	discovery := clusterv3.Cluster_STRICT_DNS
	if net.ParseIP(f.host) != nil {
		discovery = clusterv3.Cluster_STATIC
	}
	c := &clusterv3.Cluster{
		Name:                 f.cfg.Cluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: discovery},
		ConnectTimeout:       durationpb.New(time.Second),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     wrapperspb.UInt32(f.cfg.MaxRequests),
			MaxPendingRequests: wrapperspb.UInt32(f.cfg.MaxRequests),
			MaxRequests:        wrapperspb.UInt32(f.cfg.MaxRequests),
		}}},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2,
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: f.cfg.Cluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
							Address:       f.host,
							PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: f.port},
						}}},
					}},
				}},
			}},
		},
	}
	return []*clusterv3.Cluster{c}, nil
}
