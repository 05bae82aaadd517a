package usage

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/inferplane/inferplane/internal/envoymeta"
)

// logEntry builds an access log entry as Envoy's gRPC access logger sends it.
type logEntry struct {
	host        string
	tenant, job string // ext_authz metadata; empty for keyless endpoints
	keyID       string
	code        int
	start       time.Time
	latency     time.Duration
	ttfb        time.Duration
	in, out     int // -1: no usage metadata
	denied      bool
}

func (l logEntry) proto() *datav3.HTTPAccessLogEntry {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	if l.tenant != "" {
		md.FilterMetadata[envoymeta.AuthzNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{
			envoymeta.AuthzTenant: structpb.NewStringValue(l.tenant),
			envoymeta.AuthzJob:    structpb.NewStringValue(l.job),
			envoymeta.AuthzKeyID:  structpb.NewStringValue(l.keyID),
		}}
	}
	if l.in >= 0 {
		md.FilterMetadata[envoymeta.UsageNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{
			envoymeta.PromptTokens:     structpb.NewNumberValue(float64(l.in)),
			envoymeta.CompletionTokens: structpb.NewNumberValue(float64(l.out)),
		}}
	}
	c := &datav3.AccessLogCommon{
		StartTime:                  timestamppb.New(l.start),
		TimeToLastDownstreamTxByte: durationpb.New(l.latency),
		Metadata:                   md,
		UpstreamCluster:            l.job,
	}
	if l.ttfb > 0 {
		c.TimeToFirstUpstreamRxByte = durationpb.New(l.ttfb)
	}
	if l.denied {
		c.ResponseFlags = &datav3.ResponseFlags{UnauthorizedDetails: &datav3.ResponseFlags_Unauthorized{
			Reason: datav3.ResponseFlags_Unauthorized_EXTERNAL_SERVICE}}
	}
	e := &datav3.HTTPAccessLogEntry{
		CommonProperties: c,
		Request:          &datav3.HTTPRequestProperties{Authority: l.host, Path: "/v1/chat/completions"},
		Response:         &datav3.HTTPResponseProperties{},
	}
	if l.code > 0 {
		e.Response.ResponseCode = wrapperspb.UInt32(uint32(l.code))
	}
	return e
}

type alsFixture struct {
	agg    *Aggregator
	client accesslogv3.AccessLogServiceClient
}

func startALS(t testing.TB, opt Options) *alsFixture {
	t.Helper()
	agg := NewAggregator(opt)
	svc := NewService(agg, HostResolver("models.example.com"), nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	svc.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &alsFixture{agg: agg, client: accesslogv3.NewAccessLogServiceClient(conn)}
}

// send streams entries in batches, as one Envoy does, and closes the stream, which returns
// once the server has folded in every batch.
func (f *alsFixture) send(t testing.TB, batch int, entries []*datav3.HTTPAccessLogEntry) {
	t.Helper()
	stream, err := f.client.StreamAccessLogs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first := true
	for len(entries) > 0 {
		n := min(batch, len(entries))
		msg := &accesslogv3.StreamAccessLogsMessage{LogEntries: &accesslogv3.StreamAccessLogsMessage_HttpLogs{
			HttpLogs: &accesslogv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries[:n]}}}
		if first {
			msg.Identifier = &accesslogv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: "envoy-0"}, LogName: "inferplane"}
			first = false
		}
		if err := stream.Send(msg); err != nil {
			t.Fatal(err)
		}
		entries = entries[n:]
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func TestStreamAccessLogsFigures(t *testing.T) {
	now := t0.Add(30 * time.Minute)
	f := startALS(t, Options{Now: func() time.Time { return now }})
	var entries []*datav3.HTTPAccessLogEntry
	// acme/chat: 100 requests with a key, latencies 1..100 ms, TTFB a tenth of that; 3 fail
	// with 503 and 1 with no response; 2 are refused by the key check.
	for i := 1; i <= 100; i++ {
		code := 200
		switch {
		case i%25 == 0 && i < 100:
			code = 503
		case i == 100:
			code = 0
		}
		key := "k1"
		if i > 60 {
			key = "k2"
		}
		entries = append(entries, logEntry{host: "chat.acme.models.example.com", tenant: "acme", job: "chat", keyID: key, code: code,
			start: now.Add(-2 * time.Minute), latency: time.Duration(i) * time.Millisecond, ttfb: time.Duration(i) * 100 * time.Microsecond,
			in: 10, out: 20}.proto())
	}
	for range 2 {
		entries = append(entries, logEntry{host: "chat.acme.models.example.com:443", code: 401, denied: true, start: now, latency: time.Millisecond, in: -1}.proto())
	}
	// k1 an hour earlier too (hourly buckets), beyond the health window.
	entries = append(entries, logEntry{host: "chat.acme.models.example.com", tenant: "acme", job: "chat", keyID: "k1", code: 200,
		start: now.Add(-time.Hour), latency: time.Second, in: 1000, out: 1}.proto())
	// globex/open: a keyless endpoint, attributed by host; 4xx does not count as failure.
	for i := range 30 {
		code := 200
		if i < 3 {
			code = 400
		}
		entries = append(entries, logEntry{host: "open.globex.models.example.com", code: code, start: now, latency: 5 * time.Millisecond, in: -1}.proto())
	}
	// Not ours: a host outside the domain.
	entries = append(entries, logEntry{host: "example.org", code: 200, start: now, latency: time.Millisecond, in: -1}.proto())

	f.send(t, 7, entries)

	rep := f.agg.Health("")
	if len(rep.Endpoints) != 2 {
		t.Fatalf("endpoints: %+v", rep.Endpoints)
	}
	chat, open := rep.Endpoints[0], rep.Endpoints[1]
	if chat.Tenant != "acme" || chat.Job != "chat" || open.Tenant != "globex" || open.Job != "open" {
		t.Fatalf("endpoints: %+v", rep.Endpoints)
	}
	if chat.Requests != 100 || chat.Errors != 4 || chat.Denied != 2 {
		t.Errorf("acme/chat counts: requests=%d errors=%d denied=%d, want 100 4 2", chat.Requests, chat.Errors, chat.Denied)
	}
	if *chat.SuccessRate != 0.96 {
		t.Errorf("acme/chat success rate %v, want 0.96", *chat.SuccessRate)
	}
	near := func(name string, got *float64, want float64) {
		if got == nil || *got < want*0.98 || *got > want*1.02 {
			t.Errorf("%s = %v, want %v within 2%%", name, got, want)
		}
	}
	near("p50", chat.LatencyP50Ms, 50)
	near("p99", chat.LatencyP99Ms, 99)
	near("ttfb p50", chat.TTFBP50Ms, 5)
	near("ttfb p99", chat.TTFBP99Ms, 9.9)
	if chat.Status != StatusHealthy {
		t.Errorf("acme/chat at 96%% success: %s %v, want healthy", chat.Status, chat.Reasons)
	}
	if open.Requests != 30 || open.Errors != 0 || *open.SuccessRate != 1 {
		t.Errorf("globex/open: %+v", open)
	}
	if got := f.agg.Health("globex"); len(got.Endpoints) != 1 || got.Endpoints[0].Job != "open" {
		t.Errorf("tenant filter: %+v", got.Endpoints)
	}

	u := f.agg.Usage(UsageQuery{Tenant: "acme"})
	if len(u) != 2 || u[0].KeyID != "k1" || u[1].KeyID != "k2" {
		t.Fatalf("usage: %+v", u)
	}
	k1 := u[0]
	if len(k1.Hours) != 2 || k1.Hours[0].Hour != t0.Add(-time.Hour+30*time.Minute).Truncate(time.Hour) {
		t.Fatalf("k1 hours: %+v", k1.Hours)
	}
	if h := k1.Hours[0]; h.Requests != 1 || h.TokensIn != 1000 || h.TokensOut != 1 {
		t.Errorf("k1 first hour: %+v", h)
	}
	if h := k1.Hours[1]; h.Requests != 60 || h.TokensIn != 600 || h.TokensOut != 1200 {
		t.Errorf("k1 second hour: %+v", h)
	}
	if k1.Total.Requests != 61 || k1.Total.TokensIn != 1600 || strings.Join(k1.Endpoints, ",") != "chat" {
		t.Errorf("k1 total: %+v", k1)
	}
	if k2 := u[1]; k2.Total.Requests != 40 || k2.Total.TokensOut != 800 {
		t.Errorf("k2: %+v", k2)
	}
	if got := f.agg.Usage(UsageQuery{KeyID: "k1", From: now.Add(-10 * time.Minute)}); len(got) != 1 || len(got[0].Hours) != 1 || got[0].Total.Requests != 60 {
		t.Errorf("since 10m: %+v", got)
	}

	// Prometheus: the counters, as a scrape sees them.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.agg.Collector())
	got := gather(t, reg)
	for series, want := range map[string]float64{
		`inferplane_endpoint_requests_total{code_class="2xx",job="chat",tenant="acme"}`:   97, // 96 in the window, 1 an hour earlier
		`inferplane_endpoint_requests_total{code_class="5xx",job="chat",tenant="acme"}`:   3,
		`inferplane_endpoint_requests_total{code_class="0xx",job="chat",tenant="acme"}`:   1,
		`inferplane_endpoint_requests_total{code_class="4xx",job="open",tenant="globex"}`: 3,
		`inferplane_endpoint_denied_total{job="chat",tenant="acme"}`:                      2,
		`inferplane_endpoint_tokens_total{direction="in",job="chat",tenant="acme"}`:       2000,
		`inferplane_endpoint_tokens_total{direction="out",job="chat",tenant="acme"}`:      2001,
		`inferplane_endpoint_status{job="chat",status="healthy",tenant="acme"}`:           1,
		`inferplane_endpoint_status{job="chat",status="degraded",tenant="acme"}`:          0,
		`inferplane_endpoint_success_ratio{job="chat",tenant="acme"}`:                     0.96,
		`inferplane_usage_log_entries_total{result="recorded"}`:                           133,
		`inferplane_usage_log_entries_total{result="unattributed"}`:                       1,
		`inferplane_endpoint_request_duration_seconds_count{job="chat",tenant="acme"}`:    101,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if _, ok := got[`inferplane_key_requests_total{key_id="k1",tenant="acme"}`]; ok {
		t.Error("per-key series without PerKeyMetrics")
	}
}

// gather scrapes reg into "name{labels}" -> value (histograms as _count).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				name, v = name+"_count", float64(m.GetHistogram().GetSampleCount())
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

func TestWindowSlides(t *testing.T) {
	now := t0
	agg := NewAggregator(Options{Window: 2 * time.Minute, Now: func() time.Time { return now }})
	agg.Add(Entry{Tenant: "a", Job: "j", Code: 500, Done: now, Latency: time.Millisecond})
	if h := agg.Health("").Endpoints[0]; h.Requests != 1 || h.Errors != 1 {
		t.Fatalf("%+v", h)
	}
	now = now.Add(3 * time.Minute)
	agg.Add(Entry{Tenant: "a", Job: "j", Code: 200, Done: now, Latency: time.Millisecond})
	h := agg.Health("").Endpoints[0]
	if h.Requests != 1 || h.Errors != 0 {
		t.Fatalf("after the window moved: %+v", h)
	}
	// An entry older than the window counts for usage and metrics, not for health.
	agg.Add(Entry{Tenant: "a", Job: "j", KeyID: "k", Code: 500, Done: now.Add(-10 * time.Minute), Latency: time.Millisecond, TokensIn: 5})
	if h := agg.Health("").Endpoints[0]; h.Errors != 0 {
		t.Fatalf("old entry counted in the window: %+v", h)
	}
	if u := agg.Usage(UsageQuery{KeyID: "k"}); len(u) != 1 || u[0].Total.TokensIn != 5 {
		t.Fatalf("old entry lost for usage: %+v", u)
	}
}

func TestKeyRetention(t *testing.T) {
	now := t0
	agg := NewAggregator(Options{KeyRetention: 2 * time.Hour, Now: func() time.Time { return now }})
	agg.Add(Entry{Tenant: "a", Job: "j", KeyID: "k", Code: 200, Done: now, TokensIn: 1})
	now = now.Add(3 * time.Hour)
	agg.Add(Entry{Tenant: "a", Job: "j", KeyID: "k", Code: 200, Done: now, TokensIn: 2})
	u := agg.Usage(UsageQuery{KeyID: "k"})
	if len(u[0].Hours) != 1 || u[0].Total.TokensIn != 2 {
		t.Fatalf("hours past the retention kept: %+v", u[0])
	}
}

func TestClassify(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		name string
		h    EndpointHealth
		th   Thresholds
		want Status
	}{
		{"quiet, no replica info", EndpointHealth{}, Thresholds{}, StatusHealthy},
		{"all replicas ready", EndpointHealth{Replicas: &ReplicaCount{Ready: 3, Total: 3}, Requests: 100, SuccessRate: f(1)}, Thresholds{}, StatusHealthy},
		{"one replica down", EndpointHealth{Replicas: &ReplicaCount{Ready: 2, Total: 3}}, Thresholds{}, StatusDegraded},
		{"no ready replica", EndpointHealth{Replicas: &ReplicaCount{Ready: 0, Total: 3}, Requests: 100, SuccessRate: f(1)}, Thresholds{}, StatusUnavailable},
		{"no replicas at all", EndpointHealth{Replicas: &ReplicaCount{}}, Thresholds{}, StatusUnavailable},
		{"success 90%", EndpointHealth{Requests: 100, SuccessRate: f(0.9)}, Thresholds{}, StatusDegraded},
		{"success 40%", EndpointHealth{Requests: 100, SuccessRate: f(0.4)}, Thresholds{}, StatusUnavailable},
		{"success 40% on too few requests", EndpointHealth{Requests: 5, SuccessRate: f(0.4)}, Thresholds{}, StatusHealthy},
		{"degraded replicas and failing traffic", EndpointHealth{Replicas: &ReplicaCount{Ready: 1, Total: 2}, Requests: 100, SuccessRate: f(0.2)}, Thresholds{}, StatusUnavailable},
		{"slow p99 with the check on", EndpointHealth{LatencyP99Ms: f(9000)}, Thresholds{SlowP99: 5 * time.Second}, StatusDegraded},
		{"slow p99 with the check off", EndpointHealth{LatencyP99Ms: f(9000)}, Thresholds{}, StatusHealthy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reasons := Classify(&tc.h, tc.th)
			if got != tc.want {
				t.Fatalf("got %s (%v), want %s", got, reasons, tc.want)
			}
			if got != StatusHealthy && len(reasons) == 0 {
				t.Fatal("no reason given")
			}
		})
	}
}

func TestReplicaSourceJoins(t *testing.T) {
	agg := NewAggregator(Options{Now: func() time.Time { return t0 }, Replicas: ReplicaFunc(func() []ReplicaCount {
		return []ReplicaCount{{Tenant: "acme", Job: "idle", Ready: 0, Total: 2}, {Tenant: "acme", Job: "chat", Ready: 2, Total: 2}}
	})})
	agg.Add(Entry{Tenant: "acme", Job: "chat", Code: 200, Done: t0, Latency: time.Millisecond})
	rep := agg.Health("acme")
	if len(rep.Endpoints) != 2 || rep.Endpoints[1].Job != "idle" || rep.Endpoints[1].Status != StatusUnavailable ||
		rep.Endpoints[0].Status != StatusHealthy || rep.Endpoints[0].Replicas.Ready != 2 {
		t.Fatalf("%+v", rep.Endpoints)
	}
}

func TestHostResolver(t *testing.T) {
	r := HostResolver("models.example.com")
	for host, want := range map[string]string{
		"chat.acme.models.example.com":      "acme/chat",
		"Chat.ACME.models.example.com:8080": "acme/chat",
		"chat.acme.models.example.com.":     "acme/chat",
		"v1.chat.acme.models.example.com":   "acme/v1.chat",
		"acme.models.example.com":           "",
		"chat.acme.example.org":             "",
		"models.example.com":                "",
		"":                                  "",
	} {
		tenant, job, ok := r(host)
		got := ""
		if ok {
			got = tenant + "/" + job
		}
		if got != want {
			t.Errorf("%q: got %q, want %q", host, got, want)
		}
	}
}

func TestHistogramPrecision(t *testing.T) {
	for _, d := range []time.Duration{0, 17 * time.Microsecond, 63 * time.Microsecond, 64 * time.Microsecond,
		time.Millisecond, 1234567 * time.Microsecond, 10 * time.Minute, 48 * time.Hour} {
		got := histValue(histIndex(d))
		if diff := (got - d).Abs(); float64(diff) > 0.016*float64(d)+float64(time.Microsecond) {
			t.Errorf("%s -> %s: off by more than 1.6%%", d, got)
		}
	}
	if q := quantiles(nil, 0.5); q != nil {
		t.Errorf("empty: %v", q)
	}
}

func TestHandler(t *testing.T) {
	now := t0
	agg := NewAggregator(Options{Now: func() time.Time { return now }})
	agg.Add(Entry{Tenant: "acme", Job: "chat", KeyID: "k1", Code: 200, Done: now, Latency: 40 * time.Millisecond, TokensIn: 3, TokensOut: 4})
	srv := httptest.NewServer(Handler(agg))
	defer srv.Close()

	get := func(path string, code int, v any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != code {
			t.Fatalf("%s: status %d, want %d", path, resp.StatusCode, code)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var h HealthReport
	get(HealthPath+"?tenant=acme", 200, &h)
	if len(h.Endpoints) != 1 || h.Endpoints[0].Requests != 1 || h.Window != "5m0s" {
		t.Fatalf("health: %+v", h)
	}
	var u UsageReport
	get(UsagePath+"?tenant=acme&since=24h", 200, &u)
	if len(u.Keys) != 1 || u.Keys[0].Total.TokensOut != 4 || !u.From.Equal(now.Add(-24*time.Hour)) {
		t.Fatalf("usage: %+v", u)
	}
	var e map[string]string
	get(UsagePath+"?since=yesterday", 400, &e)
	if !strings.Contains(e["error"], "since") {
		t.Fatalf("bad since: %v", e)
	}
	resp, _ := http.Post(srv.URL+HealthPath, "application/json", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

// BenchmarkIngestGRPC streams access log entries over one real gRPC stream on loopback in
// batches of 100 (an Envoy's default 16 KiB buffer holds about that many) into an aggregator
// with 2,000 endpoints and 10,000 keys, and reports entries per second; then the same through
// a service built the obvious way, on the generated types (FromHTTPLog), as the baseline.
func BenchmarkIngestGRPC(b *testing.B) {
	const pool = 20_000
	now := time.Now()
	entries := make([]*datav3.HTTPAccessLogEntry, pool)
	for i := range entries {
		job := fmt.Sprintf("job-%04d", i%2000)
		entries[i] = logEntry{host: job + ".acme.models.example.com", tenant: "acme", job: job, keyID: fmt.Sprintf("%016x", i%10_000),
			code: 200, start: now, latency: time.Duration(1+i%5000) * time.Millisecond, ttfb: 30 * time.Millisecond, in: 100, out: 200}.proto()
	}
	b.ResetTimer()
	rate, agg := ingest(b, entries, b.N, func(g *grpc.Server, agg *Aggregator) {
		NewService(agg, HostResolver("models.example.com"), nil).Register(g)
	})
	b.StopTimer()
	if got := agg.Health("").Endpoints; len(got) != min(2000, (b.N+99)/100*100) {
		b.Fatalf("%d endpoints", len(got))
	}
	b.ReportMetric(rate, "entries/s")
	if b.N >= 100_000 {
		base, _ := ingest(b, entries, 100_000, func(g *grpc.Server, agg *Aggregator) {
			accesslogv3.RegisterAccessLogServiceServer(g, &generatedALS{agg: agg, resolve: HostResolver("models.example.com")})
		})
		b.ReportMetric(base, "baseline-generated-entries/s")
		b.ReportMetric(rate/base, "x-baseline")
	}
}

// ingest sends n entries (rounded up to whole batches of 100) to a fresh server and returns
// entries per second, from the first send until the server has folded in the last batch.
func ingest(b *testing.B, entries []*datav3.HTTPAccessLogEntry, n int, register func(*grpc.Server, *Aggregator)) (float64, *Aggregator) {
	agg := NewAggregator(Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	register(g, agg)
	go g.Serve(lis)
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	stream, err := accesslogv3.NewAccessLogServiceClient(conn).StreamAccessLogs(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	// Envoy encodes the messages (in C++); encode ours once up front so that the figure is
	// the receiving side's, which is ours.
	msgs := make([]*grpc.PreparedMsg, len(entries)/100)
	for i := range msgs {
		msgs[i] = &grpc.PreparedMsg{}
		m := &accesslogv3.StreamAccessLogsMessage{LogEntries: &accesslogv3.StreamAccessLogsMessage_HttpLogs{
			HttpLogs: &accesslogv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries[i*100 : (i+1)*100]}}}
		if err := msgs[i].Encode(stream, m); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	sent := 0
	for i := 0; sent < n; i++ {
		if err := stream.SendMsg(msgs[i%len(msgs)]); err != nil {
			b.Fatal(err)
		}
		sent += 100
	}
	if _, err := stream.CloseAndRecv(); err != nil { // returns once the server took them all
		b.Fatal(err)
	}
	return float64(sent) / time.Since(start).Seconds(), agg
}

// generatedALS is the baseline: the service on the generated types.
type generatedALS struct {
	accesslogv3.UnimplementedAccessLogServiceServer
	agg     *Aggregator
	resolve Resolver
}

func (s *generatedALS) StreamAccessLogs(stream accesslogv3.AccessLogService_StreamAccessLogsServer) error {
	var batch []Entry
	for {
		msg, err := stream.Recv()
		if err != nil {
			return stream.SendAndClose(&accesslogv3.StreamAccessLogsResponse{})
		}
		batch = batch[:0]
		for _, l := range msg.GetHttpLogs().GetLogEntry() {
			if e, ok := FromHTTPLog(l, s.resolve); ok {
				batch = append(batch, e)
			}
		}
		s.agg.Add(batch...)
	}
}
