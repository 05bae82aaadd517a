package server

import (
	"bytes"
	"hash/maphash"
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/runtime/protoiface"
	"google.golang.org/protobuf/types/known/emptypb"
)

// A state-of-the-world request names every resource the node subscribes to, and Envoy sends
// one with every ACK: with 2,000 clusters, each endpoint change costs every node's ACK a
// 2,000-name EDS request, and decoding those names (a string each, UTF-8 checked) was the
// largest cost of a change in state of the world (docs/xds.md). The names rarely change, and
// every node of a fleet usually names the same clusters, so the server reads the names' bytes
// first and decodes them only when it has not seen those exact bytes recently: an ACK then
// costs a hash and a comparison of its bytes, and every node's request shares one slice of
// names (which EndpointCache in turn recognises without hashing the names again).

// adsService is go-control-plane's ADS server with state-of-the-world requests read through a
// nameTable.
type adsService struct {
	serverv3.Server
	names *nameTable
}

func (a adsService) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return a.Server.StreamAggregatedResources(&sotwStream{AggregatedDiscoveryService_StreamAggregatedResourcesServer: st, names: a.names})
}

// sotwStream reads requests as raw bytes and decodes them with the name table.
type sotwStream struct {
	discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	names *nameTable
	last  *nameEntry // the names of this stream's last request
}

func (s *sotwStream) Recv() (*discoveryv3.DiscoveryRequest, error) {
	// gRPC's codec hands the message's bytes to rawMessage as they are. (A gRPC interceptor
	// would see a *rawMessage here.)
	var raw rawMessage
	if err := s.RecvMsg(&raw); err != nil {
		return nil, err
	}
	return s.names.decode(raw.b, &s.last)
}

// rawMessage is a proto.Message whose decoding only keeps a copy of the bytes (gRPC's codec
// reuses its buffer). It is never encoded.
type rawMessage struct{ b []byte }

func (r *rawMessage) Reset() { r.b = r.b[:0] }

func (r *rawMessage) ProtoReflect() protoreflect.Message {
	return rawReflect{Message: (&emptypb.Empty{}).ProtoReflect(), r: r}
}

// rawReflect is an Empty's reflection with a decoding fast path that keeps the bytes.
type rawReflect struct {
	protoreflect.Message
	r *rawMessage
}

func (x rawReflect) Interface() protoreflect.ProtoMessage { return x.r }
func (x rawReflect) ProtoMethods() *protoiface.Methods    { return &rawMethods }

var rawMethods = protoiface.Methods{
	Flags: protoiface.SupportUnmarshalDiscardUnknown,
	Unmarshal: func(in protoiface.UnmarshalInput) (protoiface.UnmarshalOutput, error) {
		r := in.Message.(rawReflect).r
		r.b = append(r.b[:0], in.Buf...)
		return protoiface.UnmarshalOutput{Flags: protoiface.UnmarshalInitialized}, nil
	},
}

// resourceNamesField is DiscoveryRequest.resource_names.
const resourceNamesField = 3

// minShared is the size of a request's names below which they are simply decoded.
const minShared = 1 << 10

// nameTable remembers recently decoded resource-name lists by their encoded bytes.
type nameTable struct {
	seed maphash.Seed

	mu      sync.Mutex
	entries map[uint64]*nameEntry
	fifo    []uint64
	max     int
}

type nameEntry struct {
	raw   []byte
	names []string
}

func newNameTable() *nameTable {
	return &nameTable{seed: maphash.MakeSeed(), entries: map[uint64]*nameEntry{}, max: 64}
}

// decode decodes a DiscoveryRequest exactly as proto.Unmarshal does, except that a list of
// names it has decoded before is not decoded again: the request gets the same slice (which
// nobody may modify).
//
// last is the stream's previous names: when this request's names are the same bytes at the
// same place, neither the names nor the table are looked at again.
func (t *nameTable) decode(b []byte, last **nameEntry) (*discoveryv3.DiscoveryRequest, error) {
	if *last != nil {
		if start, end, ok := sameNames(b, (*last).raw); ok {
			return decodeRest(b, start, end, (*last).names)
		}
	}
	start, end, ok := namesSpan(b)
	if !ok || end-start < minShared {
		req := &discoveryv3.DiscoveryRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			return nil, err
		}
		return req, nil
	}
	e, err := t.lookup(b[start:end])
	if err != nil {
		return nil, err
	}
	*last = e
	return decodeRest(b, start, end, e.names)
}

// decodeRest decodes the request without its names' fields, b[start:end], and gives it names.
func decodeRest(b []byte, start, end int, names []string) (*discoveryv3.DiscoveryRequest, error) {
	rest := make([]byte, 0, len(b)-(end-start))
	rest = append(append(rest, b[:start]...), b[end:]...)
	req := &discoveryv3.DiscoveryRequest{}
	if err := proto.Unmarshal(rest, req); err != nil {
		return nil, err
	}
	req.ResourceNames = names
	return req, nil
}

// sameNames says whether b's names' fields are exactly raw (a run of whole resource_names
// fields), and where they are: it walks the fields before them, compares the bytes, and walks
// the fields after them to check no other name follows.
func sameNames(b, raw []byte) (start, end int, ok bool) {
	i := 0
	for i < len(b) {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return 0, 0, false
		}
		if num == resourceNamesField {
			break
		}
		m := protowire.ConsumeFieldValue(num, typ, b[i+n:])
		if m < 0 {
			return 0, 0, false
		}
		i += n + m
	}
	start, end = i, i+len(raw)
	if end > len(b) || !bytes.Equal(b[start:end], raw) {
		return 0, 0, false
	}
	// The same bytes parse as the same whole fields, so end is a field boundary.
	for i = end; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 || num == resourceNamesField {
			return 0, 0, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[i+n:])
		if m < 0 {
			return 0, 0, false
		}
		i += n + m
	}
	return start, end, true
}

// namesSpan finds the resource names' fields in an encoded request: [start, end). ok is false
// when there are none or they are not contiguous (then the request is decoded as a whole).
func namesSpan(b []byte) (start, end int, ok bool) {
	start, end = -1, -1
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return 0, 0, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[i+n:])
		if m < 0 {
			return 0, 0, false
		}
		if num == resourceNamesField {
			switch {
			case start < 0:
				start, end = i, i+n+m
			case end == i:
				end = i + n + m
			default:
				return 0, 0, false // interleaved with other fields
			}
		}
		i += n + m
	}
	return start, end, start >= 0
}

// lookup returns the names encoded in raw (resource_names fields only), decoding them only if
// these bytes were not seen recently.
func (t *nameTable) lookup(raw []byte) (*nameEntry, error) {
	h := maphash.Bytes(t.seed, raw)
	t.mu.Lock()
	if e, ok := t.entries[h]; ok && bytes.Equal(e.raw, raw) {
		t.mu.Unlock()
		return e, nil
	}
	t.mu.Unlock()
	var req discoveryv3.DiscoveryRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.entries[h]; !ok {
		t.fifo = append(t.fifo, h)
		if len(t.fifo) > t.max {
			delete(t.entries, t.fifo[0])
			t.fifo = t.fifo[1:]
		}
	}
	e := &nameEntry{raw: raw, names: req.ResourceNames}
	t.entries[h] = e
	return e, nil
}
