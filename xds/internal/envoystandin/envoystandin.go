// Package envoystandin is OUR OWN stand-in for Envoy, which cannot run here (there is no envoy
// binary on these machines; xds and auth/envoyfilters run the real one where it exists). It
// takes its whole configuration from the xDS servers over real ADS sessions (adstest) and
// does, per request, what that configuration tells Envoy to do:
//
//   - the ADS stream goes to one xDS server at a time; when it ends, the stand-in reconnects
//     to the next one and keeps serving its last configuration meanwhile, as Envoy does;
//   - the virtual host by Host, its routes (exact paths to the job's cluster, a direct 404
//     for the rest), the unknown host's 404;
//   - ext_authz as the listener's filter and the virtual host's per-filter config say: the
//     check's cluster, its timeout, its retry policy (another host on a failure to reach
//     one), failing closed with status_on_error; the cluster's hosts health-checked over gRPC
//     at its interval and thresholds, none taken while unhealthy (panic mode off);
//   - the job's cluster: round robin over the endpoints of its load assignment, "no healthy
//     upstream" (503) with none, a retry on another replica when one refuses the connection.
//
// What it does not do, and a real Envoy must still prove (docs/xds.md): TLS and SDS, outlier
// detection, circuit breakers, the usage Lua filter and access logs, DNS clusters, HTTP/2 to
// clients, its own warming rules, and anything about its performance.
package envoystandin

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferplane/inferplane/xds/internal/adstest"
)

// Options configure a stand-in.
type Options struct {
	// XDS are the xDS servers' gRPC addresses, tried in turn.
	XDS    []string
	NodeID string
	Delta  bool
	Logger *slog.Logger
}

// Envoy is a running stand-in.
type Envoy struct {
	opts   Options
	log    *slog.Logger
	srv    *http.Server
	lis    net.Listener
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	agent     *adstest.Agent // the current ADS session
	server    string         // its xDS server
	last      adstest.State  // the last complete configuration
	haveLast  bool
	sessions  int
	checks    map[string]*checkHost // key check hosts, by address
	rr        map[string]int        // round robin, by cluster
	transport *http.Transport
}

// Start connects to the xDS servers and listens on 127.0.0.1.
func Start(opts Options) (*Envoy, error) {
	if len(opts.XDS) == 0 {
		return nil, errors.New("envoy stand-in: no xDS server")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Envoy{opts: opts, log: cmp.Or(opts.Logger, slog.Default()), lis: lis, cancel: cancel, done: make(chan struct{}),
		checks: map[string]*checkHost{}, rr: map[string]int{},
		transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(lis) }()
	go e.ads(ctx)
	go e.healthChecks(ctx)
	return e, nil
}

// URL is the listener's base URL.
func (e *Envoy) URL() string { return "http://" + e.lis.Addr().String() }

// Close stops everything.
func (e *Envoy) Close() {
	e.cancel()
	<-e.done
	_ = e.srv.Close()
	e.transport.CloseIdleConnections()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.checks {
		h.close()
	}
}

// Server is the xDS server of the current session and how many sessions there were.
func (e *Envoy) Server() (string, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.server, e.sessions
}

// ads keeps one ADS session at a time, moving to the next server when one ends.
func (e *Envoy) ads(ctx context.Context) {
	defer close(e.done)
	for i := 0; ctx.Err() == nil; i++ {
		addr := e.opts.XDS[i%len(e.opts.XDS)]
		if err := e.session(ctx, addr); err != nil && ctx.Err() == nil {
			e.log.Debug("envoy stand-in: xDS session ended", "server", addr, "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // Envoy's reconnect backoff starts at 500 ms; shorter keeps tests short
		}
	}
}

func (e *Envoy) session(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := &adstest.Agent{NodeID: cmp.Or(e.opts.NodeID, "envoy-standin"), Delta: e.opts.Delta, KeepRoutes: true, KeepResources: true}
	if err := adstest.Start(sctx, conn, a); err != nil {
		return err
	}
	e.mu.Lock()
	e.agent, e.server = a, addr
	e.sessions++
	e.mu.Unlock()
	<-a.Done()
	e.mu.Lock()
	if st := a.Snapshot(); complete(st) {
		e.last, e.haveLast = st, true
	}
	e.agent = nil
	e.mu.Unlock()
	return a.Err()
}

// complete says a configuration can serve: a listener, its routes, every EDS cluster's
// endpoints.
func complete(st adstest.State) bool {
	if len(st.ListenerResources) == 0 {
		return false
	}
	for _, l := range st.ListenerResources {
		for _, name := range adstest.RouteNames(l) {
			if st.Routes[name] == nil {
				return false
			}
		}
	}
	for _, c := range st.Clusters {
		if _, ok := st.Endpoints[c]; !ok {
			return false
		}
	}
	return true
}

// config is the configuration requests are served with: the current session's once it is
// complete, else the last complete one.
func (e *Envoy) config() (adstest.State, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.agent != nil {
		if st := e.agent.Snapshot(); complete(st) {
			e.last, e.haveLast = st, true
			return st, true
		}
	}
	return e.last, e.haveLast
}

// WaitFor waits until cond holds for the configuration requests are served with.
func (e *Envoy) WaitFor(ctx context.Context, cond func(adstest.State) bool) error {
	for {
		if st, ok := e.config(); ok && cond(st) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ServeHTTP routes one request as the configuration says.
func (e *Envoy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st, ok := e.config()
	if !ok {
		http.Error(w, "no configuration yet", http.StatusServiceUnavailable)
		return
	}
	hcm, routes, ok := httpListener(st)
	if !ok {
		http.Error(w, "no HTTP listener", http.StatusServiceUnavailable)
		return
	}
	host, _, _ := strings.Cut(r.Host, ":")
	vh := virtualHost(routes, host)
	if vh == nil {
		http.Error(w, "no virtual host", http.StatusNotFound)
		return
	}
	route := matchRoute(vh, r.URL.Path)
	if route == nil {
		http.NotFound(w, r)
		return
	}
	if dr := route.GetDirectResponse(); dr != nil {
		w.WriteHeader(int(dr.GetStatus()))
		_, _ = io.WriteString(w, dr.GetBody().GetInlineString())
		return
	}
	if !e.authorize(w, r, st, hcm, vh) {
		return
	}
	e.forward(w, r, st, vh, route.GetRoute().GetCluster())
}

// httpListener is the plain listener's connection manager and its routes.
func httpListener(st adstest.State) (*hcmv3.HttpConnectionManager, *routev3.RouteConfiguration, bool) {
	for _, l := range st.ListenerResources {
		if l.GetListenerFilters() != nil { // the TLS listener has a TLS inspector
			continue
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) == nil && hcm.GetRds() != nil {
					if rc := st.Routes[hcm.GetRds().GetRouteConfigName()]; rc != nil {
						return &hcm, rc, true
					}
				}
			}
		}
	}
	return nil, nil, false
}

// virtualHost is the virtual host whose domains name host, else the "*" one.
func virtualHost(rc *routev3.RouteConfiguration, host string) *routev3.VirtualHost {
	var wildcard *routev3.VirtualHost
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			switch {
			case strings.EqualFold(d, host):
				return vh
			case d == "*":
				wildcard = vh
			}
		}
	}
	return wildcard
}

// matchRoute is the first route whose exact path or prefix matches.
func matchRoute(vh *routev3.VirtualHost, path string) *routev3.Route {
	for _, rt := range vh.GetRoutes() {
		m := rt.GetMatch()
		switch {
		case m.GetPath() != "" && m.GetPath() == path:
			return rt
		case m.GetPath() == "" && m.GetPrefix() != "" && strings.HasPrefix(path, m.GetPrefix()):
			return rt
		}
	}
	return nil
}

// forward proxies the request to the cluster's endpoints, round robin, retrying a refused
// connection on another one as the virtual host's retry policy allows.
func (e *Envoy) forward(w http.ResponseWriter, r *http.Request, st adstest.State, vh *routev3.VirtualHost, cluster string) {
	eps := st.Endpoints[cluster]
	if len(eps) == 0 {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "no healthy upstream")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	retries := int(vh.GetRetryPolicy().GetNumRetries().GetValue())
	tried := map[string]bool{}
	var lastErr error
	for attempt := 0; attempt <= retries; attempt++ {
		addr := e.pick(cluster, eps, tried)
		tried[addr] = true
		out := r.Clone(r.Context())
		out.RequestURI, out.URL.Scheme, out.URL.Host = "", "http", addr
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		resp, err := e.transport.RoundTrip(out)
		if err != nil {
			lastErr = err
			if isConnectFailure(err) {
				continue
			}
			break
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		flushCopy(w, resp.Body)
		return
	}
	e.log.Warn("envoy stand-in: no upstream answered", "cluster", cluster, "error", lastErr)
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, "upstream connect error or disconnect/reset before headers: %v", lastErr)
}

// pick is the next endpoint of a cluster, round robin, avoiding those tried already.
func (e *Envoy) pick(cluster string, eps []string, tried map[string]bool) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for range eps {
		i := e.rr[cluster] % len(eps)
		e.rr[cluster]++
		if !tried[eps[i]] {
			return eps[i]
		}
	}
	return eps[0]
}

func isConnectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func flushCopy(w http.ResponseWriter, body io.Reader) {
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32*1024)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
