package faults

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cutter stands in front of a process's gRPC port and forwards every connection to it. cut
// makes the port look like a crashed process's, which a graceful stop does not: every open
// connection is reset (no GOAWAY, no drain, no health check failed first) and new ones are
// refused; restore listens again on the same address, as the process restarted would. The
// process itself keeps running behind it, unseen.
type cutter struct {
	front, to string

	mu    sync.Mutex
	lis   net.Listener
	conns map[net.Conn]struct{}
}

func newCutter(t *testing.T, to string) *cutter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &cutter{front: l.Addr().String(), to: to, lis: l, conns: map[net.Conn]struct{}{}}
	go c.serve(l)
	t.Cleanup(c.cut)
	return c
}

func (c *cutter) serve(l net.Listener) {
	for {
		down, err := l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", c.to)
		if err != nil {
			reset(down)
			continue
		}
		if !c.track(down, up) {
			continue
		}
		go func() { _, _ = io.Copy(up, down); reset(up) }()
		go func() { _, _ = io.Copy(down, up); reset(down) }()
	}
}

// track records a forwarded pair, or resets it when the cut came first.
func (c *cutter) track(conns ...net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lis == nil {
		for _, x := range conns {
			reset(x)
		}
		return false
	}
	for _, x := range conns {
		c.conns[x] = struct{}{}
	}
	return true
}

// cut resets every connection and closes the port.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lis == nil {
		return
	}
	c.lis.Close()
	c.lis = nil
	for x := range c.conns {
		reset(x)
	}
	clear(c.conns)
}

// restore listens on the front address again.
func (c *cutter) restore(t *testing.T) {
	var l net.Listener
	require.Eventually(t, func() bool {
		var err error
		l, err = net.Listen("tcp", c.front)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "listen again on %s", c.front)
	c.mu.Lock()
	c.lis = l
	c.mu.Unlock()
	go c.serve(l)
}

// reset closes x with an RST, as the kernel does for the sockets of a process that died.
func reset(x net.Conn) {
	if tc, ok := x.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = x.Close()
}
