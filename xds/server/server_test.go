package server

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/resources"
)

type fixture struct {
	srv  *Server
	reg  *prometheus.Registry
	conn *grpc.ClientConn
	addr string
}

// start runs the server on a loopback port with a real gRPC server.
func start(t *testing.T) *fixture { return startWith(t, Options{}) }

func startWith(t *testing.T, opts Options) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	srv := New(ctx, opts)
	g := grpc.NewServer()
	srv.Register(g)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(l) }()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		cancel()
		g.Stop()
	})
	return &fixture{srv: srv, reg: reg, conn: conn, addr: l.Addr().String()}
}

func endpoint(job string, addrs ...string) resources.Endpoint {
	ep := resources.Endpoint{EndpointInfo: resources.EndpointInfo{Tenant: "acme", Job: job, Runtime: "vllm", RequireAPIKey: true}}
	for i, a := range addrs {
		ap := netip(a)
		ep.Replicas = append(ep.Replicas, resources.Replica{Name: job + "-r" + string(rune('0'+i)) + "-n0", Address: ap.ip, Port: ap.port})
	}
	return ep
}

type addrPort struct {
	ip   string
	port uint32
}

func netip(s string) addrPort {
	host, port, _ := net.SplitHostPort(s)
	p, _ := net.LookupPort("tcp", port)
	return addrPort{host, uint32(p)}
}

func build(t *testing.T, eps ...resources.Endpoint) *resources.Set {
	t.Helper()
	set, err := resources.Build(resources.DefaultConfig("example.com"), eps, nil)
	require.NoError(t, err)
	return set
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hasEndpoints(cluster string, want ...string) func(adstest.State) bool {
	return func(s adstest.State) bool {
		got, ok := s.Endpoints[cluster]
		if !ok || len(got) != len(want) {
			return false
		}
		for i := range want {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}
}

func TestInitialFetchAndUpdates(t *testing.T) {
	for _, delta := range []bool{false, true} {
		name := map[bool]string{false: "sotw", true: "delta"}[delta]
		t.Run(name, func(t *testing.T) {
			f := start(t)
			ctx := ctxT(t)

			// A node that connects before any configuration waits for it.
			early := &adstest.Agent{NodeID: "envoy-early", Delta: delta}
			require.NoError(t, adstest.Start(ctx, f.conn, early))
			require.Eventually(t, func() bool { return len(f.srv.Nodes()) == 1 }, 5*time.Second, 5*time.Millisecond)
			assert.False(t, f.srv.Ready())

			set := build(t, endpoint("chat", "10.0.0.1:8000", "10.0.0.2:8000"), endpoint("embed", "10.0.1.1:8000"))
			require.NoError(t, f.srv.SetConfig(ctx, set))
			assert.True(t, f.srv.Ready())

			late := &adstest.Agent{NodeID: "envoy-late", Delta: delta, KeepRoutes: true}
			require.NoError(t, adstest.Start(ctx, f.conn, late))
			for _, a := range []*adstest.Agent{early, late} {
				require.NoError(t, a.WaitFor(ctx, func(s adstest.State) bool {
					return len(s.Clusters) == 2 && len(s.Listeners) == 1 && len(s.Routes) == 1 &&
						hasEndpoints("acme/chat", "10.0.0.1:8000", "10.0.0.2:8000")(s) &&
						hasEndpoints("acme/embed", "10.0.1.1:8000")(s)
				}), a.NodeID)
			}
			assert.Equal(t, []string{"envoy-early", "envoy-late"}, f.srv.Nodes(), "one snapshot per node")
			vhosts := late.Snapshot().Routes[resources.RouteConfigName].GetVirtualHosts()
			assert.Len(t, vhosts, 3)

			// One replica leaves: only that cluster's endpoints are sent.
			var mu sync.Mutex
			var got []string
			counter := &adstest.Agent{NodeID: "envoy-counter", Delta: delta, OnEndpoints: func(c string, _ []string, _ time.Time) {
				mu.Lock()
				got = append(got, c)
				mu.Unlock()
			}}
			require.NoError(t, adstest.Start(ctx, f.conn, counter))
			require.NoError(t, counter.WaitFor(ctx, hasEndpoints("acme/embed", "10.0.1.1:8000")))
			require.NoError(t, counter.WaitFor(ctx, hasEndpoints("acme/chat", "10.0.0.1:8000", "10.0.0.2:8000")))
			mu.Lock()
			got = nil
			mu.Unlock()

			require.NoError(t, f.srv.UpdateLoadAssignments(resources.LoadAssignment(endpoint("chat", "10.0.0.2:8000"))))
			for _, a := range []*adstest.Agent{early, late, counter} {
				require.NoError(t, a.WaitFor(ctx, hasEndpoints("acme/chat", "10.0.0.2:8000")), a.NodeID)
			}
			// ... and it comes back.
			require.NoError(t, f.srv.UpdateLoadAssignments(resources.LoadAssignment(endpoint("chat", "10.0.0.1:8000", "10.0.0.2:8000"))))
			require.NoError(t, counter.WaitFor(ctx, hasEndpoints("acme/chat", "10.0.0.1:8000", "10.0.0.2:8000")))
			mu.Lock()
			assert.Equal(t, []string{"acme/chat", "acme/chat"}, got, "the other cluster's endpoints must not be resent")
			mu.Unlock()

			// A job goes away: its cluster, then its endpoints.
			require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("embed", "10.0.1.1:8000"))))
			require.NoError(t, late.WaitFor(ctx, func(s adstest.State) bool {
				_, stale := s.Endpoints["acme/chat"]
				return len(s.Clusters) == 1 && s.Clusters[0] == "acme/embed" && !stale
			}))
			assert.NotContains(t, f.srv.LoadAssignments(), "acme/chat")

			proto := map[bool]string{false: "sotw", true: "delta"}[delta]
			assert.Equal(t, 3.0, value(f.srv.metrics.streams.WithLabelValues(proto)))
			assert.Equal(t, 3.0, value(f.srv.metrics.nodes))
			assert.Zero(t, value(f.srv.metrics.nacks.WithLabelValues("Cluster")))
		})
	}
}

func TestReconnect(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"))))

	sctx, cancel := context.WithCancel(ctx)
	a := &adstest.Agent{NodeID: "envoy-0"}
	require.NoError(t, adstest.Start(sctx, f.conn, a))
	require.NoError(t, a.WaitFor(ctx, hasEndpoints("acme/chat", "10.0.0.1:8000")))
	cancel()
	<-a.Done()
	require.Eventually(t, func() bool { return len(f.srv.Nodes()) == 0 }, 5*time.Second, 5*time.Millisecond,
		"a node whose last stream closed is forgotten")

	// Changes while the node was away reach it when it comes back, on a new connection.
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"), endpoint("embed", "10.0.1.1:8000"))))
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	b := &adstest.Agent{NodeID: "envoy-0", Delta: true}
	require.NoError(t, adstest.Start(ctx, conn, b))
	require.NoError(t, b.WaitFor(ctx, func(s adstest.State) bool {
		return len(s.Clusters) == 2 && hasEndpoints("acme/embed", "10.0.1.1:8000")(s)
	}))
}

// pump reads a stream on one goroutine into a channel, so tests can wait for "nothing".
func pump[T any](recv func() (T, error)) <-chan T {
	ch := make(chan T, 16)
	go func() {
		defer close(ch)
		for {
			r, err := recv()
			if err != nil {
				return
			}
			ch <- r
		}
	}()
	return ch
}

// within returns the next message, or the zero value and false when none comes within d.
func within[T any](ch <-chan T, d time.Duration) (T, bool) {
	select {
	case r, ok := <-ch:
		return r, ok
	case <-time.After(d):
		var zero T
		return zero, false
	}
}

// must returns the next message or fails.
func must[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	r, ok := within(ch, 10*time.Second)
	require.True(t, ok, "no response")
	return r
}

// TestNACKDoesNotLoop rejects a version the way Envoy does (the last good version, the
// rejected response's nonce and an error) and checks that the server does not send the
// rejected version again, and does send the next one.
func TestNACKDoesNotLoop(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"))))

	client := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conn)
	st, err := client.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	node := &corev3.Node{Id: "envoy-nack"}
	require.NoError(t, st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}))
	rx := pump(st.Recv)
	first := must(t, rx)
	require.Len(t, first.Resources, 1)

	// NACK of the very first response: there is no good version yet.
	require.NoError(t, st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: first.Nonce,
		ErrorDetail: &status.Status{Code: 3, Message: "test: rejected"}}))
	if r, ok := within(rx, 300*time.Millisecond); ok {
		t.Fatalf("the rejected version %s was sent again", r.VersionInfo)
	}

	// A new version is sent; a NACK of it must not bring it back either.
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"), endpoint("embed", "10.0.1.1:8000"))))
	second := must(t, rx)
	require.Len(t, second.Resources, 2)
	require.NotEqual(t, first.VersionInfo, second.VersionInfo)
	// Accept nothing: Envoy NACKs with its last good version, here the empty one.
	for range 3 {
		require.NoError(t, st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: second.Nonce,
			ErrorDetail: &status.Status{Code: 3, Message: "test: rejected again"}}))
	}
	if r, ok := within(rx, 300*time.Millisecond); ok {
		t.Fatalf("the rejected version %s was sent again", r.VersionInfo)
	}
	assert.Equal(t, 4.0, value(f.srv.metrics.nacks.WithLabelValues("Cluster")))

	// The next change goes out.
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("embed", "10.0.1.1:8000"))))
	third := must(t, rx)
	assert.Len(t, third.Resources, 1)
	// ... and an ACK of it is quiet.
	require.NoError(t, st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: third.VersionInfo, ResponseNonce: third.Nonce}))
	_, ok := within(rx, 200*time.Millisecond)
	assert.False(t, ok, "an ACK must not be answered")
}

func TestDeltaNACKDoesNotLoop(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"))))

	client := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conn)
	st, err := client.DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "envoy-dnack"}, TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{"acme/chat"}}))
	rx := pump(st.Recv)
	first := must(t, rx)
	require.Len(t, first.Resources, 1)
	require.NoError(t, st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: first.Nonce,
		ErrorDetail: &status.Status{Code: 3, Message: "test: rejected"}}))
	_, again := within(rx, 300*time.Millisecond)
	assert.False(t, again, "the rejected endpoints were sent again")

	require.NoError(t, f.srv.UpdateLoadAssignments(resources.LoadAssignment(endpoint("chat", "10.0.0.2:8000"))))
	next := must(t, rx)
	require.Len(t, next.Resources, 1)
	assert.Equal(t, 1.0, value(f.srv.metrics.nacks.WithLabelValues("ClusterLoadAssignment")))
}

func TestSetConfigRejectsInconsistentSets(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	good := build(t, endpoint("chat", "10.0.0.1:8000"))
	require.NoError(t, f.srv.SetConfig(ctx, good))
	v := f.srv.Version()

	bad := build(t, endpoint("chat", "10.0.0.1:8000"), endpoint("embed"))
	bad.LoadAssignments = bad.LoadAssignments[:1]
	require.ErrorContains(t, f.srv.SetConfig(ctx, bad), "inconsistent resources")
	assert.Equal(t, v, f.srv.Version(), "nothing changes on error")
	assert.Len(t, f.srv.LoadAssignments(), 1)

	cla := resources.LoadAssignment(endpoint("chat"))
	cla.ClusterName = ""
	require.ErrorContains(t, f.srv.UpdateLoadAssignments(cla), "invalid ClusterLoadAssignment.ClusterName")

	// The version is a content hash: the same configuration gets the same version.
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.9:8000"))))
	assert.Equal(t, v, f.srv.Version(), "endpoints are not part of the snapshot version")
}

// value reads a counter's or gauge's current value.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// TestMixedProtocols runs state-of-the-world and delta sessions side by side: go-control-plane
// numbers their streams separately, and each must keep its own node.
func TestMixedProtocols(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"))))
	var agents []*adstest.Agent
	for i, delta := range []bool{false, true, false, true} {
		a := &adstest.Agent{NodeID: "envoy-" + string(rune('a'+i)), Delta: delta}
		require.NoError(t, adstest.Start(ctx, f.conn, a))
		agents = append(agents, a)
	}
	for _, a := range agents {
		require.NoError(t, a.WaitFor(ctx, hasEndpoints("acme/chat", "10.0.0.1:8000")), a.NodeID)
	}
	assert.Equal(t, []string{"envoy-a", "envoy-b", "envoy-c", "envoy-d"}, f.srv.Nodes())
	require.NoError(t, f.srv.UpdateLoadAssignments(resources.LoadAssignment(endpoint("chat", "10.0.0.2:8000"))))
	for _, a := range agents {
		require.NoError(t, a.WaitFor(ctx, hasEndpoints("acme/chat", "10.0.0.2:8000")), a.NodeID)
	}
}

// TestLinearCacheFallback runs the same sessions on go-control-plane's LinearCache.
func TestLinearCacheFallback(t *testing.T) {
	f := startWith(t, Options{Endpoints: adstest.NewLinearStore()})
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"), endpoint("embed", "10.0.1.1:8000"))))
	var agents []*adstest.Agent
	for i, delta := range []bool{false, true} {
		a := &adstest.Agent{NodeID: "envoy-" + string(rune('a'+i)), Delta: delta}
		require.NoError(t, adstest.Start(ctx, f.conn, a))
		agents = append(agents, a)
	}
	for _, a := range agents {
		require.NoError(t, a.WaitFor(ctx, hasEndpoints("acme/chat", "10.0.0.1:8000")), a.NodeID)
	}
	require.NoError(t, f.srv.UpdateLoadAssignments(resources.LoadAssignment(endpoint("chat", "10.0.0.2:8000"))))
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.2:8000"))))
	for _, a := range agents {
		require.NoError(t, a.WaitFor(ctx, func(s adstest.State) bool {
			return hasEndpoints("acme/chat", "10.0.0.2:8000")(s) && len(s.Clusters) == 1
		}), a.NodeID)
	}
	assert.Len(t, f.srv.LoadAssignments(), 1)
}
