package servetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// clientConn is a gRPC client of t from t.From, whose windows let the server send 64 KiB ahead
// of its reading.
func clientConn(t Target) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+t.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return dial(ctx, Target{Addr: t.Addr, From: t.From})
		}),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
}

var bidi = &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}

// OversizedMessage calls method with msg (made larger than the server takes) and reports the
// status the server answers with.
func OversizedMessage(method string, msg proto.Message) Attack {
	return func(ctx context.Context, t Target) Result {
		start := time.Now()
		conn, err := clientConn(t)
		if err != nil {
			return Result{Err: err}
		}
		defer conn.Close()
		s, err := conn.NewStream(ctx, bidi, method)
		if err == nil {
			if err = s.SendMsg(msg); err == nil || errors.Is(err, io.EOF) {
				_ = s.CloseSend()
				err = s.RecvMsg(new(emptypb.Empty))
			}
		}
		if err == nil {
			return Result{Code: "OK", Took: time.Since(start)}
		}
		return Result{Code: status.Code(err).String(), Took: time.Since(start)}
	}
}

// Stream is a call an attack makes: its method, whether the client streams (a bidirectional
// call such as ADS; else the client half-closes after its messages, as for a server-streaming
// call such as a health Watch) and what it sends.
type Stream struct {
	Method        string
	ClientStreams bool
	Messages      []proto.Message
}

// NeverRead opens s's stream, sends its messages and never reads what the server sends. It
// waits until the server cuts the connection; with hold, until the server has answered and
// t.Normal has been served three times beside it, then it lets go (Held).
func NeverRead(s Stream, hold bool) Attack {
	return func(ctx context.Context, t Target) Result {
		start := time.Now()
		conn, err := clientConn(t)
		if err != nil {
			return Result{Err: err}
		}
		defer conn.Close()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cs, err := conn.NewStream(sctx, bidi, s.Method)
		for _, m := range s.Messages {
			if err == nil {
				err = cs.SendMsg(m)
			}
		}
		if err == nil && !s.ClientStreams {
			err = cs.CloseSend()
		}
		if err != nil {
			return Result{Err: err, Took: time.Since(start)}
		}
		if hold {
			return holdWhileNormal(ctx, t, cs, start)
		}
		for st := conn.GetState(); st == connectivity.Ready || st == connectivity.Connecting; st = conn.GetState() {
			if !conn.WaitForStateChange(ctx, st) {
				return Result{Took: time.Since(start), Err: fmt.Errorf("the connection is still %s: %w", conn.GetState(), ctx.Err())}
			}
		}
		return Result{Cut: true, Took: time.Since(start)}
	}
}

func holdWhileNormal(ctx context.Context, t Target, s grpc.ClientStream, start time.Time) Result {
	if md, err := s.Header(); err != nil || md == nil {
		return Result{Err: fmt.Errorf("the server did not answer the stream: %v", err), Took: time.Since(start)}
	}
	for i := range 3 {
		if err := t.Normal(ctx); err != nil {
			return Result{Err: fmt.Errorf("normal request %d beside the unread stream: %w", i+1, err), Took: time.Since(start)}
		}
	}
	return Result{Held: true, Took: time.Since(start)}
}

// SlowPreface sends HTTP/2's connection preface a byte every interval.
func SlowPreface(every time.Duration) Attack {
	return func(ctx context.Context, t Target) Result {
		t.TLS = nil
		return trickle(ctx, t, "", http2.ClientPreface+strings.Repeat("\x00", 1<<20), every)
	}
}

// IdleH2 connects, sends the preface and its settings, then nothing (it answers no ping), and
// waits until the server closes the connection.
func IdleH2() Attack {
	return func(ctx context.Context, t Target) Result {
		start := time.Now()
		c, fr, err := h2Conn(ctx, t)
		if err != nil {
			return Result{Err: err}
		}
		defer c.Close()
		return readUntilClosed(ctx, c, fr, 0, start)
	}
}

// BigMetadata calls method with a header of size bytes (HEADERS and CONTINUATION frames: a
// gRPC client refuses to send one over the server's advertised limit).
func BigMetadata(method string, size int) Attack {
	return func(ctx context.Context, t Target) Result {
		start := time.Now()
		c, fr, err := h2Conn(ctx, t)
		if err != nil {
			return Result{Err: err}
		}
		defer c.Close()
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", t.Addr},
			{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-big", strings.Repeat("a", size)}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		go writeHeaderBlock(fr, 1, block.Bytes())
		return readUntilClosed(ctx, c, fr, 1, start)
	}
}

// h2Conn is a raw HTTP/2 connection to t: the preface and an empty SETTINGS frame sent.
func h2Conn(ctx context.Context, t Target) (net.Conn, *http2.Framer, error) {
	c, err := dial(ctx, Target{Addr: t.Addr, From: t.From})
	if err != nil {
		return nil, nil, err
	}
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err == nil {
		err = fr.WriteSettings()
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, fr, nil
}

func writeHeaderBlock(fr *http2.Framer, stream uint32, block []byte) {
	const max = 16 << 10
	first := block[:min(len(block), max)]
	if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: first, EndHeaders: len(block) <= max}) != nil {
		return
	}
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), max)
		if fr.WriteContinuation(stream, n == len(rest), rest[:n]) != nil {
			return
		}
		rest = rest[n:]
	}
}

// readUntilClosed reads frames until the server closes the connection, or, for stream > 0,
// resets that stream or ends it with a status; it answers nothing.
func readUntilClosed(ctx context.Context, c net.Conn, fr *http2.Framer, stream uint32, start time.Time) Result {
	done := make(chan Result, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			switch {
			case err != nil:
				done <- Result{Cut: true}
				return
			case stream == 0:
			case f.Header().StreamID == stream && f.Header().Type == http2.FrameRSTStream:
				done <- Result{Code: "RST_STREAM " + f.(*http2.RSTStreamFrame).ErrCode.String()}
				return
			case f.Header().Type == http2.FrameGoAway:
				done <- Result{Code: "GOAWAY " + f.(*http2.GoAwayFrame).ErrCode.String(), Cut: true}
				return
			case f.Header().StreamID == stream && f.Header().Type == http2.FrameHeaders:
				done <- Result{Code: "HEADERS"} // a trailers-only answer: an error status
				return
			}
		}
	}()
	select {
	case r := <-done:
		r.Took = time.Since(start)
		return r
	case <-ctx.Done():
		c.Close()
		return Result{Took: time.Since(start), Err: ctx.Err()}
	}
}
