package usage

import (
	"errors"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferplane/inferplane/internal/envoymeta"
)

// The access log service decodes Envoy's messages straight from the wire, reading only the
// fields an Entry needs: the generated decoder builds every address, header map and metadata
// struct of every entry first, which was most of the ingestion time (docs/keys.md has the
// figures). TestWireMatchesProto holds this decoder to the generated types.
//
// Field numbers, from envoy/service/accesslog/v3/als.proto and envoy/data/accesslog/v3:
const (
	fMsgIdentifier = 1 // StreamAccessLogsMessage.identifier
	fMsgHTTPLogs   = 2 // StreamAccessLogsMessage.http_logs
	fLogsEntry     = 1 // HTTPAccessLogEntries.log_entry
	fIdentNode     = 1 // Identifier.node
	fNodeID        = 1 // core.v3.Node.id

	fEntryCommon   = 1 // HTTPAccessLogEntry.common_properties
	fEntryRequest  = 3 // HTTPAccessLogEntry.request
	fEntryResponse = 4 // HTTPAccessLogEntry.response

	fCommonStart     = 5  // start_time
	fCommonTTFB      = 9  // time_to_first_upstream_rx_byte
	fCommonLastTx    = 12 // time_to_last_downstream_tx_byte
	fCommonFlags     = 16 // response_flags
	fCommonMetadata  = 17 // metadata
	fCommonDuration  = 23 // duration
	fFlagsUnauth     = 13 // ResponseFlags.unauthorized_details
	fReqAuthority    = 3  // HTTPRequestProperties.authority
	fRespCode        = 1  // HTTPResponseProperties.response_code (UInt32Value.value = 1)
	fMetaFilter      = 1  // core.v3.Metadata.filter_metadata (map<string, Struct>)
	fStructFields    = 1  // Struct.fields (map<string, Value>)
	fValueNumber     = 2  // Value.number_value (double)
	fValueString     = 3  // Value.string_value
	fMapKey, fMapVal = 1, 2
)

var errWire = errors.New("malformed protobuf")

// each calls fn for every field of a message; v is the payload of a length-delimited field,
// u the value of a varint or fixed one.
func each(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, u uint64)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		var v []byte
		var u uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			u, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var u32 uint32
			u32, n = protowire.ConsumeFixed32(b)
			u = uint64(u32)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errWire
		}
		b = b[n:]
		fn(num, typ, v, u)
	}
	return nil
}

// rawEntry is what a log entry says, before the endpoint is resolved.
type rawEntry struct {
	tenant, job, keyID, authority string
	caller                        string
	code                          int
	denied                        bool
	start                         time.Time
	lastTx, duration, ttfb        time.Duration
	hasIn, hasOut                 bool
	in, out                       int64
	events                        int64
}

// finish turns a raw entry into an Entry.
func (r *rawEntry) finish(resolve Resolver) (Entry, bool) {
	e := Entry{Tenant: r.tenant, Job: r.job, KeyID: r.keyID, Caller: r.caller, Code: r.code, Denied: r.denied,
		Latency: r.lastTx, TTFB: r.ttfb, HasUsage: r.hasIn || r.hasOut, TokensIn: r.in, TokensOut: r.out}
	if !e.HasUsage && r.events > 0 {
		// A stream cut off before its usage arrived (the client or the replica went away):
		// one token per data event generated, an estimate (see usage.lua).
		e.TokensOut, e.Estimated = r.events, true
	}
	if e.Tenant == "" || e.Job == "" {
		var ok bool
		if resolve == nil {
			return e, false
		}
		if e.Tenant, e.Job, ok = resolve(r.authority); !ok {
			return e, false
		}
		e.KeyID, e.Caller = "", ""
	}
	if e.Latency == 0 {
		e.Latency = r.duration
	}
	if !r.start.IsZero() {
		e.Done = r.start.Add(e.Latency)
	}
	return e, true
}

// decodeMessage reads one StreamAccessLogsMessage, appending its attributed HTTP entries to
// out; it returns the node id when the message carries the identifier, and how many entries
// could not be attributed.
func decodeMessage(b []byte, resolve Resolver, out []Entry) (entries []Entry, node string, skipped int, err error) {
	entries = out
	var inner error
	err = each(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
		if typ != protowire.BytesType || inner != nil {
			return
		}
		switch num {
		case fMsgIdentifier:
			inner = each(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
				if num == fIdentNode && typ == protowire.BytesType {
					_ = each(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
						if num == fNodeID && typ == protowire.BytesType {
							node = string(v)
						}
					})
				}
			})
		case fMsgHTTPLogs:
			inner = each(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
				if num != fLogsEntry || typ != protowire.BytesType || inner != nil {
					return
				}
				var r rawEntry
				if inner = decodeEntry(v, &r); inner != nil {
					return
				}
				if e, ok := r.finish(resolve); ok {
					entries = append(entries, e)
				} else {
					skipped++
				}
			})
		}
	})
	if err == nil {
		err = inner
	}
	return entries, node, skipped, err
}

func decodeEntry(b []byte, r *rawEntry) error {
	var inner error
	err := each(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
		if typ != protowire.BytesType || inner != nil {
			return
		}
		switch num {
		case fEntryCommon:
			inner = decodeCommon(v, r)
		case fEntryRequest:
			inner = each(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
				if num == fReqAuthority && typ == protowire.BytesType {
					r.authority = string(v)
				}
			})
		case fEntryResponse:
			inner = each(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
				if num == fRespCode && typ == protowire.BytesType {
					r.code = 0
					_ = each(v, func(num protowire.Number, typ protowire.Type, _ []byte, u uint64) {
						if num == 1 && typ == protowire.VarintType {
							r.code = int(uint32(u))
						}
					})
				}
			})
		}
	})
	if err == nil {
		err = inner
	}
	return err
}

// secondsNanos reads a Timestamp or a Duration (seconds = 1, nanos = 2).
func secondsNanos(b []byte) (sec, nsec int64, err error) {
	err = each(b, func(num protowire.Number, typ protowire.Type, _ []byte, u uint64) {
		if typ != protowire.VarintType {
			return
		}
		switch num {
		case 1:
			sec = int64(u)
		case 2:
			nsec = int64(int32(u))
		}
	})
	return sec, nsec, err
}

func duration(b []byte) (time.Duration, error) {
	s, n, err := secondsNanos(b)
	if s > math.MaxInt64/int64(time.Second) || s < 0 {
		return 0, err
	}
	return time.Duration(s)*time.Second + time.Duration(n), err
}

func decodeCommon(b []byte, r *rawEntry) error {
	var inner error
	err := each(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
		if typ != protowire.BytesType || inner != nil {
			return
		}
		switch num {
		case fCommonStart:
			var s, n int64
			s, n, inner = secondsNanos(v)
			r.start = time.Unix(s, n).UTC()
		case fCommonTTFB:
			r.ttfb, inner = duration(v)
		case fCommonLastTx:
			r.lastTx, inner = duration(v)
		case fCommonDuration:
			r.duration, inner = duration(v)
		case fCommonFlags:
			inner = each(v, func(num protowire.Number, typ protowire.Type, _ []byte, _ uint64) {
				if num == fFlagsUnauth && typ == protowire.BytesType {
					r.denied = true
				}
			})
		case fCommonMetadata:
			inner = decodeMetadata(v, r)
		}
	})
	if err == nil {
		err = inner
	}
	return err
}

// mapEntries calls fn with the key and value bytes of every entry of map field num of a
// message (a map is a repeated message of key = 1, value = 2).
func mapEntries(b []byte, num protowire.Number, fn func(key, val []byte) error) error {
	var inner error
	err := each(b, func(n protowire.Number, typ protowire.Type, v []byte, _ uint64) {
		if n != num || typ != protowire.BytesType || inner != nil {
			return
		}
		var key, val []byte
		if inner = each(v, func(n protowire.Number, typ protowire.Type, v []byte, _ uint64) {
			switch {
			case n == fMapKey && typ == protowire.BytesType:
				key = v
			case n == fMapVal && typ == protowire.BytesType:
				val = v
			}
		}); inner == nil {
			inner = fn(key, val)
		}
	})
	if err == nil {
		err = inner
	}
	return err
}

// decodeMetadata reads the two filter metadata namespaces we set: the key check's and the
// usage filter's.
func decodeMetadata(b []byte, r *rawEntry) error {
	return mapEntries(b, fMetaFilter, func(ns, st []byte) error {
		switch string(ns) {
		case envoymeta.AuthzNamespace:
			return structFields(st, func(k, s []byte, _ float64, isNum bool) {
				if isNum {
					return
				}
				switch string(k) {
				case envoymeta.AuthzTenant:
					r.tenant = string(s)
				case envoymeta.AuthzJob:
					r.job = string(s)
				case envoymeta.AuthzKeyID:
					r.keyID = string(s)
				case envoymeta.AuthzCaller:
					r.caller = string(s)
				}
			})
		case envoymeta.UsageNamespace:
			return structFields(st, func(k, _ []byte, f float64, isNum bool) {
				if !isNum || f < 0 || f > 1e15 || f != f {
					return
				}
				switch string(k) {
				case envoymeta.PromptTokens:
					r.in, r.hasIn = int64(f), true
				case envoymeta.CompletionTokens:
					r.out, r.hasOut = int64(f), true
				case envoymeta.StreamEvents:
					r.events = int64(f)
				}
			})
		}
		return nil
	})
}

// structFields calls fn for each string or number field of a google.protobuf.Struct.
func structFields(b []byte, fn func(key, s []byte, f float64, isNum bool)) error {
	return mapEntries(b, fStructFields, func(key, val []byte) error {
		return each(val, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) {
			switch {
			case num == fValueNumber && typ == protowire.Fixed64Type:
				fn(key, nil, math.Float64frombits(u), true)
			case num == fValueString && typ == protowire.BytesType:
				fn(key, v, 0, false)
			}
		})
	})
}
