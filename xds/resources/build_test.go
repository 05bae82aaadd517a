package resources

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func vllm(tenant, job string, reps ...Replica) Endpoint {
	return Endpoint{EndpointInfo: EndpointInfo{Tenant: tenant, Job: job, Runtime: "vllm", RequireAPIKey: true}, Replicas: reps}
}

func rep(name, ip string, port uint32) Replica { return Replica{Name: name, Address: ip, Port: port} }

func hcmOf(t *testing.T, set *Set) *hcmv3.HttpConnectionManager {
	t.Helper()
	require.Len(t, set.Listeners, 1)
	var hcm hcmv3.HttpConnectionManager
	require.NoError(t, set.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm))
	return &hcm
}

func vhostByName(set *Set, name string) *routev3.VirtualHost {
	for _, vh := range set.Routes[0].VirtualHosts {
		if vh.Name == name {
			return vh
		}
	}
	return nil
}

func TestBuildEndpoints(t *testing.T) {
	cases := []struct {
		name      string
		endpoints []Endpoint
		// per endpoint key: the allowed paths and the replica addresses
		wantPaths map[string][]string
		wantAddrs map[string][]string
	}{
		{
			name:      "no endpoints: listener and catch-all only",
			wantPaths: map[string][]string{},
		},
		{
			name: "vllm with three replicas",
			endpoints: []Endpoint{vllm("acme", "chat",
				rep("chat-r0-n0", "10.0.0.1", 8000), rep("chat-r1-n0", "10.0.0.2", 8000), rep("chat-r2-n0", "10.0.0.3", 8000))},
			wantPaths: map[string][]string{"acme/chat": {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"}},
			wantAddrs: map[string][]string{"acme/chat": {"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}},
		},
		{
			name: "parakeet, ipv6 replica",
			endpoints: []Endpoint{{EndpointInfo: EndpointInfo{Tenant: "acme", Job: "asr", Runtime: "parakeet"},
				Replicas: []Replica{rep("asr-r0-n0", "fd00::5", 9000)}}},
			wantPaths: map[string][]string{"acme/asr": {"/v1/audio/transcriptions", "/v1/models"}},
			wantAddrs: map[string][]string{"acme/asr": {"[fd00::5]:9000"}},
		},
		{
			name:      "job with no ready replica keeps its cluster and an empty assignment",
			endpoints: []Endpoint{vllm("acme", "cold")},
			wantPaths: map[string][]string{"acme/cold": {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"}},
			wantAddrs: map[string][]string{"acme/cold": nil},
		},
		{
			name: "two tenants with the same job name stay apart",
			endpoints: []Endpoint{vllm("beta", "chat", rep("chat-r0-n0", "10.0.1.1", 8000)),
				vllm("acme", "chat", rep("chat-r0-n0", "10.0.0.1", 8000))},
			wantPaths: map[string][]string{
				"acme/chat": {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"},
				"beta/chat": {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"},
			},
			wantAddrs: map[string][]string{"acme/chat": {"10.0.0.1:8000"}, "beta/chat": {"10.0.1.1:8000"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, err := Build(DefaultConfig("inference.example.com"), tc.endpoints, nil)
			require.NoError(t, err)
			require.NoError(t, set.Validate())

			require.Len(t, set.Routes, 1)
			rc := set.Routes[0]
			require.Len(t, rc.VirtualHosts, len(tc.wantPaths)+1)
			last := rc.VirtualHosts[len(rc.VirtualHosts)-1]
			assert.Equal(t, CatchAllVirtualHost, last.Name, "catch-all must be last")
			assert.Equal(t, []string{"*"}, last.Domains)
			assert.EqualValues(t, 404, last.Routes[0].GetDirectResponse().GetStatus())

			require.Len(t, set.Clusters, len(tc.wantPaths))
			require.Len(t, set.LoadAssignments, len(tc.wantPaths))
			for key, paths := range tc.wantPaths {
				tenant, job, _ := strings.Cut(key, "/")
				vh := vhostByName(set, key)
				require.NotNil(t, vh, key)
				assert.Equal(t, []string{job + "." + tenant + ".inference.example.com"}, vh.Domains)
				var got []string
				for _, r := range vh.Routes[:len(vh.Routes)-1] {
					got = append(got, r.Match.GetPath())
					assert.Equal(t, key, r.GetRoute().GetCluster())
					assert.Equal(t, time.Duration(0), r.GetRoute().GetTimeout().AsDuration(), "route timeout must be off for SSE")
					assert.Equal(t, 10*time.Minute, r.GetRoute().GetIdleTimeout().AsDuration())
				}
				assert.Equal(t, paths, got)
				deny := vh.Routes[len(vh.Routes)-1]
				assert.Equal(t, "/", deny.Match.GetPrefix())
				assert.EqualValues(t, 404, deny.GetDirectResponse().GetStatus())

				var cla []string
				for _, a := range set.LoadAssignments {
					if a.ClusterName != key {
						continue
					}
					for _, le := range a.Endpoints {
						for _, lb := range le.LbEndpoints {
							assert.Equal(t, corev3.HealthStatus_HEALTHY, lb.HealthStatus)
							sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
							host := sa.Address
							if strings.Contains(host, ":") {
								host = "[" + host + "]"
							}
							cla = append(cla, host+":"+strconv.Itoa(int(sa.GetPortValue())))
						}
					}
				}
				assert.Equal(t, tc.wantAddrs[key], cla)
			}
		})
	}
}

func TestClusterPolicy(t *testing.T) {
	set, err := Build(DefaultConfig("example.com"), []Endpoint{vllm("acme", "chat", rep("a", "10.0.0.1", 8000))}, nil)
	require.NoError(t, err)
	c := set.Clusters[0]
	assert.Equal(t, clusterv3.Cluster_ROUND_ROBIN, c.LbPolicy)
	assert.Equal(t, clusterv3.Cluster_EDS, c.GetType())
	assert.NotNil(t, c.EdsClusterConfig.EdsConfig.GetAds(), "EDS must come over ADS")
	assert.Nil(t, c.LbConfig, "no ring hash or maglev: no session affinity")
	assert.InDelta(t, 0, c.CommonLbConfig.HealthyPanicThreshold.Value, 0, "panic mode must be off")
	require.NotNil(t, c.OutlierDetection)
	assert.EqualValues(t, 5, c.OutlierDetection.Consecutive_5Xx.Value)
	require.Len(t, c.CircuitBreakers.Thresholds, 1)
	assert.EqualValues(t, 4096, c.CircuitBreakers.Thresholds[0].MaxRequests.Value)
	for _, r := range vhostByName(set, "acme/chat").Routes {
		assert.Empty(t, r.GetRoute().GetHashPolicy(), "route %s: no hash policy", r.Name)
	}

	hcm := hcmOf(t, set)
	assert.Equal(t, hcmv3.HttpConnectionManager_AUTO, hcm.CodecType, "HTTP/1.1 and HTTP/2")
	assert.Equal(t, RouteConfigName, hcm.GetRds().GetRouteConfigName())
	assert.Nil(t, hcm.RequestTimeout, "request timeout must stay off for SSE")
	assert.Equal(t, 10*time.Minute, hcm.StreamIdleTimeout.AsDuration())
	require.NotEmpty(t, hcm.HttpFilters)
	assert.Equal(t, "envoy.filters.http.router", hcm.HttpFilters[len(hcm.HttpFilters)-1].Name)
}

func TestBuildIsDeterministic(t *testing.T) {
	var eps []Endpoint
	for i := range 20 {
		job := "job" + strconv.Itoa(i)
		eps = append(eps, vllm("t"+strconv.Itoa(i%3), job,
			rep(job+"-r0-n0", "10.1.0."+strconv.Itoa(i+1), 8000),
			rep(job+"-r1-n0", "10.2.0."+strconv.Itoa(i+1), 8000)))
	}
	want, err := Build(DefaultConfig("example.com"), eps, nil)
	require.NoError(t, err)
	for range 5 {
		shuffled := slices.Clone(eps)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for i := range shuffled {
			r := slices.Clone(shuffled[i].Replicas)
			slices.Reverse(r)
			shuffled[i].Replicas = r
		}
		got, err := Build(DefaultConfig("example.com"), shuffled, nil)
		require.NoError(t, err)
		for i := range want.Clusters {
			assert.True(t, proto.Equal(want.Clusters[i], got.Clusters[i]))
			assert.True(t, proto.Equal(want.LoadAssignments[i], got.LoadAssignments[i]))
		}
		assert.True(t, proto.Equal(want.Routes[0], got.Routes[0]))
		assert.True(t, proto.Equal(want.Listeners[0], got.Listeners[0]))
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		eps  []Endpoint
		want string
	}{
		{"no domain", DefaultConfig(""), nil, "domain: required"},
		{"bad domain", DefaultConfig("Not_A.Domain"), nil, `domain "Not_A.Domain"`},
		{"tenant not a DNS label", DefaultConfig("e.com"), []Endpoint{vllm("Acme", "chat")}, `tenant "Acme"`},
		{"job with a dot", DefaultConfig("e.com"), []Endpoint{vllm("acme", "a.b")}, `job "a.b"`},
		{"unknown runtime", DefaultConfig("e.com"),
			[]Endpoint{{EndpointInfo: EndpointInfo{Tenant: "acme", Job: "x", Runtime: "triton"}}},
			`runtime "triton": expected one of parakeet, vllm`},
		{"replica without IP", DefaultConfig("e.com"), []Endpoint{vllm("acme", "chat", rep("a", "chat-r0", 8000))},
			`endpoint acme/chat: replicas[0]: address "chat-r0": expected an IP address`},
		{"port 0", DefaultConfig("e.com"), []Endpoint{vllm("acme", "chat", rep("a", "10.0.0.1", 0))},
			"replicas[0]: port 0"},
		{"port too big", DefaultConfig("e.com"), []Endpoint{vllm("acme", "chat", rep("a", "10.0.0.1", 70000))},
			"port 70000"},
		{"same address twice", DefaultConfig("e.com"),
			[]Endpoint{vllm("acme", "chat", rep("a", "10.0.0.1", 8000), rep("b", "10.0.0.1", 8000))},
			"replicas[1]: address 10.0.0.1:8000 listed twice"},
		{"endpoint twice", DefaultConfig("e.com"), []Endpoint{vllm("acme", "chat"), vllm("acme", "chat")},
			"endpoint acme/chat: listed twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.cfg, tc.eps, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// testFilters stands in for the API-key and usage filters another package provides: it uses
// Envoy's real ext_authz and stdout access-log protos.
type testFilters struct{ err error }

func (f testFilters) HTTPFilters() ([]*hcmv3.HttpFilter, error) {
	if f.err != nil {
		return nil, f.err
	}
	cfg, err := anypb.New(&extauthzv3.ExtAuthz{
		Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "inferplane_authz"}},
			Timeout:         durationpb.New(time.Second),
		}},
		TransportApiVersion: corev3.ApiVersion_V3,
	})
	return []*hcmv3.HttpFilter{{Name: "envoy.filters.http.ext_authz", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}}, err
}

func (f testFilters) VirtualHostFilterConfig(ep EndpointInfo) (map[string]*anypb.Any, error) {
	if ep.RequireAPIKey {
		return nil, nil
	}
	off, err := anypb.New(&extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_Disabled{Disabled: true}})
	return map[string]*anypb.Any{"envoy.filters.http.ext_authz": off}, err
}

func (f testFilters) AccessLogs() ([]*accesslogv3.AccessLog, error) {
	cfg, err := anypb.New(&streamv3.StdoutAccessLog{})
	return []*accesslogv3.AccessLog{{Name: "envoy.access_loggers.stdout", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: cfg}}}, err
}

func (f testFilters) Clusters() ([]*clusterv3.Cluster, error) {
	return []*clusterv3.Cluster{{
		Name:                 "inferplane_authz",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
	}}, nil
}

func TestBuildWithFilters(t *testing.T) {
	open := vllm("acme", "open", rep("a", "10.0.0.1", 8000))
	open.RequireAPIKey = false
	set, err := Build(DefaultConfig("example.com"), []Endpoint{vllm("acme", "chat", rep("a", "10.0.0.2", 8000)), open}, testFilters{})
	require.NoError(t, err)
	require.NoError(t, set.Validate())

	hcm := hcmOf(t, set)
	names := []string{}
	for _, f := range hcm.HttpFilters {
		names = append(names, f.Name)
	}
	assert.Equal(t, []string{"envoy.filters.http.ext_authz", "envoy.filters.http.router"}, names)
	require.Len(t, hcm.AccessLog, 1)
	assert.Empty(t, vhostByName(set, "acme/chat").TypedPerFilterConfig)
	assert.Contains(t, vhostByName(set, "acme/open").TypedPerFilterConfig, "envoy.filters.http.ext_authz")
	assert.Contains(t, vhostByName(set, CatchAllVirtualHost).TypedPerFilterConfig, "envoy.filters.http.ext_authz",
		"unknown hosts get the settings of an endpoint without keys: 404, not 401")
	assert.Empty(t, vhostByName(set, "acme/chat").RequestHeadersToRemove, "the key check overwrites the identity headers")
	assert.Equal(t, IdentityHeaders, vhostByName(set, "acme/open").RequestHeadersToRemove,
		"without a key check, a client-sent identity header must not reach the replica")
	assert.Equal(t, "inferplane_authz", set.Clusters[len(set.Clusters)-1].Name)
	assert.Len(t, set.LoadAssignments, 2, "filter clusters are static: no load assignment")

	_, err = Build(DefaultConfig("example.com"), nil, testFilters{err: errors.New("no secret")})
	require.ErrorContains(t, err, "filter chain: no secret")
}

func TestValidateCatchesInconsistency(t *testing.T) {
	set, err := Build(DefaultConfig("example.com"), []Endpoint{vllm("acme", "a"), vllm("acme", "b")}, nil)
	require.NoError(t, err)

	missing := *set
	missing.LoadAssignments = set.LoadAssignments[:1]
	assert.ErrorContains(t, missing.Validate(), "inconsistent resources")

	noRoutes := *set
	noRoutes.Routes = nil
	assert.ErrorContains(t, noRoutes.Validate(), "inconsistent resources")

	bad := *set
	bad.Clusters = slices.Clone(set.Clusters)
	c := proto.Clone(set.Clusters[0]).(*clusterv3.Cluster)
	c.Name = ""
	bad.Clusters[0] = c
	assert.ErrorContains(t, bad.Validate(), "invalid Cluster.Name")
}
