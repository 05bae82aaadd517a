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
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
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
	// Secrets maps an SDS secret (a TLS certificate) to its certificate chain (PEM).
	Secrets map[string][]byte
	// Endpoints maps a cluster to its endpoints' addresses ("ip:port"), sorted.
	Endpoints map[string][]string
	// Versions are the last accepted versions per type (state of the world only).
	Versions map[string]string
	// ListenerResources and ClusterResources are the resources themselves, by name (with
	// Agent.KeepResources only).
	ListenerResources map[string]*listenerv3.Listener
	ClusterResources  map[string]*clusterv3.Cluster
}

// Agent is one Envoy-like ADS client.
type Agent struct {
	NodeID string
	Delta  bool
	// OnEndpoints, when set, is called on the receiving goroutine for every load assignment
	// received, with the time it arrived.
	OnEndpoints func(cluster string, addrs []string, at time.Time)
	// KeepRoutes stores route configurations in State; KeepResources the listeners and
	// clusters too (a stand-in for Envoy routes by them).
	KeepRoutes    bool
	KeepResources bool
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
	a.state = State{Routes: map[string]*routev3.RouteConfiguration{}, Endpoints: map[string][]string{}, Versions: map[string]string{},
		Secrets: map[string][]byte{}, ListenerResources: map[string]*listenerv3.Listener{}, ClusterResources: map[string]*clusterv3.Cluster{}}
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

		ListenerResources: maps.Clone(a.state.ListenerResources),
		ClusterResources:  maps.Clone(a.state.ClusterResources),
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

// RouteNames reads the RDS names a listener's connection managers ask for.
func RouteNames(l *listenerv3.Listener) []string { return routeNames(l) }

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

// secretNames reads the SDS secrets a listener's TLS filter chains ask for.
func secretNames(l *listenerv3.Listener) []string {
	var out []string
	for _, fc := range l.GetFilterChains() {
		var ctx tlsv3.DownstreamTlsContext
		if ts := fc.GetTransportSocket(); ts != nil && ts.GetTypedConfig().UnmarshalTo(&ctx) == nil {
			for _, sds := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				out = append(out, sds.GetName())
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
	secret   *tlsv3.Secret
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
	case resourcev3.SecretType:
		d.secret = &tlsv3.Secret{}
		err = a.UnmarshalTo(d.secret)
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
		follow := s.apply(t, ds, at)
		s.a.update(func(st *State) { st.Versions[t] = resp.GetVersionInfo() })
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

// apply takes a response's resources (the type's whole state) and returns the dependent
// types whose subscription changed.
func (s *sotwRun) apply(t string, ds []decoded, at time.Time) (follow []string) {
	subscribe := func(typeURL string, names []string) {
		slices.Sort(names)
		names = slices.Compact(names)
		if !slices.Equal(names, s.names[typeURL]) {
			s.names[typeURL] = names
			follow = append(follow, typeURL)
		}
	}
	switch t {
	case resourcev3.ClusterType:
		names := s.a.setClusters(ds, nil, true)
		subscribe(resourcev3.EndpointType, names)
	case resourcev3.ListenerType:
		var ls, routes, secrets []string
		for _, d := range ds {
			ls = append(ls, d.listener.GetName())
			routes = append(routes, routeNames(d.listener)...)
			secrets = append(secrets, secretNames(d.listener)...)
		}
		s.a.update(func(st *State) {
			st.Listeners = ls
			if s.a.KeepResources {
				st.ListenerResources = map[string]*listenerv3.Listener{}
				for _, d := range ds {
					st.ListenerResources[d.listener.GetName()] = d.listener
				}
			}
		})
		subscribe(resourcev3.RouteType, routes)
		subscribe(resourcev3.SecretType, secrets)
	case resourcev3.RouteType:
		s.a.setRoutes(ds, nil)
	case resourcev3.EndpointType:
		s.a.setEndpoints(ds, nil, at)
	case resourcev3.SecretType:
		s.a.setSecrets(ds, nil)
	}
	return follow
}

// setClusters records clusters (all of them when full, else the changes and removed ones)
// and returns the EDS clusters, sorted.
func (a *Agent) setClusters(ds []decoded, removed []string, full bool) []string {
	var names []string
	a.update(func(st *State) {
		eds := map[string]bool{}
		if !full {
			for _, c := range st.Clusters {
				eds[c] = true
			}
		}
		for _, d := range ds {
			eds[d.cluster.GetName()] = d.cluster.GetType() == clusterv3.Cluster_EDS
		}
		for _, n := range removed {
			delete(eds, n)
		}
		if a.KeepResources {
			if full {
				st.ClusterResources = map[string]*clusterv3.Cluster{}
			}
			for _, d := range ds {
				st.ClusterResources[d.cluster.GetName()] = d.cluster
			}
			for _, n := range removed {
				delete(st.ClusterResources, n)
			}
		}
		for n, ok := range eds {
			if ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		st.Clusters = names
		for c := range st.Endpoints {
			if !eds[c] {
				delete(st.Endpoints, c)
			}
		}
	})
	return names
}

func (a *Agent) setRoutes(ds []decoded, removed []string) {
	a.update(func(st *State) {
		for _, d := range ds {
			if a.KeepRoutes {
				st.Routes[d.route.GetName()] = d.route
			} else {
				st.Routes[d.route.GetName()] = nil
			}
		}
		for _, n := range removed {
			delete(st.Routes, n)
		}
	})
}

func (a *Agent) setEndpoints(ds []decoded, removed []string, at time.Time) {
	if a.OnEndpoints != nil {
		for _, d := range ds {
			a.OnEndpoints(d.cla.GetClusterName(), Addresses(d.cla), at)
		}
	}
	a.update(func(st *State) {
		a.endpoints += len(ds)
		for _, d := range ds {
			if !a.Discard {
				st.Endpoints[d.cla.GetClusterName()] = Addresses(d.cla)
			}
		}
		for _, n := range removed {
			delete(st.Endpoints, n)
		}
	})
}

func (a *Agent) setSecrets(ds []decoded, removed []string) {
	a.update(func(st *State) {
		for _, d := range ds {
			st.Secrets[d.secret.GetName()] = d.secret.GetTlsCertificate().GetCertificateChain().GetInlineBytes()
		}
		for _, n := range removed {
			delete(st.Secrets, n)
		}
	})
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
	listeners := map[string]*listenerv3.Listener{}
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
		removed := resp.GetRemovedResources()
		switch t {
		case resourcev3.ClusterType:
			err = d.resubscribe(resourcev3.EndpointType, d.a.setClusters(ds, removed, false))
		case resourcev3.ListenerType:
			err = d.listenersChanged(listeners, ds, removed)
		case resourcev3.RouteType:
			d.a.setRoutes(ds, removed)
		case resourcev3.EndpointType:
			d.a.setEndpoints(ds, removed, at)
		case resourcev3.SecretType:
			d.a.setSecrets(ds, removed)
		default:
			return errors.New("unexpected type " + t)
		}
		if err != nil {
			return err
		}
	}
}

// listenersChanged keeps the listeners and follows them to their routes and secrets.
func (d *deltaRun) listenersChanged(listeners map[string]*listenerv3.Listener, ds []decoded, removed []string) error {
	for _, dd := range ds {
		listeners[dd.listener.GetName()] = dd.listener
	}
	for _, n := range removed {
		delete(listeners, n)
	}
	var ls, routes, secrets []string
	for name, l := range listeners {
		ls = append(ls, name)
		routes = append(routes, routeNames(l)...)
		secrets = append(secrets, secretNames(l)...)
	}
	slices.Sort(ls)
	d.a.update(func(st *State) {
		st.Listeners = ls
		if d.a.KeepResources {
			st.ListenerResources = maps.Clone(listeners)
		}
	})
	if err := d.resubscribe(resourcev3.RouteType, routes); err != nil {
		return err
	}
	return d.resubscribe(resourcev3.SecretType, secrets)
}
