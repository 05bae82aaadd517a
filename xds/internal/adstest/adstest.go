// Package adstest is an xDS client for tests and benchmarks: it speaks the discovery protocol
// over a real gRPC ADS stream with Envoy's own protos, the way Envoy does (state of the world
// or delta): it subscribes to listeners and clusters, follows them to route configurations and
// load assignments, and ACKs every response. It keeps only what tests look at (names and
// endpoint addresses), so a hundred of them fit in a benchmark.
package adstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// State is what an Agent knows.
type State struct {
	Listeners []string
	Routes    map[string]*routev3.RouteConfiguration
	Clusters  []string
	// Endpoints maps a cluster to its endpoints' addresses ("ip:port"), sorted.
	Endpoints map[string][]string
	// Versions are the last accepted versions per type (state of the world only).
	Versions map[string]string
}

// Agent is one Envoy-like ADS client.
type Agent struct {
	NodeID string
	Delta  bool
	// OnEndpoints, when set, is called on the receiving goroutine for every load assignment
	// received, with the time it arrived.
	OnEndpoints func(cluster string, addrs []string, at time.Time)
	// KeepRoutes stores route configurations in State.
	KeepRoutes bool
	// Discard keeps no endpoints in State (benchmarks with many agents use OnEndpoints and
	// Counts instead).
	Discard bool

	mu        sync.Mutex
	state     State
	changed   chan struct{}
	err       error
	done      chan struct{}
	received  int
	endpoints int // load assignments received
}

// Start opens the stream and runs the agent until ctx ends or the stream fails.
func Start(ctx context.Context, conn grpc.ClientConnInterface, a *Agent) error {
	a.state = State{Routes: map[string]*routev3.RouteConfiguration{}, Endpoints: map[string][]string{}, Versions: map[string]string{}}
	a.changed = make(chan struct{})
	a.done = make(chan struct{})
	client := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	node := &corev3.Node{Id: a.NodeID, Cluster: "inferplane-test"}
	if a.Delta {
		st, err := client.DeltaAggregatedResources(ctx)
		if err != nil {
			return err
		}
		d := &deltaRun{a: a, st: st, node: node, subscribed: map[string]map[string]bool{}}
		if err := d.start(); err != nil {
			return err
		}
		go a.finish(d.loop)
		return nil
	}
	st, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	s := &sotwRun{a: a, st: st, node: node, last: map[string]*discoveryv3.DiscoveryResponse{},
		names: map[string][]string{}, versions: map[string]string{}}
	if err := s.start(); err != nil {
		return err
	}
	go a.finish(s.loop)
	return nil
}

func (a *Agent) finish(loop func() error) {
	err := loop()
	a.mu.Lock()
	a.err = err
	a.mu.Unlock()
	close(a.done)
}

// Done is closed when the stream has ended; Err then says why.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err is the stream's end.
func (a *Agent) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Received counts the responses received.
func (a *Agent) Received() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.received
}

// Counts returns the responses and the load assignments received so far.
func (a *Agent) Counts() (responses, loadAssignments int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.received, a.endpoints
}

// Snapshot returns a copy of the state.
func (a *Agent) Snapshot() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return State{
		Listeners: slices.Clone(a.state.Listeners),
		Routes:    maps.Clone(a.state.Routes),
		Clusters:  slices.Clone(a.state.Clusters),
		Endpoints: maps.Clone(a.state.Endpoints),
		Versions:  maps.Clone(a.state.Versions),
	}
}

// WaitFor blocks until cond holds for the state, the stream ends, or ctx ends.
func (a *Agent) WaitFor(ctx context.Context, cond func(State) bool) error {
	for {
		a.mu.Lock()
		ch := a.changed
		ok := cond(a.state)
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-a.done:
			if cond(a.Snapshot()) {
				return nil
			}
			return fmt.Errorf("stream ended: %v", a.Err())
		case <-ctx.Done():
			return fmt.Errorf("%w; state: %d clusters, %d endpoint sets", ctx.Err(), len(a.Snapshot().Clusters), len(a.Snapshot().Endpoints))
		}
	}
}

// update applies f to the state under the lock and wakes waiters.
func (a *Agent) update(f func(*State)) {
	a.mu.Lock()
	f(&a.state)
	a.received++
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// Addresses reads a load assignment's endpoint addresses, sorted.
func Addresses(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, le := range cla.GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			ip, err := netip.ParseAddr(sa.GetAddress())
			if err != nil {
				continue
			}
			out = append(out, netip.AddrPortFrom(ip, uint16(sa.GetPortValue())).String())
		}
	}
	slices.Sort(out)
	return out
}

// routeNames reads the RDS names a listener's connection managers ask for.
func routeNames(l *listenerv3.Listener) []string {
	var out []string
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			var hcm hcmv3.HttpConnectionManager
			if f.GetTypedConfig().UnmarshalTo(&hcm) == nil && hcm.GetRds() != nil {
				out = append(out, hcm.GetRds().GetRouteConfigName())
			}
		}
	}
	return out
}

// decoded is one resource of a response.
type decoded struct {
	listener *listenerv3.Listener
	route    *routev3.RouteConfiguration
	cluster  *clusterv3.Cluster
	cla      *endpointv3.ClusterLoadAssignment
}

func decode(a *anypb.Any) (decoded, error) {
	var d decoded
	var err error
	switch a.GetTypeUrl() {
	case resourcev3.ListenerType:
		d.listener = &listenerv3.Listener{}
		err = a.UnmarshalTo(d.listener)
	case resourcev3.RouteType:
		d.route = &routev3.RouteConfiguration{}
		err = a.UnmarshalTo(d.route)
	case resourcev3.ClusterType:
		d.cluster = &clusterv3.Cluster{}
		err = a.UnmarshalTo(d.cluster)
	case resourcev3.EndpointType:
		d.cla = &endpointv3.ClusterLoadAssignment{}
		err = a.UnmarshalTo(d.cla)
	default:
		err = fmt.Errorf("unexpected resource type %s", a.GetTypeUrl())
	}
	return d, err
}

func edsNames(cs []*clusterv3.Cluster) []string {
	var out []string
	for _, c := range cs {
		if c.GetType() == clusterv3.Cluster_EDS {
			out = append(out, c.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// sotwRun is a state-of-the-world ADS session.
type sotwRun struct {
	a        *Agent
	st       discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node     *corev3.Node
	last     map[string]*discoveryv3.DiscoveryResponse // last response per type
	names    map[string][]string                       // subscribed names per type
	versions map[string]string                         // accepted version per type
	sent     bool
}

func (s *sotwRun) send(typeURL string) error {
	req := &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: s.names[typeURL]}
	if !s.sent {
		req.Node = s.node // like Envoy with set_node_on_first_message_only
		s.sent = true
	}
	if last := s.last[typeURL]; last != nil {
		req.VersionInfo = s.versions[typeURL]
		req.ResponseNonce = last.GetNonce()
	}
	return s.st.Send(req)
}

func (s *sotwRun) start() error {
	if err := s.send(resourcev3.ClusterType); err != nil {
		return err
	}
	return s.send(resourcev3.ListenerType)
}

func (s *sotwRun) loop() error {
	for {
		resp, err := s.st.Recv()
		if err != nil {
			return err
		}
		at := time.Now()
		t := resp.GetTypeUrl()
		s.last[t] = resp
		s.versions[t] = resp.GetVersionInfo()
		var ds []decoded
		for _, r := range resp.GetResources() {
			d, err := decode(r)
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		var follow []string // the dependent type whose subscription changed
		switch t {
		case resourcev3.ClusterType:
			var cs []*clusterv3.Cluster
			for _, d := range ds {
				cs = append(cs, d.cluster)
			}
			names := edsNames(cs)
			s.a.update(func(st *State) {
				st.Clusters = names
				for c := range st.Endpoints {
					if !slices.Contains(names, c) {
						delete(st.Endpoints, c)
					}
				}
				st.Versions[t] = resp.GetVersionInfo()
			})
			if !slices.Equal(names, s.names[resourcev3.EndpointType]) {
				s.names[resourcev3.EndpointType] = names
				follow = append(follow, resourcev3.EndpointType)
			}
		case resourcev3.ListenerType:
			var ls, routes []string
			for _, d := range ds {
				ls = append(ls, d.listener.GetName())
				routes = append(routes, routeNames(d.listener)...)
			}
			slices.Sort(routes)
			s.a.update(func(st *State) { st.Listeners = ls; st.Versions[t] = resp.GetVersionInfo() })
			if !slices.Equal(routes, s.names[resourcev3.RouteType]) {
				s.names[resourcev3.RouteType] = routes
				follow = append(follow, resourcev3.RouteType)
			}
		case resourcev3.RouteType:
			s.a.update(func(st *State) {
				for _, d := range ds {
					if s.a.KeepRoutes {
						st.Routes[d.route.GetName()] = d.route
					} else {
						st.Routes[d.route.GetName()] = nil
					}
				}
				st.Versions[t] = resp.GetVersionInfo()
			})
		case resourcev3.EndpointType:
			type got struct {
				name  string
				addrs []string
			}
			var gs []got
			for _, d := range ds {
				gs = append(gs, got{d.cla.GetClusterName(), Addresses(d.cla)})
			}
			if s.a.OnEndpoints != nil {
				for _, g := range gs {
					s.a.OnEndpoints(g.name, g.addrs, at)
				}
			}
			s.a.update(func(st *State) {
				s.a.endpoints += len(gs)
				if !s.a.Discard {
					for _, g := range gs {
						st.Endpoints[g.name] = g.addrs
					}
				}
				st.Versions[t] = resp.GetVersionInfo()
			})
		}
		// ACK, then ask for what the new response points at.
		if err := s.send(t); err != nil {
			return err
		}
		for _, f := range follow {
			if err := s.send(f); err != nil {
				return err
			}
		}
	}
}

// deltaRun is an incremental (delta) ADS session.
type deltaRun struct {
	a          *Agent
	st         discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node       *corev3.Node
	subscribed map[string]map[string]bool
	sent       bool
}

func (d *deltaRun) send(req *discoveryv3.DeltaDiscoveryRequest) error {
	if !d.sent {
		req.Node = d.node
		d.sent = true
	}
	return d.st.Send(req)
}

func (d *deltaRun) start() error {
	if err := d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType}); err != nil {
		return err
	}
	return d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType})
}

// resubscribe moves the subscription of a type to want.
func (d *deltaRun) resubscribe(typeURL string, want []string) error {
	have := d.subscribed[typeURL]
	if have == nil {
		have = map[string]bool{}
		d.subscribed[typeURL] = have
	}
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL}
	wantSet := map[string]bool{}
	for _, n := range want {
		wantSet[n] = true
		if !have[n] {
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
			have[n] = true
		}
	}
	for n := range have {
		if !wantSet[n] {
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
			delete(have, n)
		}
	}
	if len(req.ResourceNamesSubscribe)+len(req.ResourceNamesUnsubscribe) == 0 {
		return nil
	}
	return d.send(req)
}

func (d *deltaRun) loop() error {
	clusters := map[string]bool{}
	listeners := map[string][]string{} // listener -> route names
	for {
		resp, err := d.st.Recv()
		if err != nil {
			return err
		}
		at := time.Now()
		t := resp.GetTypeUrl()
		var ds []decoded
		for _, r := range resp.GetResources() {
			dd, err := decode(r.GetResource())
			if err != nil {
				return err
			}
			ds = append(ds, dd)
		}
		if err := d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}); err != nil {
			return err
		}
		switch t {
		case resourcev3.ClusterType:
			for _, dd := range ds {
				clusters[dd.cluster.GetName()] = dd.cluster.GetType() == clusterv3.Cluster_EDS
			}
			for _, n := range resp.GetRemovedResources() {
				delete(clusters, n)
			}
			var names []string
			for n, eds := range clusters {
				if eds {
					names = append(names, n)
				}
			}
			slices.Sort(names)
			d.a.update(func(st *State) {
				st.Clusters = names
				for c := range st.Endpoints {
					if !clusters[c] {
						delete(st.Endpoints, c)
					}
				}
			})
			if err := d.resubscribe(resourcev3.EndpointType, names); err != nil {
				return err
			}
		case resourcev3.ListenerType:
			for _, dd := range ds {
				listeners[dd.listener.GetName()] = routeNames(dd.listener)
			}
			for _, n := range resp.GetRemovedResources() {
				delete(listeners, n)
			}
			var ls, routes []string
			for l, rs := range listeners {
				ls = append(ls, l)
				routes = append(routes, rs...)
			}
			slices.Sort(ls)
			d.a.update(func(st *State) { st.Listeners = ls })
			if err := d.resubscribe(resourcev3.RouteType, routes); err != nil {
				return err
			}
		case resourcev3.RouteType:
			d.a.update(func(st *State) {
				for _, dd := range ds {
					if d.a.KeepRoutes {
						st.Routes[dd.route.GetName()] = dd.route
					} else {
						st.Routes[dd.route.GetName()] = nil
					}
				}
				for _, n := range resp.GetRemovedResources() {
					delete(st.Routes, n)
				}
			})
		case resourcev3.EndpointType:
			if d.a.OnEndpoints != nil {
				for _, dd := range ds {
					d.a.OnEndpoints(dd.cla.GetClusterName(), Addresses(dd.cla), at)
				}
			}
			d.a.update(func(st *State) {
				d.a.endpoints += len(ds)
				for _, dd := range ds {
					if !d.a.Discard {
						st.Endpoints[dd.cla.GetClusterName()] = Addresses(dd.cla)
					}
				}
				for _, n := range resp.GetRemovedResources() {
					delete(st.Endpoints, n)
				}
			})
		default:
			return errors.New("unexpected type " + t)
		}
	}
}
