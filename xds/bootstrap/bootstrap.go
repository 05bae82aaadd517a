// Package bootstrap renders the Envoy bootstrap that points an Envoy at inferplane's xDS
// server: every listener, route, cluster and endpoint then comes over one ADS stream.
package bootstrap

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	downstreamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"
)

// XDSCluster is the bootstrap's one static cluster: the xDS server.
const XDSCluster = "inferplane_xds"

// Options describe the Envoy and where its xDS server is.
type Options struct {
	// NodeID must be unique per Envoy (the server keeps a snapshot per node), e.g. the pod name.
	NodeID string
	// NodeCluster names the Envoy fleet (default inferplane-gateway).
	NodeCluster string
	// XDSAddress is the xDS server's gRPC address, host:port; a host name is resolved by DNS
	// (a Kubernetes Service), an IP is used as is.
	XDSAddress string
	// AdminAddress is Envoy's admin interface (default 127.0.0.1:9901). It can change Envoy's
	// state, so it stays on loopback unless you say otherwise.
	AdminAddress string
	// Delta uses incremental xDS instead of state of the world (the CLI's default: see
	// docs/xds.md for why).
	Delta bool
	// MaxConnections caps client connections across all listeners (default 50000), Envoy's
	// recommended protection for an edge proxy.
	MaxConnections int64
}

// Build returns the bootstrap, validated.
func Build(o Options) (*bootstrapv3.Bootstrap, error) {
	if o.NodeID == "" {
		return nil, fmt.Errorf("node id: required (unique per Envoy, e.g. the pod name)")
	}
	xdsHost, xdsPort, err := splitHostPort("xds address", o.XDSAddress)
	if err != nil {
		return nil, err
	}
	adminHost, adminPort, err := splitHostPort("admin address", cmp.Or(o.AdminAddress, "127.0.0.1:9901"))
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(adminHost); err != nil {
		return nil, fmt.Errorf("admin address %q: expected an IP address", o.AdminAddress)
	}

	xds, err := xdsCluster(xdsHost, xdsPort)
	if err != nil {
		return nil, err
	}
	apiType := corev3.ApiConfigSource_GRPC
	if o.Delta {
		apiType = corev3.ApiConfigSource_DELTA_GRPC
	}
	ads := &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
	limit, err := anypb.New(&downstreamv3.DownstreamConnectionsConfig{MaxActiveDownstreamConnections: cmp.Or(o.MaxConnections, 50000)})
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: o.NodeID, Cluster: cmp.Or(o.NodeCluster, "inferplane-gateway")},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             apiType,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSCluster},
				}}},
				SetNodeOnFirstMessageOnly: true,
			},
			CdsConfig: ads,
			LdsConfig: proto.Clone(ads).(*corev3.ConfigSource),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xds}},
		Admin:           &bootstrapv3.Admin{Address: socket(adminHost, adminPort)},
		OverloadManager: &overloadv3.OverloadManager{ResourceMonitors: []*overloadv3.ResourceMonitor{{
			Name:       "envoy.resource_monitors.global_downstream_max_connections",
			ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: limit},
		}}},
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return b, nil
}

// xdsCluster is the static cluster of the xDS server: HTTP/2 with keepalives.
func xdsCluster(host string, port uint32) (*clusterv3.Cluster, error) {
	proto2, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{
				// Find a dead xDS server within a minute and reconnect, instead of waiting for TCP.
				ConnectionKeepalive: &corev3.KeepaliveSettings{Interval: durationpb.New(30 * time.Second), Timeout: durationpb.New(5 * time.Second)},
			}},
		}},
	})
	if err != nil {
		return nil, err
	}
	discovery := clusterv3.Cluster_STRICT_DNS
	if _, err := netip.ParseAddr(host); err == nil {
		discovery = clusterv3.Cluster_STATIC
	}
	return &clusterv3.Cluster{
		Name:                          XDSCluster,
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: discovery},
		ConnectTimeout:                durationpb.New(5 * time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": proto2},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: XDSCluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socket(host, port)}},
			}}}},
		},
	}, nil
}

// YAML renders the bootstrap as YAML for `envoy -c`.
func YAML(o Options) ([]byte, error) {
	b, err := Build(o)
	if err != nil {
		return nil, err
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(b)
	if err != nil {
		return nil, err
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Envoy bootstrap generated by `inferplane xds bootstrap`: everything else comes over ADS.\n"), y...), nil
}

func splitHostPort(what, addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: expected host:port", what, addr)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, fmt.Errorf("%s %q: expected host:port with a port 1-65535", what, addr)
	}
	return host, uint32(p), nil
}

func socket(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
