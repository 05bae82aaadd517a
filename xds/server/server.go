// Package server is inferplane's ADS server: go-control-plane's xDS server (state of the world
// and delta) over two caches, both shared by every Envoy node. Listeners, routes and clusters
// live in a configCache that encodes each resource once for all nodes; endpoints live in an
// EndpointCache, so a replica that changes state sends one ClusterLoadAssignment to the nodes
// that watch it, not every endpoint set to every node (the lesson of Contour's move to
// LinearCache; EndpointCache is a LinearCache whose cost per change does not grow with the
// clusters a node watches). Large responses share a budget of bytes in flight, so a fleet
// that connects at once does not hold its whole configuration in memory once per node.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
	// Endpoints is the endpoint cache the server publishes to; nil is an EndpointCache that
	// shares the response budget. Benchmarks put go-control-plane's LinearCache here to compare.
	Endpoints EndpointStore
	// ResponseBudget bounds the bytes of large responses (64 KiB or more: a whole route
	// configuration, every cluster, every endpoint set) sent to Envoy nodes and not yet
	// acknowledged; nodes beyond it wait their turn. 0: 16 MiB; negative: no bound.
	ResponseBudget int64
}

// EndpointStore is an endpoint cache the server can publish to (EndpointCache is one).
type EndpointStore interface {
	cachev3.Cache
	Update(update map[string]*endpointv3.ClusterLoadAssignment, remove []string) error
	Get() map[string]*endpointv3.ClusterLoadAssignment
}

// Server serves xDS to Envoy nodes. Publish with SetConfig and UpdateLoadAssignments; serve
// by registering it on a grpc.Server (Register).
type Server struct {
	log       *slog.Logger
	config    *configCache
	secrets   *configCache // TLS certificates (SDS)
	endpoints EndpointStore
	xds       serverv3.Server
	names     *nameTable
	metrics   *metrics

	// publish serialises publishers (SetConfig, UpdateLoadAssignments).
	publish sync.Mutex

	mu    sync.Mutex
	nodes map[string]int // node id -> open streams

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
	limit := opts.ResponseBudget
	if limit == 0 {
		limit = defaultBudget
	}
	b := newBudget(limit)
	eps := NewEndpointCache()
	eps.budget = b
	s := &Server{
		log:       log,
		config:    newConfigCache(),
		secrets:   newSecretCache(),
		endpoints: eps,
		names:     newNameTable(),
		metrics:   newMetrics(opts.Registerer),
		nodes:     map[string]int{},
	}
	s.config.budget = b
	s.secrets.budget = b
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "inferplane_xds_response_bytes_in_flight",
				Help: "Bytes of large responses sent to Envoy nodes and not yet acknowledged (bounded by the response budget).",
			}, func() float64 { used, _ := b.inFlight(); return float64(used) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "inferplane_xds_responses_waiting",
				Help: "Large responses waiting for room in the response budget.",
			}, func() float64 { _, waiting := b.inFlight(); return float64(waiting) }),
		)
	}
	if opts.Endpoints != nil {
		s.endpoints = opts.Endpoints
	}
	mux := &cachev3.MuxCache{
		Classify:      func(r *cachev3.Request) string { return classify(r.GetTypeUrl()) },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return classify(r.GetTypeUrl()) },
		Caches:        map[string]cachev3.Cache{"eds": s.endpoints, "config": s.config, "sds": s.secrets},
	}
	s.xds = serverv3.NewServer(ctx, mux, s.callbacks())
	return s
}

func classify(typeURL string) string {
	switch typeURL {
	case resourcev3.EndpointType:
		return "eds"
	case resourcev3.SecretType:
		return "sds"
	}
	return "config"
}

// Register serves the Aggregated Discovery Service (both protocols) on g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, adsService{s.xds, s.names})
}

// Ready says whether a configuration has been published (Envoy nodes that connect before
// that wait for it).
func (s *Server) Ready() bool { return s.config.Version() != "" }

// Version is the version of the current listeners, routes and clusters ("" before the first
// SetConfig).
func (s *Server) Version() string { return s.config.Version() }

// SetConfig publishes a whole resource set. The set is validated and checked for consistency
// first; on error nothing changes. New and changed load assignments go out before the
// clusters that need them, and stale ones are removed after the clusters that used them, so
// Envoy never waits on a cluster without endpoints.
func (s *Server) SetConfig(ctx context.Context, set *resources.Set) error {
	if err := set.Validate(); err != nil {
		return err
	}
	cfg, err := encodeConfig(set)
	if err != nil {
		return err
	}
	secrets, err := encodeSecrets(set)
	if err != nil {
		return err
	}
	s.publish.Lock()
	defer s.publish.Unlock()

	// Certificates first: a listener that names a new one finds it.
	if s.secrets.Version() != secrets.version {
		s.secrets.publish(secrets)
	}

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

	s.config.publish(cfg)

	var errs []error
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
	s.log.Info("published configuration", "version", cfg.version,
		"clusters", len(set.Clusters), "changedLoadAssignments", len(update), "removedLoadAssignments", len(stale),
		"certificates", len(set.Secrets))
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
