package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
)

// short are bounds a test reaches in a second or two; the cases' limit (servetest.Run's
// Within) is far longer, so only a missing bound makes a case fail.
func short() serve.HTTP {
	return serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		StreamWriteTimeout: time.Second, IdleTimeout: 2 * time.Second, MaxHeaderBytes: 16 << 10, MaxBodyBytes: 64 << 10,
		Conns: serve.Conns{Max: 1000, MaxPerClient: 50}}.Over(serve.AdminHTTP())
}

// jsonServer serves POST /json (decodes the body), GET /stream (a servetest.Flood) and GET /ok,
// within b.
func jsonServer(t *testing.T, b serve.HTTP) (addr string, stream *servetest.Flood) {
	t.Helper()
	stream = servetest.NewFlood()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		var v any
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /stream", stream)
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	l, err := b.Listen("127.0.0.1:0")
	require.NoError(t, err)
	srv := b.Server(mux)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), stream
}

// TestHTTPBoundsHoldAgainstHostileClients runs every HTTP attack against a server built with
// Server, Listen and Handler.
func TestHTTPBoundsHoldAgainstHostileClients(t *testing.T) {
	addr, stream := jsonServer(t, short())
	target := servetest.Target{Addr: addr, Method: http.MethodPost, Path: "/json", ContentType: "application/json",
		Normal: servetest.Get("http://" + addr + "/ok")}
	servetest.Run(t, target, servetest.Options{}, []servetest.Case{
		{Name: "slow header", Attack: servetest.SlowHeader(200 * time.Millisecond), Status: []int{400, 408}, Cut: true},
		{Name: "slow body", Attack: servetest.SlowBody(200 * time.Millisecond), Status: []int{400, 408}, Cut: true},
		{Name: "500 idle connections from another client", Attack: servetest.IdleConns(500), Cut: true,
			Target: servetest.From("127.0.0.2")},
		{Name: "1 MiB header", Attack: servetest.BigHeader(1 << 20), Status: []int{431}, Cut: true},
		{Name: "10 MB bodies, four at once", Attack: servetest.BigBody(10_000_000, 4), Status: []int{413}, Cut: true},
		{Name: "JSON nested 20,000 deep (encoding/json stops at 10,000)", Attack: servetest.DeepJSON("a", 20_000), Status: []int{400}},
		{Name: "a stream the client stops reading", Attack: servetest.NeverReadStream(stream.Cut), Cut: true,
			Target: func(t servetest.Target) servetest.Target { t.Method, t.Path = http.MethodGet, "/stream"; return t }},
	})
}

// A client past MaxPerClient is closed at once while another is accepted; past Max, Accept
// waits for a connection to close; Cut closes the one named.
func TestListenerBoundsConnections(t *testing.T) {
	l, err := serve.Listen("127.0.0.1:0", serve.Conns{Max: 3, MaxPerClient: 2})
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dialFrom := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	next := func(what string) net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not accepted", what)
			return nil
		}
	}
	a1, a2 := dialFrom("127.0.0.2"), dialFrom("127.0.0.2")
	s1, _ := next("first of client A"), next("second of client A")
	a3 := dialFrom("127.0.0.2")
	_ = a3.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = a3.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "client A's third connection is closed at once")
	_ = dialFrom("127.0.0.3")
	next("client B's first")
	assert.Equal(t, int64(3), l.Stats().Open)
	assert.Equal(t, int64(1), l.Stats().Refused)

	dialFrom("127.0.0.3") // past Max: waits
	select {
	case <-accepted:
		t.Fatal("a fourth connection was accepted past Max 3")
	default:
	}
	require.True(t, l.Cut(s1.RemoteAddr()), "Cut finds client A's first connection")
	_ = a1.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = a1.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the cut connection is closed")
	next("the waiting connection, once one closed")
	assert.Equal(t, int64(1), l.Stats().Cut)
	_ = a2
}

// floodService's Flood sends 256 KiB messages as fast as its client takes them.
var floodService = grpc.ServiceDesc{
	ServiceName: "test.Flood",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Flood", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, s grpc.ServerStream) error {
			if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
				return err
			}
			msg := wrapperspb.Bytes(make([]byte, 256<<10))
			for {
				if err := s.SendMsg(msg); err != nil {
					return err
				}
			}
		}}},
}

// TestGRPCBoundsHoldAgainstHostileClients runs every gRPC attack against a server built with
// ServerOptions on Listen's listener.
func TestGRPCBoundsHoldAgainstHostileClients(t *testing.T) {
	b := serve.GRPC{ConnectionTimeout: time.Second, KeepaliveTime: time.Second, KeepaliveTimeout: time.Second,
		MaxConnectionIdle: time.Second, SendTimeout: time.Second, MaxRecvMsgSize: 1 << 20,
		Conns: serve.Conns{MaxPerClient: 50}}.Over(serve.GRPCDefaults())
	l, err := b.Listen("127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(b.ServerOptions(l)...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	srv.RegisterService(&floodService, nil)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	normal := func(ctx context.Context) error {
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	servetest.Run(t, servetest.Target{Addr: l.Addr().String(), Normal: normal}, servetest.Options{}, append([]servetest.Case{
		{Name: "oversized message", Attack: servetest.OversizedMessage("/grpc.health.v1.Health/Check",
			wrapperspb.Bytes(make([]byte, 2<<20))), Codes: []string{"ResourceExhausted"}},
		{Name: "a stream that never reads", Attack: servetest.NeverRead(servetest.Stream{Method: "/test.Flood/Flood",
			ClientStreams: true, Messages: []proto.Message{wrapperspb.Bytes(nil)}}, false), Cut: true},
		{Name: "a watch that never reads", Attack: servetest.NeverRead(servetest.Stream{Method: "/grpc.health.v1.Health/Watch",
			Messages: []proto.Message{&healthpb.HealthCheckRequest{}}}, true), Held: true},
	}, servetest.GRPCConnCases("/grpc.health.v1.Health/Check")...))
	assert.Positive(t, l.Stats().Cut, "the stream that never read was cut by SendTimeout")
	assert.Positive(t, l.Stats().Refused, "the idle client's connections past 50 were refused")
}
