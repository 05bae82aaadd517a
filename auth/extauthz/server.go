// Package extauthz is Envoy's external authorization gRPC service
// (envoy.service.auth.v3.Authorization) over inferplane's API keys.
//
// Envoy calls Check for every request to an endpoint that requires a key. The endpoint's
// tenant and job arrive as context extensions that the virtual host's per-filter config sets
// (see gateway/envoyfilters), so nothing here parses host names. A request is allowed with the
// tenant and key id added as upstream headers and the key's header removed, so the key never
// reaches the model replica; it is denied with 401 (missing, malformed or unknown key) or 403
// (revoked, expired, another tenant's or another endpoint's key: the caller is told only that
// the key is not allowed there), in the OpenAI error shape. Another tenant's key passes on a
// shared endpoint of a provider tenant when keys.Verifier.Shared says so (the shared serving
// tier): the key's tenant is then the caller, charged and metered (metadata "caller"). With a
// limiter (auth/limits), an allowed key is then held to its own and its tenant's rate limits
// and token budgets: 429 with Retry-After past a hard limit, and the x-ratelimit-* headers on
// every answer.
package extauthz

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/internal/envoymeta"
)

// Context extension names the per-virtual-host config sets and headers the service adds.
const (
	ContextTenant = "inferplane.tenant"
	ContextJob    = "inferplane.job"

	HeaderTenant = "x-inferplane-tenant"
	HeaderKeyID  = "x-inferplane-key-id"

	// MetadataNamespace is where Envoy puts the CheckResponse's dynamic metadata, which the
	// access log carries to the usage service; the keys below live in it (internal/envoymeta).
	MetadataNamespace = envoymeta.AuthzNamespace
	MetaTenant        = envoymeta.AuthzTenant
	MetaJob           = envoymeta.AuthzJob
	MetaKeyID         = envoymeta.AuthzKeyID
	MetaCaller        = envoymeta.AuthzCaller
)

// CredentialHeaders are the request headers a key may come in; all are removed upstream.
var CredentialHeaders = []string{"authorization", "x-api-key"}

// Server is the Authorization service.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	Verifier *keys.Verifier
	// Limits decides rate limits and token budgets after the key check; nil: none.
	Limits *limits.Limiter
	Log    *slog.Logger
	Now    func() time.Time

	decisions *prometheus.CounterVec
	byCode    map[keys.Code]prometheus.Counter // the vector's series, looked up once
}

// Codes of the limiter's refusals, beside the key check's.
const (
	codeLimited     keys.Code = 429
	codeStoreClosed keys.Code = 503
)

// New returns a server over v that logs to log (slog.Default when nil).
func New(v *keys.Verifier, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		Verifier: v,
		Log:      log,
		Now:      time.Now,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_authz_decisions_total",
			Help: "API key checks by HTTP status (200, 401, 403; 429 past a rate limit, 503 when the limits store is down and the tenant fails closed).",
		}, []string{"code"}),
		byCode: map[keys.Code]prometheus.Counter{},
	}
	for _, c := range []keys.Code{keys.Allowed, keys.Unauthenticated, keys.Forbidden, codeLimited, codeStoreClosed} {
		s.byCode[c] = s.decisions.WithLabelValues(strconv.Itoa(int(c)))
	}
	return s
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g grpc.ServiceRegistrar) { authv3.RegisterAuthorizationServer(g, s) }

// Collectors are the service's Prometheus metrics.
func (s *Server) Collectors() []prometheus.Collector { return []prometheus.Collector{s.decisions} }

// Check decides one request. It never returns a gRPC error for a bad request: a denial is a
// CheckResponse, so Envoy answers the client with our status and body.
func (s *Server) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	attrs := req.GetAttributes()
	ext := attrs.GetContextExtensions()
	tenant, job := ext[ContextTenant], ext[ContextJob]
	var d keys.Decision
	if tenant == "" || job == "" {
		// Fail closed: a virtual host without our per-filter config is a wiring mistake.
		d = keys.Decision{Code: keys.Forbidden, Reason: "endpoint is not configured for API keys"}
	} else {
		d = s.Verifier.Verify(credential(attrs.GetRequest().GetHttp()), tenant, job, s.Now())
	}
	if d.Code != keys.Allowed {
		s.byCode[d.Code].Inc()
		s.Log.Info("API key denied", "tenant", tenant, "job", job, "code", int(d.Code),
			"reason", d.Reason, "detail", d.Detail, "key_id", d.Key.ID)
		return denied(d), nil
	}
	// The key's tenant pays: the endpoint's own, or the caller of a shared endpoint.
	caller := d.Key.Tenant
	var lim limits.Result
	if s.Limits != nil {
		lim = s.Limits.Check(caller, d.Key.ID, d.Limits)
		if !lim.Allowed {
			c := codeLimited
			if lim.StoreClosed {
				c = codeStoreClosed
			}
			s.byCode[c].Inc()
			s.Log.Debug("rate limited", "tenant", tenant, "job", job, "caller", caller, "key_id", d.Key.ID, "limit", lim.Denied.Kind.String(),
				"scope", lim.Denied.Scope.String(), "store_closed", lim.StoreClosed)
			return limited(lim, d.Key.ID), nil
		}
	}
	s.byCode[keys.Allowed].Inc()
	s.Log.Debug("API key allowed", "tenant", tenant, "job", job, "caller", caller, "key_id", d.Key.ID, "shared", d.Shared)
	meta := map[string]*structpb.Value{
		MetaTenant: structpb.NewStringValue(tenant),
		MetaJob:    structpb.NewStringValue(job),
		MetaKeyID:  structpb.NewStringValue(d.Key.ID),
	}
	if d.Shared {
		meta[MetaCaller] = structpb.NewStringValue(caller)
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code.Code_OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			Headers: []*corev3.HeaderValueOption{
				setHeader(HeaderTenant, caller),
				setHeader(HeaderKeyID, d.Key.ID),
			},
			HeadersToRemove:      CredentialHeaders,
			ResponseHeadersToAdd: limitHeaders(lim, nil),
		}},
		DynamicMetadata: &structpb.Struct{Fields: meta},
	}, nil
}

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// limitHeaders appends the x-ratelimit-* headers of a decision to hs.
func limitHeaders(r limits.Result, hs []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	for _, h := range r.Headers() {
		hs = append(hs, setHeader(h.Name, h.Value))
	}
	return hs
}

// limited is a refusal by the limiter: 429 with Retry-After and the x-ratelimit-* headers,
// or 503 when the limits store is down and the tenant fails closed.
func limited(r limits.Result, keyID string) *authv3.CheckResponse {
	httpCode, rpc := typev3.StatusCode_TooManyRequests, code.Code_RESOURCE_EXHAUSTED
	if r.StoreClosed {
		httpCode, rpc = typev3.StatusCode_ServiceUnavailable, code.Code_UNAVAILABLE
	}
	headers := []*corev3.HeaderValueOption{
		setHeader("content-type", "application/json"),
		setHeader(limits.HeaderRetryAfter, strconv.FormatInt(r.RetryAfter(), 10)),
	}
	body := r.Body(keyID)
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(rpc), Message: "rate limited"},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: httpCode},
			Headers: limitHeaders(r, headers),
			Body:    string(body),
		}},
	}
}

// credential is the key from "Authorization: Bearer <key>" or else "X-API-Key: <key>".
// Envoy sends header names in lower case, either as a map or, with encode_raw_headers, as a
// header map.
func credential(h *authv3.AttributeContext_HttpRequest) string {
	get := func(name string) string {
		if v, ok := h.GetHeaders()[name]; ok {
			return v
		}
		for _, hv := range h.GetHeaderMap().GetHeaders() {
			if strings.EqualFold(hv.GetKey(), name) {
				if hv.GetValue() != "" {
					return hv.GetValue()
				}
				return string(hv.GetRawValue())
			}
		}
		return ""
	}
	if a := strings.TrimSpace(get("authorization")); a != "" {
		scheme, tok, ok := strings.Cut(a, " ")
		if ok && strings.EqualFold(scheme, "bearer") {
			return strings.TrimSpace(tok)
		}
		// Another scheme (Basic, ...) carries no key of ours; fall through to X-API-Key.
	}
	return strings.TrimSpace(get("x-api-key"))
}

// errorBody is the OpenAI API's error shape, so OpenAI clients show the reason.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func denied(d keys.Decision) *authv3.CheckResponse {
	var b errorBody
	b.Error.Message = d.Reason
	rpc, httpCode := code.Code_PERMISSION_DENIED, typev3.StatusCode_Forbidden
	headers := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if d.Code == keys.Unauthenticated {
		rpc, httpCode = code.Code_UNAUTHENTICATED, typev3.StatusCode_Unauthorized
		b.Error.Type, b.Error.Code = "invalid_request_error", "invalid_api_key"
		headers = append(headers, setHeader("www-authenticate", `Bearer realm="inferplane"`))
	} else {
		b.Error.Type, b.Error.Code = "invalid_request_error", "api_key_not_allowed"
	}
	body, _ := json.Marshal(b)
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(rpc), Message: d.Reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: httpCode},
			Headers: headers,
			Body:    string(body) + "\n",
		}},
	}
}
