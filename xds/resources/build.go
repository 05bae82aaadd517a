package resources

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/inferplane/inferplane/api/gatewayv1"
)

// Set is every resource of one Envoy node's configuration.
type Set struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
	// LoadAssignments has one entry per job cluster, in cluster order, also for jobs with no
	// ready replica (an empty assignment: Envoy answers 503 rather than keep a stale host).
	LoadAssignments []*endpointv3.ClusterLoadAssignment
	// Secrets are the TLS certificates the TLS listener serves, delivered over SDS.
	Secrets []*tlsv3.Secret
}

// notFoundBody is the OpenAI-style error body of the 404 answers Envoy gives itself.
const (
	notFoundPathBody = `{"error":{"message":"this endpoint does not serve that path","type":"invalid_request_error","code":"not_found"}}`
	notFoundHostBody = `{"error":{"message":"no inference endpoint has this host name","type":"invalid_request_error","code":"not_found"}}`
)

// Build renders the resources for the given endpoints, without TLS. Endpoints are sorted by
// key, so the output does not depend on the input order. filters may be nil.
func Build(cfg Config, endpoints []Endpoint, filters Filters) (*Set, error) {
	set, _, err := BuildTLS(cfg, endpoints, nil, filters)
	return set, err
}

// BuildTLS is Build with TLS at the edge: each endpoint whose host a certificate covers is
// served on the TLS listener too (and, unless cfg.KeepPlainHTTP, redirected there from plain
// HTTP); the report says which certificate serves each endpoint, or why none does.
func BuildTLS(cfg Config, endpoints []Endpoint, certs []Certificate, filters Filters) (*Set, TLSReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	cfg = cfg.withDefaults()
	eps := slices.Clone(endpoints)
	slices.SortFunc(eps, func(a, b Endpoint) int { return cmp.Compare(a.Key(), b.Key()) })
	for i, ep := range eps {
		if err := ep.Validate(); err != nil {
			return nil, nil, err
		}
		if i > 0 && eps[i-1].Key() == ep.Key() {
			return nil, nil, fmt.Errorf("endpoint %s: listed twice", ep.Key())
		}
	}
	report := chooseCertificates(cfg, eps, certs)

	set := &Set{}
	hcm, err := connectionManager(cfg, filters)
	if err != nil {
		return nil, nil, err
	}
	lis, err := listener(cfg, hcm)
	if err != nil {
		return nil, nil, err
	}
	set.Listeners = []*listenerv3.Listener{lis}
	tlsLis, secrets, err := tlsResources(cfg, eps, certs, report, hcm)
	if err != nil {
		return nil, nil, err
	}
	if tlsLis != nil {
		set.Listeners, set.Secrets = append(set.Listeners, tlsLis), secrets
	}

	rc := &routev3.RouteConfiguration{Name: RouteConfigName}
	for _, ep := range eps {
		vh, err := virtualHost(cfg, ep.EndpointInfo, filters)
		if err != nil {
			return nil, nil, err
		}
		requireTLS(cfg, vh, report[ep.Key()])
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
		set.Clusters = append(set.Clusters, cluster(cfg, ep.EndpointInfo))
		set.LoadAssignments = append(set.LoadAssignments, LoadAssignment(ep))
	}
	catch, err := catchAll(filters)
	if err != nil {
		return nil, nil, err
	}
	rc.VirtualHosts = append(rc.VirtualHosts, catch)
	set.Routes = []*routev3.RouteConfiguration{rc}

	if filters != nil {
		extra, err := filters.Clusters()
		if err != nil {
			return nil, nil, fmt.Errorf("filter clusters: %w", err)
		}
		set.Clusters = append(set.Clusters, extra...)
	}
	// Validation (every resource, and the set's consistency) is the publisher's:
	// server.SetConfig refuses a set that fails it, whoever built it.
	return set, report, nil
}

// LoadAssignment is a job's endpoints: one per ready replica, marked HEALTHY, in a stable
// order. Replicas that are not ready are absent (see docs/xds.md: marking them UNHEALTHY would
// let Envoy's panic mode send traffic to them).
func LoadAssignment(ep Endpoint) *endpointv3.ClusterLoadAssignment {
	reps := slices.Clone(ep.Replicas)
	slices.SortFunc(reps, func(a, b Replica) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	lbs := make([]*endpointv3.LbEndpoint, 0, len(reps))
	for _, r := range reps {
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address:  socketAddress(r.Address, r.Port),
				Hostname: r.Name,
			}},
			HealthStatus: corev3.HealthStatus_HEALTHY,
		})
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ep.Key()}
	if len(lbs) > 0 {
		cla.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}
	}
	return cla
}

func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func connectionManager(cfg Config, filters Filters) (*hcmv3.HttpConnectionManager, error) {
	router, err := anyOf(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	var httpFilters []*hcmv3.HttpFilter
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inferplane",
		// AUTO: HTTP/1.1, and HTTP/2 with prior knowledge, on the same port.
		CodecType: hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: RouteConfigName,
		}},
		// Envoy is the edge: it sets X-Forwarded-For from the peer and trusts none it receives.
		UseRemoteAddress: wrapperspb.Bool(true),
		// Normalise before the allow-list is matched, so /v1/./models or /v1//models cannot
		// reach a path the list does not name; encoded slashes are refused outright.
		NormalizePath:                wrapperspb.Bool(true),
		MergeSlashes:                 true,
		PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_REJECT_REQUEST,
		// Host names match without a port, whatever port the client put in Host.
		StripPortMode:         &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true},
		StreamIdleTimeout:     durationpb.New(cfg.StreamIdleTimeout),
		RequestHeadersTimeout: durationpb.New(cfg.RequestHeadersTimeout),
		// RequestTimeout stays 0 (off): an SSE stream may last as long as the model writes.
		ServerName: "inferplane",
	}
	if filters != nil {
		httpFilters, err = filters.HTTPFilters()
		if err != nil {
			return nil, fmt.Errorf("filter chain: %w", err)
		}
		hcm.AccessLog, err = filters.AccessLogs()
		if err != nil {
			return nil, fmt.Errorf("access logs: %w", err)
		}
	}
	hcm.HttpFilters = append(slices.Clone(httpFilters), &hcmv3.HttpFilter{
		Name:       wellknown.Router,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
	})
	if err := hcm.ValidateAll(); err != nil {
		return nil, fmt.Errorf("http connection manager: %w", err)
	}
	return hcm, nil
}

func listener(cfg Config, hcm *hcmv3.HttpConnectionManager) (*listenerv3.Listener, error) {
	hcmAny, err := anyOf(hcm)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:    ListenerName,
		Address: socketAddress(cfg.ListenerAddress, cfg.ListenerPort),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       wellknown.HTTPConnectionManager,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny},
			}},
		}},
	}, nil
}

func virtualHost(cfg Config, ep EndpointInfo, filters Filters) (*routev3.VirtualHost, error) {
	paths, _ := gatewayv1.RuntimePaths(ep.Runtime)
	retryPredicate, err := anyOf(&previoushostsv3.PreviousHostsPredicate{})
	if err != nil {
		return nil, err
	}
	vh := &routev3.VirtualHost{
		Name:    ep.Key(),
		Domains: []string{cfg.Host(ep.Tenant, ep.Job)},
		// Retry only what never reached a model (no duplicate generations), on another
		// replica. Set once per virtual host: the route configuration of 2,000 endpoints goes
		// to every Envoy, so each repeated byte counts.
		RetryPolicy: &routev3.RetryPolicy{
			RetryOn:    "connect-failure,refused-stream",
			NumRetries: wrapperspb.UInt32(2),
			RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
				Name:       "envoy.retry_host_predicates.previous_hosts",
				ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: retryPredicate},
			}},
			HostSelectionRetryMaxAttempts: 3,
		},
	}
	for _, p := range paths {
		vh.Routes = append(vh.Routes, &routev3.Route{
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: p}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ep.Key()},
				// 0 turns the whole-response deadline off (Envoy's default of 15 s would cut
				// every long generation); IdleTimeout catches dead streams instead.
				Timeout:     durationpb.New(0),
				IdleTimeout: durationpb.New(cfg.StreamIdleTimeout),
			}},
		})
	}
	vh.Routes = append(vh.Routes, notFoundRoute("not_allowed", notFoundPathBody))
	if !ep.RequireAPIKey {
		// No key check runs here to overwrite them, so a client could otherwise pose as a
		// tenant or key to the replica.
		vh.RequestHeadersToRemove = IdentityHeaders
	}
	if filters != nil {
		tpfc, err := filters.VirtualHostFilterConfig(ep)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: filter config: %w", ep.Key(), err)
		}
		vh.TypedPerFilterConfig = tpfc
	}
	return vh, nil
}

// catchAll answers 404 for host names of no endpoint. It asks the filters for the settings
// of an endpoint that needs no key, so an unknown host is told 404 rather than 401.
func catchAll(filters Filters) (*routev3.VirtualHost, error) {
	vh := &routev3.VirtualHost{
		Name:    CatchAllVirtualHost,
		Domains: []string{"*"},
		Routes:  []*routev3.Route{notFoundRoute("unknown_host", notFoundHostBody)},
	}
	if filters != nil {
		tpfc, err := filters.VirtualHostFilterConfig(EndpointInfo{})
		if err != nil {
			return nil, fmt.Errorf("catch-all virtual host: filter config: %w", err)
		}
		vh.TypedPerFilterConfig = tpfc
	}
	return vh, nil
}

// notFoundRoute answers every remaining request with 404 and an OpenAI-style JSON error.
func notFoundRoute(name, body string) *routev3.Route {
	return &routev3.Route{
		Name:  name,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: 404,
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: body}},
		}},
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: "content-type", Value: "application/json"},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
	}
}

func cluster(cfg Config, ep EndpointInfo) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 ep.Key(),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:       durationpb.New(cfg.ConnectTimeout),
		// Plain round robin over the ready replicas: no hash policy, no session affinity.
		LbPolicy: clusterv3.Cluster_ROUND_ROBIN,
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{
			// Panic mode off: Envoy must never spread traffic over replicas it thinks are
			// bad because too few are good; with none left it answers 503.
			HealthyPanicThreshold: &typev3.Percent{Value: 0},
		},
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     wrapperspb.UInt32(cfg.MaxConnections),
			MaxPendingRequests: wrapperspb.UInt32(cfg.MaxPendingRequests),
			MaxRequests:        wrapperspb.UInt32(cfg.MaxRequests),
			MaxRetries:         wrapperspb.UInt32(cfg.MaxRetries),
		}}},
		OutlierDetection: &clusterv3.OutlierDetection{
			Consecutive_5Xx:                    wrapperspb.UInt32(cfg.Consecutive5xx),
			ConsecutiveGatewayFailure:          wrapperspb.UInt32(cfg.ConsecutiveGatewayFailure),
			EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100),
			Interval:                           durationpb.New(cfg.OutlierInterval),
			BaseEjectionTime:                   durationpb.New(cfg.BaseEjectionTime),
			MaxEjectionPercent:                 wrapperspb.UInt32(cfg.MaxEjectionPercent),
		},
		// A VM that dies without a FIN leaves a half-open connection; keepalive finds it in
		// about a minute instead of at the stream idle timeout.
		UpstreamConnectionOptions: &clusterv3.UpstreamConnectionOptions{
			TcpKeepalive: &corev3.TcpKeepalive{
				KeepaliveTime:     wrapperspb.UInt32(30),
				KeepaliveInterval: wrapperspb.UInt32(10),
				KeepaliveProbes:   wrapperspb.UInt32(3),
			},
		},
	}
}

func anyOf(m proto.Message) (*anypb.Any, error) {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return nil, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	return anypb.New(m)
}

// Validate runs go-control-plane's generated validation (ValidateAll) on every resource and
// checks that the set is consistent: every cluster has its load assignment, every route
// configuration the listeners name exists, and nothing is left over.
func (s *Set) Validate() error {
	var errs []error
	check := func(kind, name string, m interface{ ValidateAll() error }) {
		if err := m.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", kind, name, err))
		}
	}
	for _, r := range s.Listeners {
		check("listener", r.GetName(), r)
	}
	for _, r := range s.Routes {
		check("route configuration", r.GetName(), r)
	}
	for _, r := range s.Clusters {
		check("cluster", r.GetName(), r)
	}
	for _, r := range s.LoadAssignments {
		check("load assignment", r.GetClusterName(), r)
	}
	for _, r := range s.Secrets {
		check("secret", r.GetName(), r)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := s.checkSecretRefs(); err != nil {
		return err
	}
	snap, err := s.Snapshot("check")
	if err != nil {
		return err
	}
	if err := snap.Consistent(); err != nil {
		return fmt.Errorf("inconsistent resources: %w", err)
	}
	return nil
}

// Snapshot returns the whole set (load assignments included) as a go-control-plane snapshot.
func (s *Set) Snapshot(version string) (*cachev3.Snapshot, error) {
	return cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: asResources(s.Listeners),
		resourcev3.RouteType:    asResources(s.Routes),
		resourcev3.ClusterType:  asResources(s.Clusters),
		resourcev3.EndpointType: asResources(s.LoadAssignments),
		resourcev3.SecretType:   asResources(s.Secrets),
	})
}

func asResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
}
