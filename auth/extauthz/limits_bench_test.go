package extauthz

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/e2e/redistest"
)

// BenchmarkCheckLimits is the whole Check handler (no gRPC: what the service adds to each
// call), with 100,000 keys, against a real Redis on loopback, in one run:
//
//   - none: keys without limits, and no tenant limits (the check before limits existed);
//   - far: every key with its own limits (60,000 requests a minute, token budgets a day and a
//     month) and its tenant with limits too, all far from reached: decided from memory, with a
//     round trip to Redis only when a replica's lease of request units runs out;
//   - near: every check of one key past a soft limit of 1 request a minute: a lease of one
//     unit, so each check is a round trip to Redis (what a key near a hard limit costs).
//
// It reports p50/p99 of each and the p99 each adds to none.
func BenchmarkCheckLimits(b *testing.B) {
	f, clear := benchFixture(b)
	r := redistest.Start(b)
	st, err := limits.NewRedis(limits.RedisOptions{Addr: r.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	// Every key gets limits of its own in the index (as the key store would give them).
	recs := make([]keys.Record, 0, len(clear))
	for i, k := range clear {
		id, _ := keys.ParseID(k)
		recs = append(recs, keys.Record{ID: id, Tenant: fmt.Sprintf("tenant-%02d", i%100), Hash: f.hasher.Hex(k), CreatedAt: time.Now().UTC(),
			Limits: &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 60_000}, TokensPerDay: &v1alpha1.Limit{Value: 1e9},
				TokensPerMonth: &v1alpha1.Limit{Value: 1e12, Mode: v1alpha1.LimitSoft}}})
	}
	limited := keys.NewIndex()
	limited.Replace(recs)
	tenant := limits.Tenant{Limits: limits.Set{limits.RequestsPerMinute: {Value: 1e9}, limits.TokensPerMonth: {Value: 1e15}}}
	lim := limits.New(limits.Options{Store: st, Tenants: func(string) limits.Tenant { return tenant }, Keys: limited.Limits})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { lim.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	plain := New(&keys.Verifier{Hasher: f.hasher, Index: f.index}, quiet)
	withLimits := New(&keys.Verifier{Hasher: f.hasher, Index: limited}, quiet)
	withLimits.Limits = lim
	reqs := make([]*authv3.CheckRequest, 4096)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range reqs {
		j := rng.IntN(len(clear))
		reqs[i] = request(fmt.Sprintf("tenant-%02d", j%100), "chat", map[string]string{"authorization": "Bearer " + clear[j]})
	}
	// near: one key, a soft limit of 1 a minute, nothing else.
	nearIdx := keys.NewIndex()
	nearRec := recs[0]
	nearRec.Limits = &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 1, Mode: v1alpha1.LimitSoft}}
	nearIdx.Replace([]keys.Record{nearRec})
	nearLim := limits.New(limits.Options{Store: st})
	near := New(&keys.Verifier{Hasher: f.hasher, Index: nearIdx}, quiet)
	near.Limits = nearLim
	nearReq := request(nearRec.Tenant, "chat", map[string]string{"authorization": "Bearer " + clear[0]})

	run := func(s *Server, pick func(i int) *authv3.CheckRequest, n int) []time.Duration {
		lat := make([]time.Duration, n)
		for i := range n {
			req := pick(i)
			t0 := time.Now()
			resp, _ := s.Check(context.Background(), req)
			lat[i] = time.Since(t0)
			if resp.GetOkResponse() == nil {
				b.Fatalf("refused: %v", resp.GetDeniedResponse().GetBody())
			}
		}
		return lat
	}
	n := max(b.N, 1000)
	all := func(i int) *authv3.CheckRequest { return reqs[i%len(reqs)] }
	run(withLimits, all, len(reqs)) // first reservations and reads of every counter: not measured
	b.ResetTimer()
	var none, far, nearLat []time.Duration
	// Interleaved in blocks, so that a slow moment of the shared machine hits all three.
	for done := 0; done < n; done += 1000 {
		none = append(none, run(plain, all, 1000)...)
		far = append(far, run(withLimits, all, 1000)...)
		nearLat = append(nearLat, run(near, func(int) *authv3.CheckRequest { return nearReq }, 200)...)
	}
	b.StopTimer()
	p := func(d []time.Duration, q float64) float64 { return us(pct(d, q)) }
	b.ReportMetric(p(none, 0.5), "none-p50-us")
	b.ReportMetric(p(none, 0.99), "none-p99-us")
	b.ReportMetric(p(far, 0.5), "far-p50-us")
	b.ReportMetric(p(far, 0.99), "far-p99-us")
	b.ReportMetric(p(nearLat, 0.5), "near-p50-us")
	b.ReportMetric(p(nearLat, 0.99), "near-p99-us")
	b.ReportMetric(p(far, 0.99)-p(none, 0.99), "far-added-p99-us")
	b.ReportMetric(p(nearLat, 0.99)-p(none, 0.99), "near-added-p99-us")
}
