package server

import (
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/resources"
)

// These tests speak the discovery protocol by hand, request by request, to check exactly what
// the endpoint cache sends: only what a node lacks.

func cla(job string, addrs ...string) *endpointv3.ClusterLoadAssignment {
	return resources.LoadAssignment(endpoint(job, addrs...))
}

func names(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, r := range resp.Resources {
		var c endpointv3.ClusterLoadAssignment
		require.NoError(t, r.UnmarshalTo(&c))
		out = append(out, c.ClusterName)
	}
	slices.Sort(out)
	return out
}

func deltaNames(resp *discoveryv3.DeltaDiscoveryResponse) []string {
	var out []string
	for _, r := range resp.Resources {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

type sotwClient struct {
	t    *testing.T
	st   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	rx   <-chan *discoveryv3.DiscoveryResponse
	last *discoveryv3.DiscoveryResponse
}

func newSotw(t *testing.T, f *fixture, node string) *sotwClient {
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conn).StreamAggregatedResources(ctxT(t))
	require.NoError(t, err)
	c := &sotwClient{t: t, st: st, rx: pump(st.Recv)}
	require.NoError(t, st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: node}, TypeUrl: resourcev3.ClusterType}))
	return c
}

// ask subscribes to the names, ACKing the last response.
func (c *sotwClient) ask(version string, names ...string) {
	req := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, VersionInfo: version}
	if c.last != nil {
		req.ResponseNonce = c.last.Nonce
	}
	require.NoError(c.t, c.st.Send(req))
}

// next returns the next EDS response (CDS responses are skipped).
func (c *sotwClient) next() *discoveryv3.DiscoveryResponse {
	c.t.Helper()
	for {
		r := must(c.t, c.rx)
		if r.TypeUrl == resourcev3.EndpointType {
			c.last = r
			return r
		}
	}
}

func (c *sotwClient) none() {
	c.t.Helper()
	deadline := time.After(200 * time.Millisecond)
	for {
		select {
		case r := <-c.rx:
			if r.TypeUrl == resourcev3.EndpointType {
				c.t.Fatalf("unexpected EDS response %v", names(c.t, r))
			}
		case <-deadline:
			return
		}
	}
}

func TestEndpointCacheSotwSendsOnlyWhatIsMissing(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("a", "10.0.0.1:8000"), endpoint("b", "10.0.0.2:8000"),
		endpoint("c", "10.0.0.3:8000"), endpoint("d", "10.0.0.4:8000"))))
	c := newSotw(t, f, "envoy-1")

	c.ask("", "acme/a", "acme/b")
	first := c.next()
	assert.Equal(t, []string{"acme/a", "acme/b"}, names(t, first))
	c.ask(first.VersionInfo, "acme/a", "acme/b")
	c.none()

	// A new cluster subscribed: only it.
	c.ask(first.VersionInfo, "acme/a", "acme/b", "acme/c")
	added := c.next()
	assert.Equal(t, []string{"acme/c"}, names(t, added))
	c.ask(added.VersionInfo, "acme/a", "acme/b", "acme/c")
	c.none()

	// One swapped for another, same count: only the new one.
	c.ask(added.VersionInfo, "acme/a", "acme/b", "acme/d")
	swapped := c.next()
	assert.Equal(t, []string{"acme/d"}, names(t, swapped))
	c.ask(swapped.VersionInfo, "acme/a", "acme/b", "acme/d")
	c.none()

	// A change to a watched cluster: only it; to an unwatched one: nothing.
	require.NoError(t, f.srv.UpdateLoadAssignments(cla("c", "10.0.0.33:8000")))
	c.none()
	require.NoError(t, f.srv.UpdateLoadAssignments(cla("b", "10.0.0.22:8000")))
	upd := c.next()
	assert.Equal(t, []string{"acme/b"}, names(t, upd))
	// Changes between a response and its ACK are sent on the ACK.
	require.NoError(t, f.srv.UpdateLoadAssignments(cla("a", "10.0.0.11:8000")))
	c.ask(upd.VersionInfo, "acme/a", "acme/b", "acme/d")
	late := c.next()
	assert.Equal(t, []string{"acme/a"}, names(t, late))

	// A version from another server process (a reconnect after a restart): everything.
	c.ask("0123abc:5:xyz.3", "acme/a", "acme/b", "acme/d")
	assert.Equal(t, []string{"acme/a", "acme/b", "acme/d"}, names(t, c.next()))
}

func TestEndpointCacheSotwAfterTheLogIsTrimmed(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	f.srv.endpoints.(*EndpointCache).logMax = 2
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("a", "10.0.0.1:8000"), endpoint("b", "10.0.0.2:8000"))))
	c := newSotw(t, f, "envoy-1")
	c.ask("", "acme/a", "acme/b")
	first := c.next()

	// The node is slow to ACK while the log overflows: it cannot be told only the changes.
	for i := range 6 {
		require.NoError(t, f.srv.UpdateLoadAssignments(cla("a", "10.0.1."+string(rune('1'+i))+":8000")))
	}
	c.ask(first.VersionInfo, "acme/a", "acme/b")
	assert.Equal(t, []string{"acme/a", "acme/b"}, names(t, c.next()), "a node too far behind gets everything")
}

func TestEndpointCacheSotwWildcard(t *testing.T) {
	f := start(t)
	require.NoError(t, f.srv.SetConfig(ctxT(t), build(t, endpoint("a", "10.0.0.1:8000"), endpoint("b", "10.0.0.2:8000"))))
	c := newSotw(t, f, "envoy-1")
	c.ask("")
	first := c.next()
	assert.Equal(t, []string{"acme/a", "acme/b"}, names(t, first))
	c.ask(first.VersionInfo)
	require.NoError(t, f.srv.UpdateLoadAssignments(cla("b", "10.0.0.9:8000")))
	assert.Equal(t, []string{"acme/b"}, names(t, c.next()))
}

func TestEndpointCacheDelta(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("a", "10.0.0.1:8000"), endpoint("b", "10.0.0.2:8000"),
		endpoint("c", "10.0.0.3:8000"))))
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conn).DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	rx := pump(st.Recv)
	send := func(req *discoveryv3.DeltaDiscoveryRequest) {
		req.TypeUrl = resourcev3.EndpointType
		require.NoError(t, st.Send(req))
	}
	quiet := func() {
		t.Helper()
		r, ok := within(rx, 200*time.Millisecond)
		require.False(t, ok, "unexpected response %v removed %v", func() []string {
			if r == nil {
				return nil
			}
			return deltaNames(r)
		}(), r.GetRemovedResources())
	}

	send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "envoy-d"}, ResourceNamesSubscribe: []string{"acme/a", "acme/b"}})
	r := must(t, rx)
	assert.Equal(t, []string{"acme/a", "acme/b"}, deltaNames(r))
	versions := map[string]string{}
	for _, res := range r.Resources {
		versions[res.Name] = res.Version
	}
	send(&discoveryv3.DeltaDiscoveryRequest{ResponseNonce: r.Nonce})
	quiet()

	require.NoError(t, f.srv.UpdateLoadAssignments(cla("a", "10.0.0.11:8000")))
	r = must(t, rx)
	assert.Equal(t, []string{"acme/a"}, deltaNames(r))
	send(&discoveryv3.DeltaDiscoveryRequest{ResponseNonce: r.Nonce})
	quiet()

	// Subscription change: only the new name.
	send(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"acme/c"}, ResourceNamesUnsubscribe: []string{"acme/b"}})
	r = must(t, rx)
	assert.Equal(t, []string{"acme/c"}, deltaNames(r))
	send(&discoveryv3.DeltaDiscoveryRequest{ResponseNonce: r.Nonce})
	quiet()

	// A watched resource is deleted: the node is told.
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("a", "10.0.0.11:8000"), endpoint("b", "10.0.0.2:8000"))))
	r = must(t, rx)
	assert.Empty(t, r.Resources)
	assert.Equal(t, []string{"acme/c"}, r.RemovedResources)
	send(&discoveryv3.DeltaDiscoveryRequest{ResponseNonce: r.Nonce})
	// An update of an unsubscribed name says nothing.
	require.NoError(t, f.srv.UpdateLoadAssignments(cla("b", "10.0.0.22:8000")))
	quiet()

	// A reconnect that declares what the node has: only what differs.
	st2, err := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conn).DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	rx2 := pump(st2.Recv)
	require.NoError(t, st2.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "envoy-d2"}, TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe:  []string{"acme/a", "acme/b"},
		InitialResourceVersions: map[string]string{"acme/b": versions["acme/b"], "acme/gone": "x"}}))
	r = must(t, rx2)
	assert.Equal(t, []string{"acme/a", "acme/b"}, deltaNames(r), "a changed since, b was updated too")
	assert.Equal(t, []string{"acme/gone"}, r.RemovedResources)
}

func TestEndpointCacheDeltaReconnectWithCurrentVersions(t *testing.T) {
	f := start(t)
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("a", "10.0.0.1:8000"), endpoint("b", "10.0.0.2:8000"))))
	a := &adstest.Agent{NodeID: "envoy-1", Delta: true}
	require.NoError(t, adstest.Start(ctx, f.conn, a))
	require.NoError(t, a.WaitFor(ctx, hasEndpoints("acme/b", "10.0.0.2:8000")))

	// Envoy reconnecting to the same server says which versions it has: nothing is resent.
	cur := map[string]string{}
	for name, e := range f.srv.endpoints.(*EndpointCache).res {
		cur[name] = e.version
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conn).DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	rx := pump(st.Recv)
	require.NoError(t, st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "envoy-1"}, TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{"acme/a", "acme/b"}, InitialResourceVersions: cur}))
	_, ok := within(rx, 200*time.Millisecond)
	assert.False(t, ok)
	require.NoError(t, f.srv.UpdateLoadAssignments(cla("a", "10.0.0.7:8000")))
	r := must(t, rx)
	assert.Equal(t, []string{"acme/a"}, deltaNames(r))
}
