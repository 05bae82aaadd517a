// Package envoystandin is OUR OWN stand-in for Envoy, which cannot run here (no envoy binary
// on these machines; auth/envoyfilters and xds run the real one where it exists). It does, per
// request, what the configuration the gateway gives Envoy does, with the gateway's real
// services: the endpoint by Host (from a gateway's /debug/endpoints), the ext_authz check over
// gRPC (round robin over several gateway replicas, as Envoy's cluster of the key check would),
// its denial answered as Envoy answers it, its upstream headers, removed headers and response
// headers applied; the request proxied to a serving replica and streamed back unbuffered; the
// real usage.lua run (in gopher-lua, with a coroutine feeding it body chunks as they pass, as
// Envoy's bodyChunks() does) and stopped where the stream stops (client abort, replica gone);
// and one gRPC access-log entry per request, with the ext_authz and usage metadata, on one
// StreamAccessLogs stream to one gateway replica, as each Envoy keeps one.
//
// Only the OpenAI paths of the endpoint's runtime are routed (else 404), as Envoy's routes.
// Tests start it with Start; the local demo (hack/demo), which is not a test, with Listen.
//
// What it does not do: Envoy's buffering of access-log entries (it sends each at once), its
// retries, circuit breakers, TLS.
package envoystandin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	lua "github.com/yuin/gopher-lua"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/internal/envoymeta"
	"github.com/inferplane/inferplane/usage/envoylua"
)

// Options say which gateway services the stand-in uses.
type Options struct {
	// Admin is a gateway replica's admin base URL (http://host:port), for /debug/endpoints.
	Admin string
	// Authz are the gRPC addresses of the key check, called in turn.
	Authz []string
	// ALS is the gRPC address of the access-log service this stand-in streams to.
	ALS  string
	Node string
}

// Proxy is a running stand-in.
type Proxy struct {
	opt   Options
	authz []authv3.AuthorizationClient
	next  atomic.Uint64
	srv   *http.Server
	lis   net.Listener
	conns []*grpc.ClientConn
	stop  func() // ends the access-log stream

	alsMu sync.Mutex
	als   accesslogv3.AccessLogService_StreamAccessLogsClient
	sent  bool // the stream's first message (with the node) is sent
}

// TB is what Start needs of a test.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(string, ...any)
}

// Start runs a stand-in on 127.0.0.1 until the test ends; URL is where clients send requests.
func Start(t TB, o Options) *Proxy {
	t.Helper()
	p, err := Listen("", o)
	if err != nil {
		t.Fatalf("envoy stand-in: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Listen runs a stand-in on addr (empty: a free port of 127.0.0.1) until Close, for a program
// that is not a test (hack/demo). Without o.ALS it sends no access-log entries.
func Listen(addr string, o Options) (*Proxy, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	p := &Proxy{opt: o, stop: func() {}}
	dial := func(a string) (*grpc.ClientConn, error) {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", a, err)
		}
		p.conns = append(p.conns, c)
		return c, nil
	}
	for _, a := range o.Authz {
		c, err := dial(a)
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		p.authz = append(p.authz, authv3.NewAuthorizationClient(c))
	}
	if o.ALS != "" {
		c, err := dial(o.ALS)
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := accesslogv3.NewAccessLogServiceClient(c).StreamAccessLogs(ctx)
		if err != nil {
			cancel()
			_ = p.Close()
			return nil, fmt.Errorf("access log stream: %w", err)
		}
		p.als, p.stop = stream, func() { _, _ = stream.CloseAndRecv(); cancel() }
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	p.lis, p.srv = lis, &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

// Close stops serving and ends the access-log stream.
func (p *Proxy) Close() error {
	var err error
	if p.srv != nil {
		err = p.srv.Close()
	}
	p.alsMu.Lock()
	p.stop()
	p.alsMu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	return err
}

// URL is the stand-in's base URL.
func (p *Proxy) URL() string { return "http://" + p.lis.Addr().String() }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ep, ok := p.endpoint(r.Host)
	if !ok {
		jsonError(w, http.StatusNotFound, "no endpoint for host "+r.Host)
		return
	}
	// Envoy's routes match only the OpenAI paths of the job's runtime.
	if paths, _ := gatewayv1.RuntimePaths(ep.Runtime); !slices.Contains(paths, r.URL.Path) {
		jsonError(w, http.StatusNotFound, "path "+r.URL.Path+" is not served by this endpoint")
		return
	}
	var authzMD *structpb.Struct
	var respHeaders []*corev3.HeaderValueOption
	if ep.RequireAPIKey {
		tenant, job, _ := strings.Cut(ep.Endpoint, "/")
		okResp, done := p.check(w, r, tenant, job)
		if done {
			return
		}
		authzMD, respHeaders = okResp.GetDynamicMetadata(), okResp.GetResponseHeadersToAdd()
	}
	var upstream string
	for _, rep := range ep.Replicas {
		if rep.Serving {
			upstream = rep.Address
			break
		}
	}
	if upstream == "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "no healthy upstream")
		return
	}
	code, md := p.proxy(w, r, upstream, respHeaders)
	p.log(r, start, code, authzMD, md)
}

// endpoint finds host's endpoint in the gateway's current state.
func (p *Proxy) endpoint(host string) (gatewayv1.EndpointStatus, bool) {
	resp, err := http.Get(p.opt.Admin + gatewayv1.DebugEndpointsPath)
	if err != nil {
		return gatewayv1.EndpointStatus{}, false
	}
	defer resp.Body.Close()
	var debug gatewayv1.Debug
	if json.NewDecoder(resp.Body).Decode(&debug) != nil {
		return gatewayv1.EndpointStatus{}, false
	}
	host, _, _ = strings.Cut(host, ":")
	for _, e := range debug.Endpoints {
		if e.Host == host {
			return e, true
		}
	}
	return gatewayv1.EndpointStatus{}, false
}

// check asks the key check as Envoy's ext_authz filter does, and answers a denial itself
// (done is then true).
func (p *Proxy) check(w http.ResponseWriter, r *http.Request, tenant, job string) (*authv3.OkHttpResponse, bool) {
	headers := map[string]string{":authority": r.Host, ":path": r.URL.Path, ":method": r.Method}
	for k := range r.Header {
		headers[strings.ToLower(k)] = r.Header.Get(k)
	}
	c := p.authz[p.next.Add(1)%uint64(len(p.authz))]
	resp, err := c.Check(r.Context(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{extauthz.ContextTenant: tenant, extauthz.ContextJob: job},
		Request:           &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Headers: headers}},
	}})
	if err != nil {
		// Envoy's failure_mode_allow is off: a broken key check denies (403).
		jsonError(w, http.StatusForbidden, "ext_authz: "+err.Error())
		return nil, true
	}
	if d := resp.GetDeniedResponse(); d != nil {
		setHeaders(w.Header(), d.GetHeaders())
		w.WriteHeader(int(d.GetStatus().GetCode()))
		_, _ = io.WriteString(w, d.GetBody())
		return nil, true
	}
	ok := resp.GetOkResponse()
	for _, h := range ok.GetHeadersToRemove() {
		r.Header.Del(h)
	}
	setHeaders(r.Header, ok.GetHeaders())
	ok.DynamicMetadata = resp.GetDynamicMetadata()
	return ok, false
}

// proxy sends the request to the replica and streams the answer back, feeding usage.lua
// chunk by chunk; it returns the status sent (0 when none) and the metadata the script set.
func (p *Proxy) proxy(w http.ResponseWriter, r *http.Request, upstream string, respHeaders []*corev3.HeaderValueOption) (int, map[string]float64) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		return 0, nil
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return http.StatusServiceUnavailable, nil
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	setHeaders(w.Header(), respHeaders)
	w.WriteHeader(resp.StatusCode)
	script := newUsageScript(resp.StatusCode, resp.Header.Get("Content-Type"))
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			script.chunk(buf[:n])
			if _, err := w.Write(buf[:n]); err != nil {
				break // the client went away: Envoy resets the upstream stream too
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if rerr != nil {
			break // end of the answer, or the replica went away mid-stream
		}
	}
	script.close()
	return resp.StatusCode, script.metadata()
}

// log sends one access-log entry for the request, as Envoy's gRPC access logger does.
func (p *Proxy) log(r *http.Request, start time.Time, code int, authz *structpb.Struct, md map[string]float64) {
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	if authz != nil {
		meta.FilterMetadata[envoymeta.AuthzNamespace] = authz
	}
	if len(md) > 0 {
		u := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range md {
			u.Fields[k] = structpb.NewNumberValue(v)
		}
		meta.FilterMetadata[envoymeta.UsageNamespace] = u
	}
	took := time.Since(start)
	e := &datav3.HTTPAccessLogEntry{
		CommonProperties: &datav3.AccessLogCommon{
			StartTime: timestamppb.New(start), Duration: durationpb.New(took),
			TimeToLastDownstreamTxByte: durationpb.New(took), Metadata: meta,
		},
		Request:  &datav3.HTTPRequestProperties{Authority: r.Host, Path: r.URL.Path},
		Response: &datav3.HTTPResponseProperties{ResponseCode: wrapperspb.UInt32(uint32(code))},
	}
	msg := &accesslogv3.StreamAccessLogsMessage{LogEntries: &accesslogv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &accesslogv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: []*datav3.HTTPAccessLogEntry{e}}}}
	p.alsMu.Lock()
	defer p.alsMu.Unlock()
	if p.als == nil {
		return
	}
	if !p.sent {
		msg.Identifier = &accesslogv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: p.opt.Node}, LogName: "inferplane"}
		p.sent = true
	}
	_ = p.als.Send(msg)
}

func setHeaders(h http.Header, hvs []*corev3.HeaderValueOption) {
	for _, hv := range hvs {
		h.Set(hv.GetHeader().GetKey(), hv.GetHeader().GetValue())
	}
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": "not_found"}})
}

// usageScript is usage.lua running in its own goroutine, its bodyChunks() iterator waiting
// for each chunk as it passes, as Envoy runs it.
type usageScript struct {
	chunks chan string
	done   chan struct{}
	mu     sync.Mutex
	md     map[string]float64
}

// handleLua is the part of Envoy's stream handle usage.lua uses: headers(), a bodyChunks()
// iterator (next_chunk waits for the next chunk; nil at the end) and
// streamInfo():dynamicMetadata():set().
const handleLua = `
function standin_run(status, ctype)
  local handle = {}
  function handle:headers()
    return { get = function(_, k) if k == ":status" then return status elseif k == "content-type" then return ctype end return nil end }
  end
  function handle:bodyChunks()
    return function()
      local s = standin_next_chunk()
      if s == nil then return nil end
      return { length = function() return #s end, getBytes = function(_, i, n) return string.sub(s, i + 1, i + n) end }
    end
  end
  function handle:streamInfo()
    return { dynamicMetadata = function() return { set = function(_, ns, k, v) standin_set(ns, k, v) end } end }
  end
  envoy_on_response(handle)
end
`

func newUsageScript(status int, ctype string) *usageScript {
	s := &usageScript{chunks: make(chan string), done: make(chan struct{}), md: map[string]float64{}}
	L := lua.NewState()
	if err := L.DoString(envoylua.Script + handleLua); err != nil {
		panic("usage.lua: " + err.Error())
	}
	L.SetGlobal("standin_set", L.NewFunction(func(L *lua.LState) int {
		if L.CheckString(1) == envoymeta.UsageNamespace {
			if n, ok := L.Get(3).(lua.LNumber); ok {
				s.mu.Lock()
				s.md[L.CheckString(2)] = float64(n)
				s.mu.Unlock()
			}
		}
		return 0
	}))
	L.SetGlobal("standin_next_chunk", L.NewFunction(func(L *lua.LState) int {
		c, ok := <-s.chunks
		if !ok {
			L.Push(lua.LNil)
		} else {
			L.Push(lua.LString(c))
		}
		return 1
	}))
	go func() {
		defer close(s.done)
		defer L.Close()
		_ = L.CallByParam(lua.P{Fn: L.GetGlobal("standin_run"), Protect: true}, lua.LString(itoa(status)), lua.LString(ctype))
		for range s.chunks { // the script returned early (not a usage response): drain
		}
	}()
	return s
}

// chunk hands the script one body chunk and waits until it has taken it.
func (s *usageScript) chunk(b []byte) { s.chunks <- string(b) }

// close ends the stream (normally or cut off: the script sees no more chunks) and returns once
// the script is done; what it set so far stays in md.
func (s *usageScript) close() {
	close(s.chunks)
	<-s.done
}

// metadata is what the script set.
func (s *usageScript) metadata() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.md
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
