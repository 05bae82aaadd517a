package limits

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferplane/inferplane/e2e/redistest"
)

// lagProxy forwards TCP to Redis on 127.0.0.1 and, while one of its directions is held,
// delivers nothing that way: held requests never reach Redis, held replies arrive too late
// for the client's timeout. It is how a loaded network or store looks to a replica. With
// slowPushes set, the replies on a connection that sent a MULTI (a push; go-redis sends it in lower case) wait
// for release.
type lagProxy struct {
	addr                      string
	holdRequests, holdReplies atomic.Bool
	slowPushes                atomic.Bool
	release                   chan struct{}
	mu                        sync.Mutex
	conns                     []net.Conn
}

func newLagProxy(t *testing.T, target string) *lagProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lagProxy{addr: l.Addr().String(), release: make(chan struct{})}
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			var pushing atomic.Bool
			go p.pipe(s, c, &p.holdRequests, func(b []byte) {
				if p.slowPushes.Load() && bytes.Contains(bytes.ToUpper(b), []byte("MULTI")) {
					pushing.Store(true)
				}
			})
			go p.pipe(c, s, &p.holdReplies, func([]byte) {
				if pushing.Load() {
					<-p.release
				}
			})
		}
	}()
	return p
}

// pipe copies src to dst, calling before ahead of each chunk; what arrives while hold is set
// is dropped, the connection kept.
func (p *lagProxy) pipe(dst, src net.Conn, hold *atomic.Bool, before func([]byte)) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !hold.Load() {
			before(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestPushAppliedOnceAfterATimeout: a flush whose push times out is sent again at the next
// flush, and the store counts it once, whether the lost attempt reached Redis (its reply was
// lost) or not (the request was). Before, the retry added the same tokens a second time: a
// loaded gateway charged a tenant twice for one request.
func TestPushAppliedOnceAfterATimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(*lagProxy) *atomic.Bool
	}{
		{"the reply is lost: Redis has the push", func(p *lagProxy) *atomic.Bool { return &p.holdReplies }},
		{"the request is lost: Redis never saw it", func(p *lagProxy) *atomic.Bool { return &p.holdRequests }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.Start(t)
			p := newLagProxy(t, r.Addr())
			clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
			st, err := NewRedis(RedisOptions{Addr: p.addr, IOTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			tenants := map[string]Tenant{"acme": {Limits: Set{TokensPerDay: {Value: 1000}}}}
			l := New(Options{Store: st, Now: clk.Now, SyncTimeout: 50 * time.Millisecond,
				Tenants: func(name string) Tenant { return tenants[name] }})
			ctx := context.Background()
			key := counterKey("acme", "", TokensPerDay, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			read := func() int64 {
				t.Helper()
				direct, err := NewRedis(RedisOptions{Addr: r.Addr(), IOTimeout: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer direct.Close()
				v, err := direct.Get(ctx, []string{key})
				if err != nil {
					t.Fatal(err)
				}
				return v[0]
			}

			l.Count("acme", "", 7, time.Time{})
			l.Flush(ctx)
			if got := read(); got != 7 {
				t.Fatalf("after the first flush: %d, want 7", got)
			}
			l.Count("acme", "", 5, time.Time{})
			held := tc.hold(p)
			held.Store(true)
			l.Flush(ctx) // times out
			if down, _ := l.storeDown(); !down {
				t.Fatal("a push that timed out did not mark the store down")
			}
			held.Store(false)
			l.Count("acme", "", 3, time.Time{})
			for range 3 { // the ping, the push sent again, the new counts; then nothing more
				l.Flush(ctx)
			}
			if got := read(); got != 15 {
				t.Fatalf("after the retry: Redis counts %d tokens, want 7+5+3 = 15", got)
			}
			if down, _ := l.storeDown(); down {
				t.Fatal("the store is still down after it answered")
			}
			if res := l.Check("acme", "", Set{}); !res.HasTokens || res.Tokens.Used != 15 {
				t.Fatalf("the replica's view: %+v, want used 15", res.Tokens)
			}
		})
	}
}

// TestReadDuringAPushCountsItOnce: a check that reads the shared count while this replica's
// push is in Redis but not yet answered sees the pushed tokens once. Before, it took them from
// the store and from its pending counts both: CI's shared-tier test refused a tenant at 42 of
// 30 tokens when it had spent 28.
func TestReadDuringAPushCountsItOnce(t *testing.T) {
	r := redistest.Start(t)
	p := newLagProxy(t, r.Addr())
	clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
	st, err := NewRedis(RedisOptions{Addr: p.addr, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tenants := map[string]Tenant{"acme": {Limits: Set{TokensPerDay: {Value: 30}}}}
	l := New(Options{Store: st, Now: clk.Now, SyncTimeout: 5 * time.Second, MaxStale: time.Nanosecond,
		Tenants: func(name string) Tenant { return tenants[name] }})
	ctx := context.Background()
	direct, err := NewRedis(RedisOptions{Addr: r.Addr(), IOTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	key := counterKey("acme", "", TokensPerDay, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))

	l.Count("acme", "", 14, time.Time{})
	l.Flush(ctx)
	l.Count("acme", "", 14, time.Time{})
	p.slowPushes.Store(true)
	flushed := make(chan struct{})
	go func() { defer close(flushed); l.Flush(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		v, err := direct.Get(ctx, []string{key})
		if err != nil {
			t.Fatal(err)
		}
		if v[0] == 28 {
			break // Redis has the push; its answer is held
		}
		if time.Now().After(deadline) {
			t.Fatalf("the push never reached Redis: %d", v[0])
		}
	}
	res := l.Check("acme", "", Set{})
	rep := l.Status(ctx, []string{"acme"}, nil)
	close(p.release)
	<-flushed
	if !res.Allowed || res.Tokens.Used != 28 {
		t.Fatalf("a check during the push: allowed %v, used %d; want allowed, used 28", res.Allowed, res.Tokens.Used)
	}
	if len(rep.Limits) != 1 || rep.Limits[0].Used != 28 {
		t.Fatalf("the status during the push: %+v, want used 28", rep.Limits)
	}
	if res := l.Check("acme", "", Set{}); res.Tokens.Used != 28 {
		t.Fatalf("after the push: used %d, want 28", res.Tokens.Used)
	}
}
