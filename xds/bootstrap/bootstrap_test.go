package bootstrap

import (
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

func TestBootstrapRoundTrips(t *testing.T) {
	cases := []struct {
		name      string
		opts      Options
		discovery clusterv3.Cluster_DiscoveryType
		api       corev3.ApiConfigSource_ApiType
	}{
		{"ip address, state of the world", Options{NodeID: "envoy-0", XDSAddress: "127.0.0.1:18000"}, clusterv3.Cluster_STATIC, corev3.ApiConfigSource_GRPC},
		{"service name, delta", Options{NodeID: "gw-7f9c", XDSAddress: "inferplane-xds.inferplane.svc:18000", Delta: true},
			clusterv3.Cluster_STRICT_DNS, corev3.ApiConfigSource_DELTA_GRPC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			y, err := YAML(tc.opts)
			require.NoError(t, err)
			// Read it back the way Envoy does: YAML to JSON to the proto, rejecting unknown fields.
			js, err := yaml.YAMLToJSON(y)
			require.NoError(t, err)
			var got bootstrapv3.Bootstrap
			require.NoError(t, protojson.Unmarshal(js, &got))
			require.NoError(t, got.ValidateAll())
			want, err := Build(tc.opts)
			require.NoError(t, err)
			assert.True(t, proto.Equal(want, &got), "YAML must carry the whole bootstrap")

			assert.Equal(t, tc.opts.NodeID, got.Node.Id)
			assert.Equal(t, "inferplane-gateway", got.Node.Cluster)
			ads := got.DynamicResources.AdsConfig
			assert.Equal(t, tc.api, ads.ApiType)
			assert.Equal(t, XDSCluster, ads.GrpcServices[0].GetEnvoyGrpc().ClusterName)
			assert.NotNil(t, got.DynamicResources.CdsConfig.GetAds())
			assert.NotNil(t, got.DynamicResources.LdsConfig.GetAds())
			assert.Equal(t, tc.discovery, got.StaticResources.Clusters[0].GetType())
			assert.Equal(t, "127.0.0.1", got.Admin.Address.GetSocketAddress().Address, "admin stays on loopback")
			assert.Contains(t, string(y), "set_node_on_first_message_only: true")
		})
	}
}

func TestBootstrapErrors(t *testing.T) {
	cases := []struct {
		opts Options
		want string
	}{
		{Options{XDSAddress: "127.0.0.1:18000"}, "node id: required"},
		{Options{NodeID: "a", XDSAddress: "127.0.0.1"}, `xds address "127.0.0.1": expected host:port`},
		{Options{NodeID: "a", XDSAddress: "127.0.0.1:0"}, "port 1-65535"},
		{Options{NodeID: "a", XDSAddress: ":18000"}, "port 1-65535"},
		{Options{NodeID: "a", XDSAddress: "x:1", AdminAddress: "localhost:9901"}, `admin address "localhost:9901": expected an IP address`},
	}
	for _, tc := range cases {
		_, err := Build(tc.opts)
		require.Error(t, err)
		assert.True(t, strings.Contains(err.Error(), tc.want), "%v does not contain %q", err, tc.want)
	}
}
