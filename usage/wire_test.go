package usage

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// wireCases are entries with everything Envoy may send around the fields we read.
func wireCases() []*datav3.HTTPAccessLogEntry {
	now := time.Date(2026, 3, 2, 10, 0, 0, 123456789, time.UTC)
	base := []logEntry{
		{host: "chat.acme.models.example.com", tenant: "acme", job: "chat", keyID: "00112233aabbccdd", code: 200, start: now, latency: 1234 * time.Millisecond, ttfb: 80 * time.Millisecond, in: 12, out: 345},
		{host: "chat.acme.models.example.com", code: 401, denied: true, start: now, latency: time.Millisecond, in: -1},
		{host: "open.globex.models.example.com:443", code: 503, start: now, latency: 30 * time.Second, in: -1},
		{host: "open.globex.models.example.com", code: 0, start: now, in: -1},
		{host: "elsewhere.example.org", code: 200, start: now, latency: time.Millisecond, in: -1},
		{host: "embed.acme.models.example.com", tenant: "acme", job: "embed", keyID: "k", code: 200, start: now, latency: time.Millisecond, in: 99, out: 0},
	}
	var out []*datav3.HTTPAccessLogEntry
	for i, l := range base {
		e := l.proto()
		// What a real entry carries besides: addresses, headers, TLS, other metadata, duration.
		addr := &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.1.2.3", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 443}}}}
		c := e.CommonProperties
		c.DownstreamRemoteAddress, c.UpstreamRemoteAddress = addr, addr
		c.TlsProperties = &datav3.TLSProperties{TlsSniHostname: l.host, TlsVersion: datav3.TLSProperties_TLSv1_3}
		c.UpstreamCluster, c.RouteName = "cluster-x", "route-y"
		c.Duration = durationpb.New(l.latency + time.Millisecond)
		if i == 3 {
			c.TimeToLastDownstreamTxByte = nil // falls back to duration
		}
		c.Metadata.FilterMetadata["envoy.filters.http.rbac"] = &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewBoolValue(true)}}
		c.CustomTags = map[string]string{"a": "b"}
		e.Request.RequestHeaders = map[string]string{"x-request-id": "r"}
		e.Request.Port = wrapperspb.UInt32(443)
		e.Response.ResponseHeaders = map[string]string{"content-type": "application/json"}
		e.Response.ResponseCodeDetails = "via_upstream"
		e.ProtocolVersion = datav3.HTTPAccessLogEntry_HTTP2
		out = append(out, e)
	}
	return out
}

func TestWireMatchesProto(t *testing.T) {
	entries := wireCases()
	msg := &accesslogv3.StreamAccessLogsMessage{
		Identifier: &accesslogv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: "envoy-7", Cluster: "edge"}, LogName: "inferplane"},
		LogEntries: &accesslogv3.StreamAccessLogsMessage_HttpLogs{HttpLogs: &accesslogv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries}},
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	resolve := HostResolver("models.example.com")
	got, node, skipped, err := decodeMessage(b, resolve, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []Entry
	wantSkipped := 0
	for _, e := range entries {
		if x, ok := FromHTTPLog(e, resolve); ok {
			want = append(want, x)
		} else {
			wantSkipped++
		}
	}
	if node != "envoy-7" || skipped != wantSkipped || skipped != 1 {
		t.Errorf("node %q skipped %d, want envoy-7 and %d", node, skipped, wantSkipped)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("wire decoding differs from the generated types:\n got %+v\nwant %+v", got, want)
	}
	if got[0].TokensOut != 345 || got[0].KeyID != "00112233aabbccdd" || got[2].Code != 503 || got[3].Latency != time.Millisecond {
		t.Errorf("decoded %+v", got)
	}
}

// TestWireNeverPanics feeds truncated and corrupted messages: an error or a result, never a
// panic.
func TestWireNeverPanics(t *testing.T) {
	msg := &accesslogv3.StreamAccessLogsMessage{LogEntries: &accesslogv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &accesslogv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: wireCases()}}}
	b, _ := proto.Marshal(msg)
	r := rand.New(rand.NewPCG(5, 6))
	resolve := HostResolver("models.example.com")
	for i := range 5000 {
		c := append([]byte(nil), b...)
		switch i % 3 {
		case 0:
			c = c[:r.IntN(len(c))]
		default:
			for range 1 + r.IntN(8) {
				c[r.IntN(len(c))] = byte(r.Uint32())
			}
		}
		_, _, _, _ = decodeMessage(c, resolve, nil)
	}
	if _, _, _, err := decodeMessage([]byte{0x12, 0xff}, resolve, nil); err == nil {
		t.Error("a truncated message decoded without error")
	}
}
