package usage

import (
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferplane/inferplane/internal/envoymeta"
)

// FromHTTPLog converts an Envoy access log entry through the generated types, the obvious way:
// the oracle the wire decoder (wire.go) is held to, and the baseline of its benchmark. ok is
// false when the request cannot be tied to an endpoint (a host outside the endpoints' domain).
func FromHTTPLog(l *datav3.HTTPAccessLogEntry, resolve Resolver) (Entry, bool) {
	c := l.GetCommonProperties()
	md := c.GetMetadata().GetFilterMetadata()
	authz := md[envoymeta.AuthzNamespace]
	r := rawEntry{
		tenant:    str(authz, envoymeta.AuthzTenant),
		job:       str(authz, envoymeta.AuthzJob),
		keyID:     str(authz, envoymeta.AuthzKeyID),
		authority: l.GetRequest().GetAuthority(),
		code:      int(l.GetResponse().GetResponseCode().GetValue()),
		denied:    c.GetResponseFlags().GetUnauthorizedDetails() != nil,
		lastTx:    c.GetTimeToLastDownstreamTxByte().AsDuration(),
		duration:  c.GetDuration().AsDuration(),
		ttfb:      c.GetTimeToFirstUpstreamRxByte().AsDuration(),
	}
	if st := c.GetStartTime(); st != nil {
		r.start = st.AsTime()
	}
	if u := md[envoymeta.UsageNamespace]; u != nil {
		r.in, r.hasIn = num(u, envoymeta.PromptTokens)
		r.out, r.hasOut = num(u, envoymeta.CompletionTokens)
		r.events, _ = num(u, envoymeta.StreamEvents)
	}
	return r.finish(resolve)
}

func str(s *structpb.Struct, k string) string { return s.GetFields()[k].GetStringValue() }

func num(s *structpb.Struct, k string) (int64, bool) {
	v, ok := s.GetFields()[k]
	if !ok {
		return 0, false
	}
	if _, isNum := v.GetKind().(*structpb.Value_NumberValue); !isNum {
		return 0, false
	}
	n := v.GetNumberValue()
	if n < 0 || n > 1e15 || n != n {
		return 0, false
	}
	return int64(n), true
}
