// Package serve gives every network server of inferplane its bounds against slow and hostile
// clients: how many connections it holds (Conns, a Listener), how long a request may take to
// arrive and its answer to leave, how large its headers and body may be (HTTP), and what a gRPC
// client may send, hold open and leave unread (GRPC). Each server takes one of the named
// defaults (PublicHTTP, AdminHTTP, LoopbackHTTP, WebhookHTTP, GRPCDefaults) and overrides only
// what its operator needs; docs/servers.md lists every server, bound and value with its reason.
//
// The bounds are the same kind of thing everywhere on purpose, and so are the servers' probes
// and stop: Health (/healthz, /readyz from named checks, the drain that turns readiness off
// before a shutdown) and StopGRPC.
package serve

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/net/netutil"
)

// Conns bounds the connections a listener holds open.
type Conns struct {
	// Max is how many connections are open at once: past it, Accept waits for one to close
	// and new clients wait in the kernel's accept queue (they are not refused: a burst of
	// honest clients is served late, not failed). It bounds the file descriptors and the
	// memory the connections can take. 0: no bound.
	Max int
	// MaxPerClient is how many of them one client (one remote IP address) may hold: its
	// connections past that are closed as soon as they are accepted, so one client cannot take
	// the whole of Max and leave the others waiting. 0: no bound (a server behind a proxy or
	// load balancer that does not keep the client's address sees every client as one).
	MaxPerClient int
}

// Listener is a TCP listener with Conns' bounds. Cut closes one of its connections (a gRPC
// client that stopped reading: see GRPC.SendTimeout).
type Listener struct {
	net.Listener
	// Log, when set, is told of every connection Cut closes.
	Log     *slog.Logger
	clients *clientListener

	mu   sync.Mutex
	open map[string]net.Conn // by remote address: what Cut finds
	cuts atomic.Int64
}

// Listen listens on addr (TCP) with c's bounds.
func Listen(addr string, c Conns) (*Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.Wrap(l), nil
}

// Wrap bounds l's connections.
func (c Conns) Wrap(l net.Listener) *Listener {
	cl := &clientListener{Listener: l, max: c.MaxPerClient, per: map[string]int{}}
	var limited net.Listener = cl
	if c.Max > 0 {
		// The per-client check runs inside the global slot: a refused connection gives its
		// slot straight back to the next one in the queue.
		limited = netutil.LimitListener(cl, c.Max)
	}
	return &Listener{Listener: limited, clients: cl, open: map[string]net.Conn{}}
}

// Accept waits for the next connection within the bounds.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	key := c.RemoteAddr().String()
	tc := &trackedConn{Conn: c, gone: func() {
		l.mu.Lock()
		delete(l.open, key)
		l.mu.Unlock()
	}}
	l.mu.Lock()
	l.open[key] = tc
	l.mu.Unlock()
	return tc, nil
}

// Cut closes the connection whose client is at remote; false when there is none.
func (l *Listener) Cut(remote net.Addr) bool {
	if remote == nil {
		return false
	}
	l.mu.Lock()
	c := l.open[remote.String()]
	l.mu.Unlock()
	if c == nil {
		return false
	}
	if l.Log != nil {
		l.Log.Warn("closing a connection whose client stopped reading", "client", remote.String())
	}
	l.cuts.Add(1)
	_ = c.Close()
	return true
}

// Stats says what the listener has done.
type Stats struct {
	// Open is the connections open now; Refused those closed at once for their client's
	// MaxPerClient; Cut those Cut closed.
	Open, Refused, Cut int64
}

// Stats is what the listener has done so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := int64(len(l.open))
	l.mu.Unlock()
	return Stats{Open: open, Refused: l.clients.refused.Load(), Cut: l.cuts.Load()}
}

// clientListener counts the connections of each remote IP and refuses those past max.
type clientListener struct {
	net.Listener
	max     int
	mu      sync.Mutex
	per     map[string]int
	refused atomic.Int64
}

func (l *clientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := hostOf(c.RemoteAddr())
		l.mu.Lock()
		if l.max > 0 && l.per[ip] >= l.max {
			l.mu.Unlock()
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		l.per[ip]++
		l.mu.Unlock()
		return &trackedConn{Conn: c, gone: func() { l.closed(ip) }}, nil
	}
}

func (l *clientListener) closed(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per[ip]--; l.per[ip] <= 0 {
		delete(l.per, ip)
	}
}

func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// trackedConn runs gone once, when it is first closed.
type trackedConn struct {
	net.Conn
	gone func()
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.gone)
	return err
}
