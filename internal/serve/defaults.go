package serve

import "time"

// The defaults of each kind of server. docs/servers.md lists them with their reasons; a value
// changed here changes there.

// PublicHTTP bounds the product API and its web console (`api serve`): customers' browsers and
// CLIs, usually through an ingress or load balancer.
func PublicHTTP() HTTP {
	return HTTP{
		// A browser or the CLI sends its headers in one packet; 10 s covers a slow mobile link.
		ReadHeaderTimeout: 10 * time.Second,
		// The largest body is the console's audio upload (32 MiB): 60 s is ~0.6 MB/s. The API's
		// own operations are held to 5 s for their body by the API framework (huma).
		ReadTimeout: 60 * time.Second,
		// The largest answers (the OpenAPI document, a models list) are well under 1 MiB.
		WriteTimeout: 60 * time.Second,
		// The console's live streams write at least every 15 s (a comment when nothing
		// changed): 30 s is twice that.
		StreamWriteTimeout: 30 * time.Second,
		// Longer than the idle timeouts of common proxies in front (60 s), so they close first.
		IdleTimeout: 120 * time.Second,
		// OIDC bearer tokens and the console's session cookies are a few KiB.
		MaxHeaderBytes: 64 << 10,
		// The API's bodies (a job, a key) are small; the API framework refuses past 1 MiB too.
		MaxBodyBytes: 1 << 20,
		// Behind a proxy every client has the proxy's address, so no per-client bound by
		// default (api serve --max-connections-per-client sets one when clients connect
		// directly).
		Conns: Conns{Max: 4096},
	}
}

// AdminHTTP bounds an admin port (xds serve's and keys serve's /healthz, /readyz, /metrics,
// /debug/endpoints, usage; webhook serve's /metrics and probes): the kubelet, Prometheus, the
// product API and the CLI, in the cluster.
func AdminHTTP() HTTP {
	return HTTP{
		ReadHeaderTimeout:  10 * time.Second,
		ReadTimeout:        10 * time.Second, // no route reads a body
		WriteTimeout:       30 * time.Second, // /metrics and /debug/endpoints: a few MiB at most
		StreamWriteTimeout: 30 * time.Second,
		IdleTimeout:        120 * time.Second, // over Prometheus's scrape interval (15-60 s)
		MaxHeaderBytes:     32 << 10,
		MaxBodyBytes:       64 << 10,
		// A handful of known clients; the kubelet opens one connection per probe.
		Conns: Conns{Max: 1024, MaxPerClient: 64},
	}
}

// PeerHTTP bounds the product API's peer port (`api serve --peer-listen`): the other API
// replicas, in the cluster, posting the writes they prepared to the one that pushes
// (productapi/peers.go). Only they reach it (the install's NetworkPolicy, and the peers' token).
func PeerHTTP() HTTP {
	return HTTP{
		ReadHeaderTimeout: 10 * time.Second,
		// A prepared change (its edits) up to the body limit, from inside the cluster.
		ReadTimeout: 60 * time.Second,
		// The answer is a few hundred bytes, written once the writer pushed (counted from
		// its first byte, so the push's wait is not cut).
		WriteTimeout:       30 * time.Second,
		StreamWriteTimeout: 30 * time.Second,
		// Longer than Go's client keeps an idle connection (90 s), so the peer closes first.
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 32 << 10,
		// The peer route reads a prepared change of at most 64 MiB (its edits, base64 in JSON);
		// nothing is read before the peers' token is checked.
		MaxBodyBytes: 64 << 20,
		// A replica holds a connection per write it hands over while the writer pushes: a
		// burst of writes at one replica must not be cut (a cut write is pushed by the replica
		// that got it, racing the writer), while one client cannot take every connection.
		Conns: Conns{Max: 1024, MaxPerClient: 256},
	}
}

// LoopbackHTTP bounds the CLI's sign-in redirect listener on 127.0.0.1: one browser, once.
func LoopbackHTTP() HTTP {
	return HTTP{
		ReadHeaderTimeout:  10 * time.Second,
		ReadTimeout:        10 * time.Second,
		WriteTimeout:       10 * time.Second,
		StreamWriteTimeout: 10 * time.Second,
		IdleTimeout:        30 * time.Second,
		// The browser sends every cookie of 127.0.0.1, whatever the port set it.
		MaxHeaderBytes: 64 << 10,
		MaxBodyBytes:   64 << 10,
		Conns:          Conns{Max: 64}, // every client is 127.0.0.1: no per-client bound
	}
}

// WebhookHTTP bounds the admission webhook's server: its one client is the API server, in the
// cluster (docs/servers.md).
func WebhookHTTP() HTTP {
	return HTTP{
		ReadHeaderTimeout: 10 * time.Second,
		// A review of 7 MiB from inside the cluster; the webhook's guard bounds the body's
		// reading on its own too (GuardOptions.BodyTimeout).
		ReadTimeout: 30 * time.Second,
		// The API server waits at most 30 s for an answer (10 s by default).
		WriteTimeout:       30 * time.Second,
		StreamWriteTimeout: 30 * time.Second,
		// The API server's keep-alive connections, closed by it first (its own idle timeout).
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 64 << 10,
		// An UPDATE's AdmissionReview carries two objects of up to 3 MiB (webhook.MaxRequestBytes).
		MaxBodyBytes: 7 << 20,
		// Each API server opens a connection per admission in flight (HTTP/1.1); the client
		// certificate (--client-ca-file) keeps every other client out in the handshake.
		Conns: Conns{Max: 1024},
	}
}

// GRPCDefaults bounds the gRPC servers (xds serve's ADS, ext_authz and access logs; keys
// serve's ext_authz and health): Envoy's connections, in the cluster.
func GRPCDefaults() GRPC {
	return GRPC{
		// Envoy's messages (discovery requests, a check with the request's headers, a batch of
		// access logs of at most 16 KiB by default) are far below gRPC's usual 4 MiB.
		MaxRecvMsgSize: 4 << 20,
		// Envoy opens another connection when one is full; 1024 checks in flight on one
		// connection is more than an Envoy worker sends.
		MaxConcurrentStreams: 1024,
		// gRPC's metadata from Envoy is a few hundred bytes.
		MaxHeaderListSize: 64 << 10,
		// Up to and with the HTTP/2 preface and settings: Envoy sends them at once.
		ConnectionTimeout: 10 * time.Second,
		// Finds a dead Envoy in under a minute; MinPingInterval is what Envoy may ping at.
		KeepaliveTime:    30 * time.Second,
		KeepaliveTimeout: 10 * time.Second,
		MinPingInterval:  10 * time.Second,
		// A connection with no call for this long is closed (Envoy reconnects at its next
		// call; an ADS stream is a call, so Envoy's xDS connection is never idle).
		MaxConnectionIdle: 5 * time.Minute,
		// A response that cannot be sent for 30 s: the client stopped reading; its connection
		// is closed (an Envoy that reads never comes near it).
		SendTimeout: 30 * time.Second,
		// What a client may send ahead of the server's reading, per stream and per connection.
		WindowSize:     1 << 20,
		ConnWindowSize: 1 << 20,
		Conns:          Conns{Max: 4096, MaxPerClient: 256},
	}
}
