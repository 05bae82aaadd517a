package server

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

func (s *Server) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, _ string) error {
			s.streams.Store(streamKey{false, id}, &stream{sent: map[string]sent{}})
			s.metrics.streams.WithLabelValues("sotw").Inc()
			return nil
		},
		StreamClosedFunc: func(id int64, node *corev3.Node) {
			s.closeStream(streamKey{false, id})
			s.metrics.streams.WithLabelValues("sotw").Dec()
		},
		DeltaStreamOpenFunc: func(_ context.Context, id int64, _ string) error {
			s.streams.Store(streamKey{true, id}, &stream{delta: true})
			s.metrics.streams.WithLabelValues("delta").Inc()
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, node *corev3.Node) {
			s.closeStream(streamKey{true, id})
			s.metrics.streams.WithLabelValues("delta").Dec()
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			st := s.stream(streamKey{false, id})
			if st == nil {
				return nil
			}
			s.attach(st, req.GetNode())
			if req.GetErrorDetail() != nil {
				s.nack(st, req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
				// The request carries the last version the node accepted, which differs from
				// the current one, so the cache would resend the rejected version at once and
				// the node would reject it again, forever. Treat the NACK as a request at the
				// rejected version instead: the node keeps its good configuration and gets the
				// next version when there is one.
				if last, ok := st.sent[req.GetTypeUrl()]; ok && last.nonce == req.GetResponseNonce() {
					req.VersionInfo = last.version
				}
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			if st := s.stream(streamKey{false, id}); st != nil {
				st.sent[resp.GetTypeUrl()] = sent{nonce: resp.GetNonce(), version: resp.GetVersionInfo()}
			}
			s.metrics.responses.WithLabelValues(shortType(resp.GetTypeUrl())).Inc()
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			st := s.stream(streamKey{true, id})
			if st == nil {
				return nil
			}
			s.attach(st, req.GetNode())
			if req.GetErrorDetail() != nil {
				// Delta tracks versions per resource: a NACK changes nothing the server sent,
				// so nothing is resent until the resource changes.
				s.nack(st, req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
			}
			return nil
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			s.metrics.responses.WithLabelValues(shortType(resp.GetTypeUrl())).Inc()
		},
	}
}

// streamKey identifies a stream: go-control-plane numbers state-of-the-world and delta streams
// separately, so both have a stream 1.
type streamKey struct {
	delta bool
	id    int64
}

func (s *Server) stream(key streamKey) *stream {
	v, ok := s.streams.Load(key)
	if !ok {
		return nil
	}
	return v.(*stream)
}

// attach records the stream's node on its first request. (Every node is served the same
// configuration: nothing is kept per node but this count.)
func (s *Server) attach(st *stream, node *corev3.Node) {
	if st.node != "" || node == nil {
		return
	}
	st.node = node.GetId()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[st.node]++
	s.metrics.nodes.Set(float64(len(s.nodes)))
	s.log.Info("envoy node connected", "node", st.node, "cluster", node.GetCluster(), "delta", st.delta)
}

// closeStream forgets a node when its last stream closes, so nodes that come and go (Envoy
// pods rolled over) do not accumulate.
func (s *Server) closeStream(key streamKey) {
	st := s.stream(key)
	s.streams.Delete(key)
	if st == nil || st.node == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[st.node]--
	if s.nodes[st.node] <= 0 {
		delete(s.nodes, st.node)
		s.log.Info("envoy node disconnected", "node", st.node)
	}
	s.metrics.nodes.Set(float64(len(s.nodes)))
}

func (s *Server) nack(st *stream, typeURL, nonce, message string) {
	s.metrics.nacks.WithLabelValues(shortType(typeURL)).Inc()
	s.log.Warn("envoy rejected a configuration; it keeps its previous one",
		"node", st.node, "type", shortType(typeURL), "nonce", nonce, "error", message)
}
