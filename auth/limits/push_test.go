package limits

import (
	"bytes"
	"context"
	"crypto/rand"
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

// behindProxy starts a Redis and a lagProxy in front of it: st reaches Redis through the proxy
// (ioTimeout bounds its calls), read reads a counter straight from Redis.
func behindProxy(t *testing.T, ioTimeout time.Duration) (p *lagProxy, st *Redis, read func(key string) int64) {
	t.Helper()
	r := redistest.Start(t)
	p = newLagProxy(t, r.Addr())
	st, err := NewRedis(RedisOptions{Addr: p.addr, IOTimeout: ioTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	direct, err := NewRedis(RedisOptions{Addr: r.Addr(), IOTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	return p, st, func(key string) int64 {
		t.Helper()
		v, err := direct.Get(context.Background(), []string{key})
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
}

// losses are the two ways a call to the store times out.
var losses = []struct {
	name    string
	hold    func(*lagProxy) *atomic.Bool
	applied bool // Redis applied the call
}{
	{"the reply is lost: Redis applied the call", func(p *lagProxy) *atomic.Bool { return &p.holdReplies }, true},
	{"the request is lost: Redis never saw it", func(p *lagProxy) *atomic.Bool { return &p.holdRequests }, false},
}

// TestPushAppliedOnceAfterATimeout: a flush whose push times out is sent again at the next
// flush, and the store counts it once, whether the lost attempt reached Redis (its reply was
// lost) or not (the request was). Before, the retry added the same tokens a second time: a
// loaded gateway charged a tenant twice for one request.
func TestPushAppliedOnceAfterATimeout(t *testing.T) {
	for _, tc := range losses {
		t.Run(tc.name, func(t *testing.T) {
			p, st, readKey := behindProxy(t, 200*time.Millisecond)
			clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
			tenants := map[string]Tenant{"acme": {Limits: Set{TokensPerDay: {Value: 1000}}}}
			l := New(Options{Store: st, Now: clk.Now, SyncTimeout: 50 * time.Millisecond,
				Tenants: func(name string) Tenant { return tenants[name] }})
			ctx := context.Background()
			key := counterKey("acme", "", TokensPerDay, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			read := func() int64 { t.Helper(); return readKey(key) }

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
	p, st, read := behindProxy(t, 5*time.Second)
	clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
	tenants := map[string]Tenant{"acme": {Limits: Set{TokensPerDay: {Value: 30}}}}
	l := New(Options{Store: st, Now: clk.Now, SyncTimeout: 5 * time.Second, MaxStale: time.Nanosecond,
		Tenants: func(name string) Tenant { return tenants[name] }})
	ctx := context.Background()
	key := counterKey("acme", "", TokensPerDay, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))

	l.Count("acme", "", 14, time.Time{})
	l.Flush(ctx)
	l.Count("acme", "", 14, time.Time{})
	p.slowPushes.Store(true)
	flushed := make(chan struct{})
	go func() { defer close(flushed); l.Flush(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		v := read(key)
		if v == 28 {
			break // Redis has the push; its answer is held
		}
		if time.Now().After(deadline) {
			t.Fatalf("the push never reached Redis: %d", v)
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

// TestReservationAppliedOnceAfterATimeout: a reservation of request units that times out is
// sent again at the next flush with its number, and Redis applies it once: when the lost
// attempt reached Redis (its reply was lost) the retry answers the units it granted then, and
// when it did not (the request was lost) the retry grants them now. Either way they are the
// lease of the replica that asked, and the key gets exactly its limit in the window. Before,
// the units of a lost reply were counted in Redis and held by nobody (the key was refused a
// lease early), and a lost request's lease was never taken.
func TestReservationAppliedOnceAfterATimeout(t *testing.T) {
	for _, tc := range losses {
		t.Run(tc.name, func(t *testing.T) {
			p, st, readKey := behindProxy(t, time.Second)
			clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
			// 40 a minute, a lease of 40/8 = 5 units.
			const limit = 40
			set := Set{RequestsPerMinute: {Value: limit}}
			// A timeout far above a round trip on a loaded machine: only the held one times out.
			l := New(Options{Store: st, Now: clk.Now, SyncTimeout: 300 * time.Millisecond, LeaseDivisor: 8})
			ctx := context.Background()
			key := counterKey("acme", "k1", RequestsPerMinute, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
			read := func() int64 { t.Helper(); return readKey(key) }

			// Another key's check first: it loads the script in Redis (EVALSHA of an unknown
			// script fails without running anything) and opens the connection.
			if res := l.Check("acme", "k0", set); !res.Allowed || res.StoreDown {
				t.Fatalf("the first check: %+v", res)
			}
			held := tc.hold(p)
			held.Store(true)
			if res := l.Check("acme", "k1", set); !res.Allowed || !res.StoreDown {
				t.Fatalf("the check whose reservation timed out: allowed %v, store down %v; want allowed from memory, store down", res.Allowed, res.StoreDown)
			}
			want := int64(0)
			if tc.applied {
				want = 5 // the lease
			}
			if got := read(); got != want {
				t.Fatalf("while the store is down Redis counts %d, want %d", got, want)
			}
			held.Store(false)
			l.Flush(ctx) // the ping, the reservation sent again, the request counted meanwhile
			if got := read(); got != 5+1 {
				t.Fatalf("after the retry Redis counts %d, want the lease 5 and the request decided from memory 1", got)
			}
			trips := counterValue(l.metrics.syncCalls)
			for i := range 5 {
				if res := l.Check("acme", "k1", set); !res.Allowed {
					t.Fatalf("check %d on the lease: refused", i)
				}
			}
			if n := counterValue(l.metrics.syncCalls) - trips; n != 0 {
				t.Errorf("the 5 checks after the retry made %v round trips, want 0: the lease is this replica's", n)
			}
			allowed := 1 + 5
			for range 2 * limit {
				if l.Check("acme", "k1", set).Allowed {
					allowed++
				}
			}
			l.Flush(ctx)
			if allowed != limit || read() != limit {
				t.Fatalf("the key got %d requests and Redis counts %d, want %d and %d", allowed, read(), limit, limit)
			}
		})
	}
}

// TestReserveSentAgain is the store's side: a reservation sent again with the number of one
// Redis applied answers the units granted then and grants nothing more; one Redis never
// recorded (its request was lost, or its slot was taken since by a reservation numbered
// reserveSlots later) is applied.
func TestReserveSentAgain(t *testing.T) {
	r := redistest.Start(t)
	st, err := NewRedis(RedisOptions{Addr: r.Addr(), IOTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		first     []int64 // numbers reserved before the one sent again
		again     int64
		wantGrant int64
		wantCount int64
	}{
		{"applied: the recorded grant", []int64{7}, 7, 3, 3},
		{"never reached Redis: applied now", nil, 7, 3, 3},
		{"applied and its slot taken since: applied again", []int64{7, 7 + reserveSlots}, 7, 3, 9},
		{"another number in the slot, older: applied", []int64{7}, 7 + reserveSlots, 3, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := "ipl:{t}:k:" + tc.name
			ops := []Op{{Key: k, Cap: 100, Want: 3, TTL: time.Minute}, {Key: k + ":read", TTL: time.Minute}}
			got, val := make([]int64, 2), make([]int64, 2)
			replica := rand.Text()
			for _, n := range tc.first {
				if err := st.Reserve(ctx, CallID{Replica: replica, Seq: n}, ops, got, val); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Reserve(ctx, CallID{Replica: replica, Seq: tc.again, Again: true}, ops, got, val); err != nil {
				t.Fatal(err)
			}
			if got[0] != tc.wantGrant || val[0] != tc.wantCount || got[1] != 0 || val[1] != 0 {
				t.Fatalf("sent again: granted %v, values %v; want [%d 0], [%d 0]", got, val, tc.wantGrant, tc.wantCount)
			}
		})
	}
}
