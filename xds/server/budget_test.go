package server

import (
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/xds/internal/adstest"
)

// smallBudget makes every response of the servers the test starts wait for the budget.
func smallBudget(t *testing.T) {
	budgetMin = 1
	t.Cleanup(func() { budgetMin = defaultBudgetMin })
}

func TestBudget(t *testing.T) {
	b := &budget{limit: 100, min: 10, hold: time.Minute}
	woken := make(chan string, 4)
	wake := func(name string) func() { return func() { woken <- name } }

	assert.Nil(t, b.acquire(5, wake("small")), "small responses never wait")
	t1 := b.acquire(60, wake("t1"))
	require.True(t, t1.isGranted())
	t2 := b.acquire(60, wake("t2"))
	t3 := b.acquire(20, wake("t3"))
	assert.False(t, t2.isGranted())
	assert.False(t, t3.isGranted(), "first come, first served, even when a later one would fit")
	used, waiting := b.inFlight()
	assert.Equal(t, int64(60), used)
	assert.Equal(t, 2, waiting)

	t1.release()
	t1.release() // twice is harmless
	got := map[string]bool{<-woken: true, <-woken: true}
	assert.Equal(t, map[string]bool{"t2": true, "t3": true}, got)
	assert.True(t, t2.isGranted())
	used, waiting = b.inFlight()
	assert.Equal(t, int64(80), used)
	assert.Equal(t, 0, waiting)

	big := b.acquire(500, wake("big"))
	assert.False(t, big.isGranted())
	t3.release()
	// Withdrawn while waiting: never woken, takes nothing.
	queued := b.acquire(10, wake("withdrawn"))
	queued.release()
	t2.release()
	assert.Equal(t, "big", <-woken, "a response larger than the budget goes alone")
	used, _ = b.inFlight()
	assert.Equal(t, int64(500), used)
	big.release()
	used, waiting = b.inFlight()
	assert.Equal(t, int64(0), used)
	assert.Equal(t, 0, waiting)
	select {
	case w := <-woken:
		t.Fatalf("%s woken", w)
	default:
	}

	var nilBudget *budget
	assert.Nil(t, nilBudget.acquire(1<<30, nil), "no budget: nothing waits")
	assert.Nil(t, (&budget{limit: -1}).acquire(1<<30, nil), "unlimited")
}

func TestBudgetHoldExpires(t *testing.T) {
	b := &budget{limit: 100, min: 1, hold: 50 * time.Millisecond}
	woken := make(chan struct{}, 1)
	held := b.acquire(100, nil)
	require.True(t, held.isGranted())
	next := b.acquire(100, func() { woken <- struct{}{} })
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("a node that never answers kept the next one waiting")
	}
	assert.True(t, next.isGranted())
	held.release() // late: changes nothing
	used, _ := b.inFlight()
	assert.Equal(t, int64(100), used)
}

// TestBudgetWaitsForTheACK: with room for one response, a second node's configuration goes
// out when the first node acknowledges its own, over real ADS streams.
func TestBudgetWaitsForTheACK(t *testing.T) {
	smallBudget(t)
	f := startWith(t, Options{ResponseBudget: 1})
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"))))

	open := func(node string) (discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, <-chan *discoveryv3.DiscoveryResponse) {
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conn).StreamAggregatedResources(ctx)
		require.NoError(t, err)
		require.NoError(t, st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: node}, TypeUrl: resourcev3.ClusterType}))
		return st, pump(st.Recv)
	}
	first, rx1 := open("envoy-1")
	r1 := must(t, rx1)
	_, rx2 := open("envoy-2")
	if _, ok := within(rx2, 300*time.Millisecond); ok {
		t.Fatal("the second node was answered while the first one's response was in flight")
	}
	require.NoError(t, first.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: r1.VersionInfo, ResponseNonce: r1.Nonce}))
	r2 := must(t, rx2)
	assert.Equal(t, r1.VersionInfo, r2.VersionInfo)
	assert.Len(t, r2.Resources, 1)
	inFlight, err := f.reg.Gather()
	require.NoError(t, err)
	var seen int
	for _, mf := range inFlight {
		switch mf.GetName() {
		case "inferplane_xds_response_bytes_in_flight":
			seen++
			assert.Positive(t, mf.GetMetric()[0].GetGauge().GetValue(), "the second node's response is not acknowledged yet")
		case "inferplane_xds_responses_waiting":
			seen++
			assert.Zero(t, mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	assert.Equal(t, 2, seen)
}

// TestBudgetFleetSync: many nodes, both protocols, a budget far smaller than what they need:
// every node still ends with the whole configuration and every endpoint.
func TestBudgetFleetSync(t *testing.T) {
	smallBudget(t)
	f := startWith(t, Options{ResponseBudget: 1})
	ctx := ctxT(t)
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.1:8000"), endpoint("embed", "10.0.1.1:8000", "10.0.1.2:8000"))))
	var agents []*adstest.Agent
	for i := range 8 {
		a := &adstest.Agent{NodeID: fmt.Sprintf("envoy-%d", i), Delta: i%2 == 0}
		require.NoError(t, adstest.Start(ctx, f.conn, a))
		agents = append(agents, a)
	}
	for _, a := range agents {
		require.NoError(t, a.WaitFor(ctx, func(s adstest.State) bool {
			return len(s.Listeners) == 1 && len(s.Routes) == 1 && len(s.Clusters) == 2 &&
				hasEndpoints("acme/chat", "10.0.0.1:8000")(s) && hasEndpoints("acme/embed", "10.0.1.1:8000", "10.0.1.2:8000")(s)
		}), a.NodeID)
	}
	// A change reaches all of them too.
	require.NoError(t, f.srv.SetConfig(ctx, build(t, endpoint("chat", "10.0.0.3:8000"))))
	for _, a := range agents {
		require.NoError(t, a.WaitFor(ctx, func(s adstest.State) bool {
			return len(s.Clusters) == 1 && hasEndpoints("acme/chat", "10.0.0.3:8000")(s)
		}), a.NodeID)
	}
}
