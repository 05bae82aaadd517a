package server

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func manyNames(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d/job%d", prefix, i%50, i)
	}
	return out
}

func encode(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}

// TestNameTableDecodesLikeProto: whatever the bytes, decode gives what proto.Unmarshal gives
// (the same request, or an error), and a list of names seen before is the same slice.
func TestNameTableDecodesLikeProto(t *testing.T) {
	long := manyNames(500, "t")
	ack := &discoveryv3.DiscoveryRequest{VersionInfo: "v1", TypeUrl: resourcev3.EndpointType, ResourceNames: long, ResponseNonce: "7"}
	first := proto.Clone(ack).(*discoveryv3.DiscoveryRequest)
	first.Node = &corev3.Node{Id: "envoy-1", Cluster: "gw"}
	nack := proto.Clone(ack).(*discoveryv3.DiscoveryRequest)
	nack.ErrorDetail = &status.Status{Code: 3, Message: "rejected"}
	other := proto.Clone(ack).(*discoveryv3.DiscoveryRequest)
	other.ResourceNames = append(manyNames(500, "t"), "t9/new")

	// Names split around another field: still valid protobuf.
	split := encode(t, &discoveryv3.DiscoveryRequest{ResourceNames: long[:250]})
	split = append(split, encode(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType})...)
	split = append(split, encode(t, &discoveryv3.DiscoveryRequest{ResourceNames: long[250:], VersionInfo: "v2"})...)
	// A name that is not UTF-8, which proto.Unmarshal rejects.
	bad := encode(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType})
	for _, n := range long {
		bad = protowire.AppendTag(bad, resourceNamesField, protowire.BytesType)
		bad = protowire.AppendString(bad, n)
	}
	bad = protowire.AppendTag(bad, resourceNamesField, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0xff, 0xfe})

	cases := []struct {
		name string
		b    []byte
	}{
		{"first request with a node", encode(t, first)},
		{"ACK", encode(t, ack)},
		{"the same ACK again", encode(t, ack)},
		{"NACK", encode(t, nack)},
		{"other names", encode(t, other)},
		{"few names", encode(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNames: []string{"a", "b"}})},
		{"no names", encode(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType})},
		{"names split by another field", split},
		{"a name that is not UTF-8", bad},
		{"truncated", encode(t, ack)[:100]},
		{"empty", nil},
	}
	table := newNameTable()
	var last *nameEntry
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want discoveryv3.DiscoveryRequest
			wantErr := proto.Unmarshal(tc.b, &want)
			got, err := table.decode(tc.b, &last)
			if wantErr != nil {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.True(t, proto.Equal(&want, got), "got %v", got)
		})
	}

	// Requests with the same names share one slice, across streams too.
	a, err := table.decode(encode(t, ack), &last)
	require.NoError(t, err)
	var other2 *nameEntry
	b, err := table.decode(encode(t, nack), &other2)
	require.NoError(t, err)
	assert.Same(t, &a.ResourceNames[0], &b.ResourceNames[0])
	c, err := table.decode(encode(t, other), &last)
	require.NoError(t, err)
	assert.NotSame(t, &a.ResourceNames[0], &c.ResourceNames[0])
}
