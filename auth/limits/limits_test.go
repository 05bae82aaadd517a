package limits

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/redistest"
	"github.com/inferplane/inferplane/internal/fielderr"
)

func TestWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		kind       Kind
		at         string
		loc        *time.Location
		start, end string
	}{
		{RequestsPerMinute, "2026-12-01T10:15:42Z", nil, "2026-12-01T10:15:00Z", "2026-12-01T10:16:00Z"},
		{TokensPerMinute, "2026-12-01T10:15:00Z", berlin, "2026-12-01T10:15:00Z", "2026-12-01T10:16:00Z"},
		{TokensPerDay, "2026-12-01T23:30:00Z", nil, "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z"},
		// 23:30 UTC is already 00:30 on the 2nd in Berlin (UTC+1 in winter).
		{TokensPerDay, "2026-12-01T23:30:00Z", berlin, "2026-12-01T23:00:00Z", "2026-12-02T23:00:00Z"},
		// The day clocks go forward in Berlin is 23 hours long.
		{TokensPerDay, "2026-03-29T12:00:00Z", berlin, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		// 2026-12-03 is a Thursday: the week started on Monday the 1st... in UTC, Monday Nov 30.
		{TokensPerWeek, "2026-12-03T08:00:00Z", nil, "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"},
		{TokensPerWeek, "2026-11-30T00:00:00Z", nil, "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"},
		{TokensPerWeek, "2026-12-06T23:59:59Z", nil, "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"},
		{TokensPerMonth, "2026-12-31T23:59:59Z", nil, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{TokensPerMonth, "2026-02-10T00:00:00Z", berlin, "2026-01-31T23:00:00Z", "2026-02-28T23:00:00Z"},
	}
	for _, tc := range cases {
		s, e := Window(tc.kind, utc(tc.at), tc.loc)
		if !s.Equal(utc(tc.start)) || !e.Equal(utc(tc.end)) {
			t.Errorf("%s at %s in %v: got [%s, %s), want [%s, %s)", tc.kind, tc.at, tc.loc, s.UTC().Format(time.RFC3339),
				e.UTC().Format(time.RFC3339), tc.start, tc.end)
		}
	}
}

func TestResetString(t *testing.T) {
	now := time.Unix(1000, 0)
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 6 * time.Minute: "6m0s", 17*time.Millisecond + 10: "18ms", 59500 * time.Millisecond: "1m0s",
		0: "0s", 26 * time.Hour: "26h0m0s",
	} {
		if got := ResetString(now, now.Add(d)); got != want {
			t.Errorf("%s: got %q, want %q", d, got, want)
		}
	}
}

func TestTenantFromSpecAndProblems(t *testing.T) {
	tl := &v1alpha1.TenantLimits{TimeZone: "Mars/Olympus", OnStoreDown: "maybe",
		RateLimits: v1alpha1.RateLimits{TokensPerDay: &v1alpha1.Limit{Value: 0, Mode: "loud"}}}
	var got []string
	for _, e := range ValidateTenantLimits(tl, field.NewPath("spec", "limits")) {
		got = append(got, fielderr.Describe(e))
	}
	assert.ElementsMatch(t, []string{"spec.limits.tokensPerDay.value is 0: must be a positive number", `spec.limits.tokensPerDay.mode is "loud": must be hard or soft`,
		`spec.limits.timeZone is "Mars/Olympus": must be an IANA time zone such as Europe/Berlin`, `spec.limits.onStoreDown is "maybe": must be open or closed`}, got)
	assert.Empty(t, ValidateTenantLimits(nil, field.NewPath("spec", "limits")), "no limits are good limits")
	ok, err := TenantFromSpec(&v1alpha1.TenantLimits{TimeZone: "Asia/Tokyo", OnStoreDown: v1alpha1.StoreDownClosed,
		RateLimits: v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 60}, TokensPerMonth: &v1alpha1.Limit{Value: 1e6, Mode: v1alpha1.LimitSoft}}})
	if err != nil || ok.Location.String() != "Asia/Tokyo" || ok.OnStoreDown != v1alpha1.StoreDownClosed ||
		ok.Limits[RequestsPerMinute] != (Rule{Value: 60}) || ok.Limits[TokensPerMonth] != (Rule{Value: 1e6, Soft: true}) {
		t.Fatalf("got %+v, %v", ok, err)
	}
	if back := ok.Limits.Spec(); back.RequestsPerMinute.Mode != v1alpha1.LimitHard || back.TokensPerMonth.Mode != v1alpha1.LimitSoft || back.TokensPerDay != nil {
		t.Fatalf("Spec: %+v", back)
	}
}

// A key's limits above its tenant's are named, kind by kind; a kind the tenant leaves open, a
// limit at or under the tenant's, and the modes do not count.
func TestAbove(t *testing.T) {
	tenant := Set{RequestsPerMinute: {Value: 600}, TokensPerDay: {Value: 1000, Soft: true}}
	for _, tc := range []struct {
		name string
		key  Set
		want []Excess
	}{
		{"no limits", Set{}, nil},
		{"within", Set{RequestsPerMinute: {Value: 600}, TokensPerDay: {Value: 1, Soft: true}}, nil},
		{"a kind the tenant leaves open", Set{TokensPerMonth: {Value: 1 << 40}}, nil},
		{"above, hard or soft", Set{RequestsPerMinute: {Value: 601, Soft: true}, TokensPerDay: {Value: 5000}},
			[]Excess{{RequestsPerMinute, 601, 600}, {TokensPerDay, 5000, 1000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Above(tc.key, tenant)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
			}
		})
	}
	if got := Above(Set{RequestsPerMinute: {Value: 5}}, Set{}); got != nil {
		t.Errorf("a tenant without limits bounds nothing: %+v", got)
	}
}

// clock is a fake clock for the windows.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock    { c := &clock{}; c.ns.Store(t.UnixNano()); return c }
func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// replicas are n limiters (gateway replicas) over one real Redis.
func replicas(t *testing.T, n int, addr string, clk *clock, tenants map[string]Tenant, keysLimits map[string]Set) []*Limiter {
	t.Helper()
	out := make([]*Limiter, n)
	for i := range out {
		// Generous timeouts: the race detector on two shared cores is slow, and a timeout
		// would (rightly) switch the replica to its own counts.
		st, err := NewRedis(RedisOptions{Addr: addr, IOTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out[i] = New(Options{
			Store: st, Now: clk.Now, Grace: 300 * time.Millisecond, SyncTimeout: 2 * time.Second,
			MaxStale: time.Nanosecond, // every check reads the token counts: the test's steps are exact
			Tenants:  func(name string) Tenant { return tenants[name] },
			Keys: func(id string) (string, Set, bool) {
				s, ok := keysLimits[id]
				return "acme", s, ok
			},
		})
	}
	return out
}

func TestRequestsExactAcrossReplicas(t *testing.T) {
	r := redistest.Start(t)
	clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
	key := Set{RequestsPerMinute: {Value: 20}}
	ls := replicas(t, 3, r.Addr(), clk, nil, nil)
	var allowed, refusedAfter int
	lastRemaining := int64(1 << 62)
	for i := 0; i < 30; i++ {
		res := ls[i%3].Check("acme", "k1", key)
		if res.Allowed {
			if refusedAfter > 0 {
				t.Fatalf("request %d allowed after a refusal", i)
			}
			allowed++
			if rem := res.Requests.Remaining(); rem >= lastRemaining {
				t.Fatalf("request %d: remaining %d after %d: not decreasing", i, rem, lastRemaining)
			} else {
				lastRemaining = rem
			}
			continue
		}
		refusedAfter++
		if res.Denied.Kind != RequestsPerMinute || res.Denied.Scope != ScopeKey || res.RetryAfter() != 55 {
			t.Fatalf("refusal %+v, retry after %d", res.Denied, res.RetryAfter())
		}
	}
	if allowed != 20 {
		t.Fatalf("allowed %d of 30 with a limit of 20 a minute", allowed)
	}
	// The next minute starts over on every replica.
	clk.Set(time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC))
	for i := range 3 {
		if res := ls[i].Check("acme", "k1", key); !res.Allowed || res.Requests.Remaining() != int64(19-i) {
			t.Fatalf("new minute, replica %d: %+v", i, res)
		}
	}
}

// TestRequestsExactUnderConcurrency: 3 replicas, 24 goroutines, a limit large enough that
// replicas lease units: exactly the limit is allowed in the minute.
func TestRequestsExactUnderConcurrency(t *testing.T) {
	r := redistest.Start(t)
	clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
	const limit = 5000
	tenant := map[string]Tenant{"acme": {Limits: Set{RequestsPerMinute: {Value: limit}}}}
	ls := replicas(t, 3, r.Addr(), clk, tenant, nil)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refusals := 0
			for refusals < 50 {
				if ls[g%3].Check("acme", "k"+string(rune('a'+g)), Set{}).Allowed {
					allowed.Add(1)
				} else {
					refusals++
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != limit {
		t.Fatalf("allowed %d, limit %d", allowed.Load(), limit)
	}
	var trips float64
	for _, l := range ls {
		trips += counterValue(l.metrics.syncCalls)
	}
	t.Logf("%d requests allowed with %.0f round trips to Redis (the rest from leases in memory)", limit, trips)
	if trips > limit/2 {
		t.Errorf("%.0f round trips for %d requests: the leases do not work", trips, limit)
	}
}

func TestTokensSharedAndBudget(t *testing.T) {
	r := redistest.Start(t)
	clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
	keyLimits := map[string]Set{"k1": {TokensPerDay: {Value: 1000}, TokensPerMinute: {Value: 10000, Soft: true}}}
	ls := replicas(t, 3, r.Addr(), clk, nil, keyLimits)
	ctx := context.Background()
	prev := int64(1 << 62)
	for i := 0; i < 4; i++ {
		res := ls[i%3].Check("acme", "k1", keyLimits["k1"])
		if !res.Allowed {
			t.Fatalf("request %d refused: %+v", i, res.Denied)
		}
		if rem := res.Tokens.Remaining(); rem >= prev {
			t.Fatalf("request %d: remaining tokens %d, before %d", i, rem, prev)
		} else if i > 0 && rem != 1000-int64(i)*300 {
			t.Fatalf("request %d: remaining tokens %d, want %d", i, rem, 1000-i*300)
		}
		prev = res.Tokens.Remaining()
		if res.Tokens.Kind != TokensPerDay || res.Tokens.Reset.Sub(clk.Now()) <= 13*time.Hour {
			t.Fatalf("headers show %+v", res.Tokens)
		}
		// The usage arrives at another replica's access-log service.
		ls[(i+1)%3].Count("acme", "k1", 300, clk.Now())
		ls[(i+1)%3].Flush(ctx)
		for _, l := range ls {
			l.Flush(ctx) // every replica reads the shared counts back
		}
	}
	// 1200 of 1000 spent (the fourth request was in flight when the third's usage arrived):
	// every replica refuses now, with OpenAI's insufficient_quota.
	for i, l := range ls {
		res := l.Check("acme", "k1", keyLimits["k1"])
		if res.Allowed || res.Denied.Kind != TokensPerDay || res.Denied.Used != 1200 {
			t.Fatalf("replica %d: %+v", i, res)
		}
		var body struct {
			Error struct{ Code, Type, Message string }
		}
		if err := json.Unmarshal(res.Body("k1"), &body); err != nil || body.Error.Code != "insufficient_quota" || body.Error.Type != "tokens" ||
			!strings.Contains(body.Error.Message, "tokens per day (tokensPerDay) of API key k1: limit 1000, used 1200") {
			t.Fatalf("body %s", res.Body("k1"))
		}
	}
	// Midnight UTC: a new day.
	clk.Set(time.Date(2026, 12, 2, 0, 0, 1, 0, time.UTC))
	if res := ls[0].Check("acme", "k1", keyLimits["k1"]); !res.Allowed || res.Tokens.Remaining() != 1000 {
		t.Fatalf("new day: %+v", res)
	}
}

func TestSoftLimitWarns(t *testing.T) {
	r := redistest.Start(t)
	clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
	ls := replicas(t, 1, r.Addr(), clk, map[string]Tenant{"acme": {Limits: Set{RequestsPerMinute: {Value: 2, Soft: true}}}}, nil)
	for i := 1; i <= 4; i++ {
		res := ls[0].Check("acme", "k1", Set{})
		if !res.Allowed {
			t.Fatalf("soft limit refused request %d", i)
		}
		w := res.Warning()
		if (i > 2) != (w != "") {
			t.Fatalf("request %d: warning %q", i, w)
		}
		if i > 2 && !strings.Contains(w, "soft limit requestsPerMinute of the tenant exceeded: "+string(rune('0'+i))+" of 2") {
			t.Fatalf("warning %q", w)
		}
	}
}

func TestStoreDownAndBack(t *testing.T) {
	r := redistest.Start(t)
	clk := newClock(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC))
	tenants := map[string]Tenant{
		"acme":   {Limits: Set{RequestsPerMinute: {Value: 10}}},
		"globex": {Limits: Set{RequestsPerMinute: {Value: 10}}, OnStoreDown: v1alpha1.StoreDownClosed},
	}
	ls := replicas(t, 2, r.Addr(), clk, tenants, nil)
	ctx := context.Background()
	for i := range 4 {
		if !ls[i%2].Check("acme", "k1", Set{}).Allowed || !ls[i%2].Check("globex", "k2", Set{}).Allowed {
			t.Fatal("refused before the limit")
		}
	}
	r.Stop()
	// Within the grace both tenants go on from the last counts each replica knows.
	for _, tn := range []string{"acme", "globex"} {
		res := ls[0].Check(tn, "k", Set{})
		if !res.Allowed || !res.StoreDown || !strings.Contains(res.Warning(), "limits store unreachable") {
			t.Fatalf("%s in the grace: %+v", tn, res)
		}
	}
	time.Sleep(400 * time.Millisecond) // past the grace
	closed := ls[0].Check("globex", "k2", Set{})
	if closed.Allowed || !closed.StoreClosed || !strings.Contains(string(closed.Body("k2")), "rate_limit_store_unavailable") {
		t.Fatalf("globex fails closed: %+v", closed)
	}
	// acme fails open but still enforces what replica 0 knows: 4 before the outage (2 of
	// them through replica 0, but it saw the shared count 3) and its own since.
	n := 0
	for ls[0].Check("acme", "k1", Set{}).Allowed {
		n++
		if n > 20 {
			t.Fatal("store down, fail open: unlimited")
		}
	}
	if n != 10-4 {
		t.Fatalf("replica 0 allowed %d more while the store was down, want 6", n)
	}
	// Redis comes back empty (no persistence): the replicas put their counts back.
	r.Restart()
	for _, l := range ls {
		l.Flush(ctx)
		l.Flush(ctx)
	}
	if res := ls[1].Check("acme", "k1", Set{}); res.Allowed {
		t.Fatalf("after the restart acme's minute is spent, but replica 1 allowed: %+v", res.Requests)
	}
	st, _ := NewRedis(RedisOptions{Addr: r.Addr()})
	defer st.Close()
	v, err := st.Get(ctx, []string{counterKey("acme", "", RequestsPerMinute, clk.Now().Truncate(time.Minute))})
	if err != nil || v[0] != 10 {
		t.Fatalf("restored count %v, %v; want 10", v, err)
	}
}
