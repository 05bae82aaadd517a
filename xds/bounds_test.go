package xds

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	bounds "github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
)

const adsMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// shortGRPC and shortAdmin are bounds a test reaches in a second or two.
var (
	shortGRPC = bounds.GRPC{ConnectionTimeout: time.Second, KeepaliveTime: time.Second, KeepaliveTimeout: time.Second,
		MaxConnectionIdle: time.Second, SendTimeout: time.Second, MaxRecvMsgSize: 1 << 20, Conns: bounds.Conns{MaxPerClient: 50}}
	shortAdmin = bounds.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		IdleTimeout: 2 * time.Second, MaxHeaderBytes: 16 << 10, Conns: bounds.Conns{MaxPerClient: 50}}
)

// TestServeHoldsAgainstHostileClients attacks `xds serve`'s ADS and admin servers with bounds
// set short through Config: each attack is answered or cut, Envoy nodes and the admin port
// are served meanwhile, and the peak memory stays bounded. The configuration is 2,000 endpoints,
// so a response is larger than what a client that stops reading lets through.
func TestServeHoldsAgainstHostileClients(t *testing.T) {
	// Replicas on ports nothing listens on: their probes fail at once, and the configuration
	// (a cluster and a route per endpoint) is what the attacks need.
	var b strings.Builder
	b.WriteString("endpoints:\n")
	const endpoints = 2000
	for i := range endpoints {
		fmt.Fprintf(&b, "- {tenant: acme, job: chat-%04d, replicas: [{address: 127.0.0.1, port: %d}]}\n", i, 1+i)
	}
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	p := serve(t, Config{Source: &discovery.File{Path: path, Interval: time.Hour}, GRPCBounds: shortGRPC, AdminBounds: shortAdmin,
		Health: health.Config{Path: "/health", Interval: 10 * time.Second, Timeout: time.Second, UnhealthyThreshold: 2, HealthyThreshold: 1}})

	discover := func(typeURL string) *discoveryv3.DiscoveryRequest {
		return &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "hostile"}, TypeUrl: typeURL}
	}
	// A normal node: a new ADS stream gets the listener (not the whole configuration, whose
	// decoding in this process would be most of the peak memory measured).
	nodes := 0
	normalADS := func(ctx context.Context) error {
		nodes++
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(p.conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		req := discover(resourcev3.ListenerType)
		req.Node.Id = fmt.Sprintf("envoy-%d", nodes)
		if err := st.Send(req); err != nil {
			return err
		}
		resp, err := st.Recv()
		if err == nil && len(resp.Resources) == 0 {
			err = fmt.Errorf("node %s got no listener", req.Node.Id)
		}
		return err
	}
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return normalADS(ctx) == nil
	}, 60*time.Second, 100*time.Millisecond, "a node is served before the attacks")
	grpcTarget := servetest.Target{Addr: p.GRPCAddr.String(), Normal: normalADS}
	servetest.Run(t, grpcTarget, servetest.Options{}, append([]servetest.Case{
		{Name: "oversized discovery request", Attack: servetest.OversizedMessage(adsMethod, &discoveryv3.DiscoveryRequest{
			ResourceNames: []string{strings.Repeat("a", 2<<20)}}), Codes: []string{"ResourceExhausted"}},
		{Name: "an ADS stream that never reads", Attack: servetest.NeverRead(servetest.Stream{Method: adsMethod, ClientStreams: true,
			Messages: []proto.Message{discover(resourcev3.ClusterType), discover(resourcev3.ListenerType),
				discover(resourcev3.RouteType)}}, false), Cut: true},
	}, servetest.GRPCConnCases(adsMethod)...))

	admin := servetest.Target{Addr: p.AdminAddr.String(), Method: http.MethodPost, Path: "/debug/endpoints",
		Normal: servetest.Get("http://" + p.AdminAddr.String() + "/readyz")}
	servetest.Run(t, admin, servetest.Options{}, servetest.AdminCases())
}
