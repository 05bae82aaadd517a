package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inferplane/inferplane/e2e/redistest"
)

// BenchmarkCountEntry is the counting cost per access-log entry: Count (what the access-log
// service calls for each entry of a key with limits: its key's and its tenant's token
// counters, two token limits each) plus, amortised, the pushes to a real Redis (one Flush per
// 1,000 entries, as a replica taking 10,000 entries a second flushes every 100 ms), over
// 10,000 keys of 100 tenants. ns/op is per entry, the pushes included; count-ns is Count alone.
func BenchmarkCountEntry(b *testing.B) {
	r := redistest.Start(b)
	st, err := NewRedis(RedisOptions{Addr: r.Addr(), IOTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	keyLimits := Set{TokensPerMinute: {Value: 1e9}, TokensPerDay: {Value: 1e12}}
	tenantLimits := Tenant{Limits: Set{TokensPerMonth: {Value: 1e15}, TokensPerDay: {Value: 1e14}}}
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%016x", i)
	}
	l := New(Options{Store: st, SyncTimeout: time.Second,
		Tenants: func(string) Tenant { return tenantLimits },
		Keys:    func(string) (string, Set, bool) { return "", keyLimits, false }})
	// Keys: func returns tenant "" so the key's limits apply only when tenants match; give
	// them by tenant instead.
	l.opt.Keys = func(id string) (string, Set, bool) { return tenantOf(id), keyLimits, true }
	ctx := context.Background()
	var counting time.Duration
	b.ResetTimer()
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		t0 := time.Now()
		l.Count(tenantOf(id), id, 150, time.Time{})
		counting += time.Since(t0)
		i++
		if i%1000 == 0 {
			l.Flush(ctx)
		}
	}
	l.Flush(ctx)
	b.StopTimer()
	if l.downSince.Load() != 0 {
		b.Fatal("the store went down during the benchmark")
	}
	b.ReportMetric(float64(counting.Nanoseconds())/float64(i), "count-ns")
}

func tenantOf(id string) string { return fmt.Sprintf("tenant-%02d", id[len(id)-2:][0]%100) }
