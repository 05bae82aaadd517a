// Package server is inferplane's ADS server: go-control-plane's xDS server (state of the world
// and delta) over two caches. Listeners, routes and clusters live in a snapshot cache with a
// snapshot per Envoy node; endpoints live in one EndpointCache shared by every node, so a
// replica that changes state sends one ClusterLoadAssignment to the nodes that watch it, not
// every endpoint set to every node (the lesson of Contour's move to LinearCache; EndpointCache
// is a LinearCache whose cost per change does not grow with the clusters a node watches).
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/inferplane/inferplane/xds/resources"
)

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// Registerer receives the server's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// LinearCache serves endpoints from go-control-plane's LinearCache instead of EndpointCache
	// (slower with many clusters per node; kept for comparison and as a fallback).
	LinearCache bool
}

// endpointStore is the endpoint cache the server publishes to.
type endpointStore interface {
	cachev3.Cache
	Update(update map[string]*endpointv3.ClusterLoadAssignment, remove []string) error
	Get() map[string]*endpointv3.ClusterLoadAssignment
}

// linearStore adapts go-control-plane's LinearCache.
type linearStore struct{ *cachev3.LinearCache }

func (l linearStore) Update(update map[string]*endpointv3.ClusterLoadAssignment, remove []string) error {
	res := make(map[string]types.Resource, len(update))
	for name, cla := range update {
		res[name] = cla
	}
	return l.UpdateResources(res, remove)
}

func (l linearStore) Get() map[string]*endpointv3.ClusterLoadAssignment {
	out := map[string]*endpointv3.ClusterLoadAssignment{}
	for name, r := range l.GetResources() {
		out[name] = r.(*endpointv3.ClusterLoadAssignment)
	}
	return out
}

// Server serves xDS to Envoy nodes. Publish with SetConfig and UpdateLoadAssignments; serve
// by registering it on a grpc.Server (Register).
type Server struct {
	log       *slog.Logger
	snapshots cachev3.SnapshotCache
	endpoints endpointStore
	xds       serverv3.Server
	metrics   *metrics

	// publish serialises publishers (SetConfig, UpdateLoadAssignments).
	publish sync.Mutex

	// mu guards the node bookkeeping and current; it is held while snapshots are set so a
	// node that connects during a publish ends with the newest snapshot.
	mu      sync.Mutex
	current *cachev3.Snapshot // listeners, routes, clusters; nil until the first SetConfig
	nodes   map[string]int    // node id -> open streams

	streams sync.Map // streamKey -> *stream
}

type stream struct {
	delta bool
	node  string // "" until the first request names it
	// sent is, per type, the nonce and version of the last response (sotw), to answer a NACK.
	sent map[string]sent
}

type sent struct{ nonce, version string }

// New returns a Server whose xDS streams end when ctx ends.
func New(ctx context.Context, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	cpLog := cpLogger{log.With("component", "go-control-plane")}
	s := &Server{
		log:       log,
		snapshots: cachev3.NewSnapshotCache(true, nodeID{}, cpLog),
		endpoints: NewEndpointCache(),
		metrics:   newMetrics(opts.Registerer),
		nodes:     map[string]int{},
	}
	if opts.LinearCache {
		// The prefix makes versions of one server process distinct from another's, so an
		// Envoy that moves to a restarted server is sent its endpoints again.
		s.endpoints = linearStore{cachev3.NewLinearCache(resourcev3.EndpointType,
			cachev3.WithVersionPrefix(strconv.FormatInt(time.Now().UnixNano(), 36)+"-"),
			cachev3.WithLogger(cpLog))}
	}
	mux := &cachev3.MuxCache{
		Classify:      func(r *cachev3.Request) string { return classify(r.GetTypeUrl()) },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return classify(r.GetTypeUrl()) },
		Caches:        map[string]cachev3.Cache{"eds": s.endpoints, "snapshot": s.snapshots},
	}
	s.xds = serverv3.NewServer(ctx, mux, s.callbacks())
	return s
}

func classify(typeURL string) string {
	if typeURL == resourcev3.EndpointType {
		return "eds"
	}
	return "snapshot"
}

// nodeID keys snapshots by the Envoy node's id (every Envoy of a fleet has its own).
type nodeID struct{}

func (nodeID) ID(n *corev3.Node) string { return n.GetId() }

// Register serves the Aggregated Discovery Service (both protocols) on g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
}

// Ready says whether a configuration has been published (Envoy nodes that connect before
// that wait for it).
func (s *Server) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current != nil
}

// Version is the version of the current listeners/routes/clusters snapshot ("" before the
// first SetConfig).
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		return ""
	}
	return s.current.GetVersion(resourcev3.ClusterType)
}

// SetConfig publishes a whole resource set. The set is validated and checked for consistency
// first; on error nothing changes. New and changed load assignments go out before the
// clusters that need them, and stale ones are removed after the clusters that used them, so
// Envoy never waits on a cluster without endpoints.
func (s *Server) SetConfig(ctx context.Context, set *resources.Set) error {
	if err := set.Validate(); err != nil {
		return err
	}
	snap, err := cachev3.NewSnapshot(versionOf(set), map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: toResources(set.Listeners),
		resourcev3.RouteType:    toResources(set.Routes),
		resourcev3.ClusterType:  toResources(set.Clusters),
	})
	if err != nil {
		return err
	}
	s.publish.Lock()
	defer s.publish.Unlock()

	current := s.endpoints.Get()
	update := map[string]*endpointv3.ClusterLoadAssignment{}
	keep := map[string]bool{}
	for _, cla := range set.LoadAssignments {
		keep[cla.ClusterName] = true
		if old, ok := current[cla.ClusterName]; !ok || !proto.Equal(old, cla) {
			update[cla.ClusterName] = cla
		}
	}
	if len(update) > 0 {
		if err := s.endpoints.Update(update, nil); err != nil {
			return fmt.Errorf("publish endpoints: %w", err)
		}
	}

	s.mu.Lock()
	s.current = snap
	var errs []error
	for node := range s.nodes {
		if err := s.snapshots.SetSnapshot(ctx, node, snap); err != nil {
			errs = append(errs, fmt.Errorf("node %q: %w", node, err))
		}
	}
	s.mu.Unlock()

	var stale []string
	for name := range current {
		if !keep[name] {
			stale = append(stale, name)
		}
	}
	if len(stale) > 0 {
		if err := s.endpoints.Update(nil, stale); err != nil {
			errs = append(errs, fmt.Errorf("remove endpoints: %w", err))
		}
	}
	s.metrics.configs.Inc()
	s.metrics.clusters.Set(float64(len(set.Clusters)))
	s.metrics.loadAssignments.Add(float64(len(update)))
	s.log.Info("published configuration", "version", snap.GetVersion(resourcev3.ClusterType),
		"clusters", len(set.Clusters), "changedLoadAssignments", len(update), "removedLoadAssignments", len(stale))
	return errors.Join(errs...)
}

// UpdateLoadAssignments publishes changed endpoints of existing clusters (a replica's health
// changed). Only the nodes that watch those clusters receive them, and only them.
func (s *Server) UpdateLoadAssignments(clas ...*endpointv3.ClusterLoadAssignment) error {
	update := make(map[string]*endpointv3.ClusterLoadAssignment, len(clas))
	for _, cla := range clas {
		if err := cla.ValidateAll(); err != nil {
			return fmt.Errorf("load assignment %q: %w", cla.GetClusterName(), err)
		}
		update[cla.ClusterName] = cla
	}
	s.publish.Lock()
	defer s.publish.Unlock()
	if err := s.endpoints.Update(update, nil); err != nil {
		return err
	}
	s.metrics.loadAssignments.Add(float64(len(update)))
	return nil
}

// LoadAssignments returns the published endpoints, by cluster name.
func (s *Server) LoadAssignments() map[string]*endpointv3.ClusterLoadAssignment {
	return s.endpoints.Get()
}

// Nodes lists the ids of the connected Envoy nodes, sorted.
func (s *Server) Nodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Sorted(maps.Keys(s.nodes))
	if out == nil {
		out = []string{}
	}
	return out
}

// versionOf hashes the deterministic encoding of the snapshot's resources: the same
// configuration has the same version in every server process, so an Envoy that reconnects to
// another replica of the xDS server is not sent what it already has.
func versionOf(set *resources.Set) string {
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	add := func(m proto.Message) {
		b, _ := opts.Marshal(m) // these messages were just validated: marshal cannot fail
		h.Write([]byte(strconv.Itoa(len(b))))
		h.Write(b)
	}
	for _, r := range set.Listeners {
		add(r)
	}
	for _, r := range set.Routes {
		add(r)
	}
	for _, r := range set.Clusters {
		add(r)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func toResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
}
