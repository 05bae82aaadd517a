package metering

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// heapAfterGC is the live heap once garbage is collected.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMeterTransitions10k meters 10,000 VMIs (4 GPUs each, 2,000 tenants): each starts
// Running, the meter records its first whole hour, then it ends (Succeeded) and the meter
// records the rest; one op is the 20,000 transitions and both closes. It reports the time per
// transition and the meter's memory per VMI while they all run.
func BenchmarkMeterTransitions10k(b *testing.B) {
	const n = 10000
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	facts := make([]Fact, n)
	for i := range facts {
		tenant := fmt.Sprintf("tenant-%04d", i%2000)
		facts[i] = Fact{UID: fmt.Sprintf("uid-%05d", i), Namespace: tenant, Name: fmt.Sprintf("job-%d-r0-n0", i/2000), GPUs: 4,
			Labels: Labels{Tenant: tenant, Tier: "h100-dedicated", Job: fmt.Sprintf("job-%d", i/2000), Model: "Qwen/Qwen3-32B",
				NodeType: "metal3.gpu-h100", Replica: "0", VM: fmt.Sprintf("job-%d-r0-n0", i/2000)},
			Holding: true, Start: t0.Add(time.Duration(i) * time.Second)}
	}
	var perVMI float64
	records := 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		before := heapAfterGC()
		b.StartTimer()
		m := NewMeter("bench", t0, time.Minute)
		for i := range facts {
			m.Seen(facts[i], t0.Add(3*time.Hour))
		}
		b.StopTimer()
		perVMI = float64(heapAfterGC()-before) / n
		b.StartTimer()
		records = len(m.Close())
		for i := range facts {
			f := facts[i]
			f.Holding, f.Terminal, f.End = false, true, t0.Add(3*time.Hour+time.Duration(i)*time.Second)
			m.Seen(f, t0.Add(4*time.Hour))
		}
		records += len(m.Close())
		if m.Len() != n {
			b.Fatalf("%d VMIs accounted for, want %d", m.Len(), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2*n), "ns/transition")
	b.ReportMetric(perVMI, "heap-B/VMI")
	b.ReportMetric(float64(records), "records/op")
}

// A month of records for 2,000 tenants: per tenant two jobs (one holding 1 GPU, one 8) running
// every hour of 30 days, and one key's tokens every hour: 4,320,000 records.
const (
	benchTenants = 2000
	benchHours   = 30 * 24
)

var (
	monthOnce   sync.Once
	monthIndex  *Index
	monthEvents []Event
	monthHeap   uint64
	monthStart  = time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
)

func monthOfRecords() {
	events := make([]Event, 0, benchTenants*benchHours*3)
	for t := range benchTenants {
		tenant := fmt.Sprintf("tenant-%04d", t)
		chat := Labels{Tenant: tenant, Tier: "h100-dedicated", Job: "chat", Model: "Qwen/Qwen3-32B", NodeType: "metal3.gpu-h100", Replica: "0", VM: "chat-r0-n0"}
		big := Labels{Tenant: tenant, Tier: "h100-dedicated", Job: "big", Model: "moonshotai/Kimi-K2-Instruct", NodeType: "metal3.gpu-h100", Replica: "0", VM: "big-r0-n0"}
		key := Labels{Tenant: tenant, Tier: "h100-dedicated", Job: "chat", Model: "Qwen/Qwen3-32B", Key: fmt.Sprintf("%016x", t)}
		for h := range benchHours {
			from := monthStart.Add(time.Duration(h) * time.Hour)
			to := from.Add(time.Hour)
			events = append(events,
				Event{Type: TypeGPU, Time: from, Data: Data{Labels: chat, PeriodEnd: to, GPUs: 1, Seconds: 3600, GPUSeconds: 3600}},
				Event{Type: TypeGPU, Time: from, Data: Data{Labels: big, PeriodEnd: to, GPUs: 8, Seconds: 3600, GPUSeconds: 8 * 3600}},
				Event{Type: TypeTokens, Time: from, Data: Data{Labels: key, PeriodEnd: to, Requests: 100, TokensIn: 50000, TokensOut: 10000}})
		}
	}
	// Records arrive hour by hour across tenants, as the meter writes them.
	slices.SortStableFunc(events, func(a, b Event) int { return a.Time.Compare(b.Time) })
	mid := heapAfterGC()
	x := NewIndex()
	x.Add(events...)
	monthHeap = heapAfterGC() - mid
	monthIndex, monthEvents = x, events
}

// queryLatencies runs q for random tenants b.N times and reports p50 and p99.
func queryLatencies(b *testing.B, q func(tenant string)) {
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		tenant := fmt.Sprintf("tenant-%04d", rng.IntN(benchTenants))
		start := time.Now()
		q(tenant)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkUsageQueryMonth: the usage query (a month, grouped by day: 30 rows of GPU-seconds
// and tokens) of one tenant among 2,000 from the index; it reports the index's memory.
func BenchmarkUsageQueryMonth(b *testing.B) {
	monthOnce.Do(monthOfRecords)
	to := monthStart.Add(benchHours * time.Hour)
	queryLatencies(b, func(tenant string) {
		if g := monthIndex.Query(tenant, monthStart, to, ByDay, nil); len(g) != 30 {
			b.Fatalf("%d groups, want 30", len(g))
		}
	})
	b.ReportMetric(float64(monthHeap)/(1<<20), "index-MiB")
	b.ReportMetric(float64(len(monthEvents)), "records")
}

// BenchmarkUsageQueryScanMonth is the baseline: the same answer summed from the month's records
// held in memory (what answering from the records without the index costs at best: no file is
// read).
func BenchmarkUsageQueryScanMonth(b *testing.B) {
	monthOnce.Do(monthOfRecords)
	queryLatencies(b, func(tenant string) {
		sums := map[string]*Usage{}
		for i := range monthEvents {
			e := &monthEvents[i]
			if e.Data.Tenant != tenant {
				continue
			}
			day := e.Time.Format(time.DateOnly)
			u := sums[day]
			if u == nil {
				u = &Usage{}
				sums[day] = u
			}
			u.add(Usage{GPUSeconds: uint64(e.Data.GPUSeconds), Requests: e.Data.Requests, TokensIn: e.Data.TokensIn, TokensOut: e.Data.TokensOut})
		}
		if len(sums) != 30 {
			b.Fatalf("%d groups, want 30", len(sums))
		}
	})
}
