package serve

import (
	"cmp"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
)

// StopGRPC stops s gracefully: it takes no new connections, runs ending (nil: nothing; what
// ends the streams that would hold it open, such as ADS's), lets the calls in flight finish
// for timeout at most, then cuts the rest.
func StopGRPC(s *grpc.Server, timeout time.Duration, ending func()) {
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	if ending != nil {
		ending()
	}
	select {
	case <-stopped:
	case <-time.After(timeout):
		s.Stop()
		<-stopped
	}
}

// GRPC bounds a gRPC server. A zero field takes the value of the defaults it is applied Over.
type GRPC struct {
	// MaxRecvMsgSize bounds one message a client sends (ResourceExhausted past it, unread).
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls open at once on one connection.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a call's headers (metadata).
	MaxHeaderListSize uint32
	// ConnectionTimeout bounds a new connection's arrival at HTTP/2: a client that connects
	// and sends nothing, or its preface a byte at a time, is cut off.
	ConnectionTimeout time.Duration
	// KeepaliveTime: a connection quiet this long is pinged; KeepaliveTimeout: one whose client
	// does not answer (it died, or stopped reading its socket) is closed that long after.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MinPingInterval is the fastest a client may ping (faster: its connection is closed).
	MinPingInterval time.Duration
	// MaxConnectionIdle closes a connection that has had no call open for this long.
	MaxConnectionIdle time.Duration
	// SendTimeout bounds one message sent on a stream: a client that reads the connection but
	// not the stream (its flow-control window stays shut) holds the send; when this passes,
	// its connection is closed. Needs the server's Listener (ServerOptions).
	SendTimeout time.Duration
	// WindowSize and ConnWindowSize bound the bytes a client may send ahead of the server's
	// reading, per stream and per connection (fixed: gRPC's growing window is off).
	WindowSize, ConnWindowSize int32
	// Conns bounds the connections.
	Conns Conns
}

// Over fills b's zero fields from def.
func (b GRPC) Over(def GRPC) GRPC {
	b.MaxRecvMsgSize = cmp.Or(b.MaxRecvMsgSize, def.MaxRecvMsgSize)
	b.MaxConcurrentStreams = cmp.Or(b.MaxConcurrentStreams, def.MaxConcurrentStreams)
	b.MaxHeaderListSize = cmp.Or(b.MaxHeaderListSize, def.MaxHeaderListSize)
	b.ConnectionTimeout = cmp.Or(b.ConnectionTimeout, def.ConnectionTimeout)
	b.KeepaliveTime = cmp.Or(b.KeepaliveTime, def.KeepaliveTime)
	b.KeepaliveTimeout = cmp.Or(b.KeepaliveTimeout, def.KeepaliveTimeout)
	b.MinPingInterval = cmp.Or(b.MinPingInterval, def.MinPingInterval)
	b.MaxConnectionIdle = cmp.Or(b.MaxConnectionIdle, def.MaxConnectionIdle)
	b.SendTimeout = cmp.Or(b.SendTimeout, def.SendTimeout)
	b.WindowSize = cmp.Or(b.WindowSize, def.WindowSize)
	b.ConnWindowSize = cmp.Or(b.ConnWindowSize, def.ConnWindowSize)
	b.Conns = b.Conns.Over(def.Conns)
	return b
}

// Listen listens on addr with b's connection bounds.
func (b GRPC) Listen(addr string) (*Listener, error) { return Listen(addr, b.Conns) }

// ServerOptions are b as gRPC server options, for a server that serves on l (b.Listen's; nil:
// no SendTimeout).
func (b GRPC) ServerOptions(l *Listener) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(b.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(b.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(b.MaxHeaderListSize),
		grpc.ConnectionTimeout(b.ConnectionTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: b.KeepaliveTime, Timeout: b.KeepaliveTimeout,
			MaxConnectionIdle: b.MaxConnectionIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: b.MinPingInterval, PermitWithoutStream: true}),
		grpc.InitialWindowSize(b.WindowSize),
		grpc.InitialConnWindowSize(b.ConnWindowSize),
	}
	if l != nil && b.SendTimeout > 0 {
		opts = append(opts, grpc.ChainStreamInterceptor(sendWatchdog(l, b.SendTimeout)))
	}
	return opts
}

// sendWatchdog closes the connection of a stream whose message could not be sent within d. gRPC
// has no send deadline, and a stream cannot be ended from outside its handler, which is the one
// waiting; closing the connection ends every call on it, and the handler's send returns.
// (A unary answer is small and queued without waiting: only streams can be held this way.)
func sendWatchdog(l *Listener, d time.Duration) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		p, ok := peer.FromContext(ss.Context())
		if !ok {
			return handler(srv, ss)
		}
		return handler(srv, &watchedStream{ServerStream: ss, d: d, cut: func() { l.Cut(p.Addr) }})
	}
}

type watchedStream struct {
	grpc.ServerStream
	d   time.Duration
	cut func()
}

func (s *watchedStream) SendMsg(m any) error {
	t := time.AfterFunc(s.d, s.cut)
	defer t.Stop()
	return s.ServerStream.SendMsg(m)
}
