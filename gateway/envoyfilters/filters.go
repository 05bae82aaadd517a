// Package envoyfilters is the Envoy configuration that API keys and usage accounting add to the
// xDS server's listener (it implements xds/resources.Filters):
//
//   - the ext_authz HTTP filter, calling the key check (auth/extauthz) over gRPC; it fails
//     closed, and each job's virtual host either passes the job's tenant and name to the check
//     as context extensions or, for a job that requires no key, disables the filter;
//   - the Lua filter that lifts the OpenAI "usage" of each response into dynamic metadata
//     (usage/envoylua);
//   - the gRPC access log to the usage service (usage), which carries that metadata;
//   - the clusters of both services, over HTTP/2: the key checks' (inferplane_services), which
//     spreads checks over every key check process that passes Envoy's gRPC health check and
//     retries a check that could not reach one on another; and the usage service's
//     (inferplane_usage), the xDS server process's gRPC port.
package envoyfilters

import (
	"cmp"
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
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
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
	// DefaultCluster is the cluster of the key checks (ext_authz).
	DefaultCluster = "inferplane_services"
	// DefaultUsageCluster is the cluster of the usage (access log) service.
	DefaultUsageCluster = "inferplane_usage"
	// HealthService is the service name Envoy's gRPC health checks ask the key checks about.
	HealthService = "envoy.service.auth.v3.Authorization"
	// LogName identifies inferplane's log stream in StreamAccessLogs' identifier.
	LogName = "inferplane"
)

// Config says where Envoy reaches the auth and usage gRPC services.
type Config struct {
	// Address is host:port of the xDS server process's gRPC port as Envoy sees it (an IP
	// gives a STATIC cluster, a name a STRICT_DNS one): the usage service, and the key check
	// when KeyChecks is empty.
	Address string
	// KeyChecks are host:port of the key check processes (`inferplane keys serve`). A name
	// (such as a headless Service) stands for every address it resolves to; Envoy spreads
	// checks over those that pass its gRPC health check.
	KeyChecks []string
	// Cluster names the key checks' cluster (default DefaultCluster); UsageCluster the usage
	// service's (default DefaultUsageCluster).
	Cluster      string
	UsageCluster string
	// CheckTimeout bounds one key check, retries included (default 1 s); past it the request
	// is refused with 503, never let through. A check takes about a millisecond: the budget
	// is for a key check that stalls a moment (a CPU-starved node, a collection), which then
	// delays requests instead of failing them.
	CheckTimeout time.Duration
	// HealthCheckInterval is how often Envoy asks each key check process whether it serves
	// (default 1 s); two failures in a row take it out, one success brings it back.
	HealthCheckInterval time.Duration
	// LogFlushInterval is how often Envoy flushes buffered access log entries (default 1 s).
	LogFlushInterval time.Duration
	// MaxRequests is the services clusters' circuit breaker on concurrent requests, pending
	// requests and connections (default 4096, as the job clusters). Every request a job
	// serves holds one key check open while it waits: Envoy's default of 1,024 would refuse
	// checks (and so requests) well before the job clusters are full.
	MaxRequests uint32
}

// hostPort is one address of a service.
type hostPort struct {
	host string
	port uint32
}

func parseHostPort(addr string) (hostPort, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return hostPort{}, fmt.Errorf("auth/usage service address %q: want host:port", addr)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return hostPort{}, fmt.Errorf("auth/usage service address %q: bad port", addr)
	}
	return hostPort{host: host, port: uint32(port)}, nil
}

// Filters implements resources.Filters.
type Filters struct {
	cfg       Config
	usage     hostPort
	keyChecks []hostPort
}

var _ resources.Filters = (*Filters)(nil)

// New checks cfg and fills in defaults.
func New(cfg Config) (*Filters, error) {
	usage, err := parseHostPort(cfg.Address)
	if err != nil {
		return nil, err
	}
	f := &Filters{usage: usage}
	checks := cfg.KeyChecks
	if len(checks) == 0 {
		checks = []string{cfg.Address}
	}
	for _, a := range checks {
		hp, err := parseHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("key check: %w", err)
		}
		f.keyChecks = append(f.keyChecks, hp)
	}
	cfg.Cluster = cmp.Or(cfg.Cluster, DefaultCluster)
	cfg.UsageCluster = cmp.Or(cfg.UsageCluster, DefaultUsageCluster)
	if cfg.Cluster == cfg.UsageCluster {
		return nil, fmt.Errorf("the key check and usage clusters need two names, not %q", cfg.Cluster)
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = time.Second
	}
	if cfg.HealthCheckInterval <= 0 {
		cfg.HealthCheckInterval = time.Second
	}
	if cfg.LogFlushInterval <= 0 {
		cfg.LogFlushInterval = time.Second
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = 4096
	}
	f.cfg = cfg
	return f, nil
}

func (f *Filters) grpcService(cluster string, timeout time.Duration) *corev3.GrpcService {
	g := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
		EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster},
	}}
	if timeout > 0 {
		g.Timeout = durationpb.New(timeout)
	}
	return g
}

// checkService is the key check's gRPC service: a check that could not reach a key check
// process (refused, reset, a process draining) is tried again on another one, within the
// check's timeout. A check is a pure read, so trying it twice is harmless.
func (f *Filters) checkService() (*corev3.GrpcService, error) {
	g := f.grpcService(f.cfg.Cluster, f.cfg.CheckTimeout)
	previous, err := anypb.New(&previoushostsv3.PreviousHostsPredicate{})
	if err != nil {
		return nil, err
	}
	g.RetryPolicy = &corev3.RetryPolicy{
		RetryOn:    "connect-failure,refused-stream,reset,unavailable",
		NumRetries: wrapperspb.UInt32(2),
		RetryBackOff: &corev3.BackoffStrategy{
			BaseInterval: durationpb.New(10 * time.Millisecond), MaxInterval: durationpb.New(50 * time.Millisecond),
		},
		RetryHostPredicate: []*corev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &corev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: previous},
		}},
		HostSelectionRetryMaxAttempts: 3,
	}
	return g, nil
}

// HTTPFilters are ext_authz, then the usage Lua filter.
func (f *Filters) HTTPFilters() ([]*hcmv3.HttpFilter, error) {
	check, err := f.checkService()
	if err != nil {
		return nil, err
	}
	authz, err := anypb.New(&extauthzv3.ExtAuthz{
		Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: check},
		TransportApiVersion: corev3.ApiVersion_V3,
		// Fail closed: with no key check answering, no request passes.
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
			GrpcService:         f.grpcService(f.cfg.UsageCluster, 0),
			TransportApiVersion: corev3.ApiVersion_V3,
			BufferFlushInterval: durationpb.New(f.cfg.LogFlushInterval),
		},
	})
	if err != nil {
		return nil, err
	}
	return []*accesslogv3.AccessLog{{Name: AccessLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: a}}}, nil
}

// Clusters are the key checks' cluster and the usage service's: HTTP/2 (gRPC).
func (f *Filters) Clusters() ([]*clusterv3.Cluster, error) {
	checks, err := f.cluster(f.cfg.Cluster, f.keyChecks)
	if err != nil {
		return nil, err
	}
	interval := durationpb.New(f.cfg.HealthCheckInterval)
	checks.HealthChecks = []*corev3.HealthCheck{{
		Timeout:            durationpb.New(min(f.cfg.HealthCheckInterval, time.Second)),
		Interval:           interval,
		NoTrafficInterval:  interval, // default 60 s: an idle gateway would notice a dead check late
		UnhealthyThreshold: wrapperspb.UInt32(2),
		HealthyThreshold:   wrapperspb.UInt32(1),
		HealthChecker: &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{
			ServiceName: HealthService,
		}},
	}}
	// Never send a check to a process that fails its health check: with none healthy the
	// check fails, and the request with it (fail closed).
	checks.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
	// A process that answers errors (or not at all) between two health checks is taken out.
	checks.OutlierDetection = &clusterv3.OutlierDetection{
		ConsecutiveGatewayFailure:          wrapperspb.UInt32(2),
		EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100),
		Interval:                           durationpb.New(time.Second),
		BaseEjectionTime:                   durationpb.New(5 * time.Second),
		MaxEjectionPercent:                 wrapperspb.UInt32(50),
	}
	usage, err := f.cluster(f.cfg.UsageCluster, []hostPort{f.usage})
	if err != nil {
		return nil, err
	}
	return []*clusterv3.Cluster{checks, usage}, nil
}

// cluster is an HTTP/2 cluster of the given addresses: STATIC when all are IPs, else
// STRICT_DNS (every address a name resolves to is a host).
func (f *Filters) cluster(name string, addrs []hostPort) (*clusterv3.Cluster, error) {
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
	discovery := clusterv3.Cluster_STATIC
	endpoints := make([]*endpointv3.LbEndpoint, 0, len(addrs))
	for _, a := range addrs {
		if net.ParseIP(a.host) == nil {
			discovery = clusterv3.Cluster_STRICT_DNS
		}
		endpoints = append(endpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address:       a.host,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: a.port},
				}}},
			}},
		})
	}
	c := &clusterv3.Cluster{
		Name:                 name,
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
			ClusterName: name,
			Endpoints:   []*endpointv3.LocalityLbEndpoints{{LbEndpoints: endpoints}},
		},
	}
	if discovery == clusterv3.Cluster_STRICT_DNS {
		// A headless Service's addresses change as pods come and go.
		c.DnsRefreshRate = durationpb.New(2 * time.Second)
	}
	return c, nil
}
