package extauthz

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/xds"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test-secret")

type fixture struct {
	client authv3.AuthorizationClient
	health healthpb.HealthClient
	store  *keys.FileStore
	hasher *keys.Hasher
	index  *keys.Index
	logs   *bytes.Buffer
	srv    *Server
	// handlerTime is the time inside the service's handler (decoded request to response
	// built), apart from gRPC transport and the client.
	handlerTime samples
}

type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) record(d time.Duration) { s.mu.Lock(); s.d = append(s.d, d); s.mu.Unlock() }

func (s *samples) take() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.d
	s.d = nil
	return d
}

// start runs the service on a loopback gRPC server, over a file store synced into an index,
// as the xDS server process runs it.
func start(t testing.TB) *fixture { return startWith(t, t.TempDir(), t.Cleanup) }

func startWith(t testing.TB, dir string, cleanup func(func())) *fixture {
	t.Helper()
	h, err := keys.NewHasher(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{hasher: h, index: keys.NewIndex(), logs: &bytes.Buffer{}}
	f.store = keys.NewFileStore(filepath.Join(dir, "keys.db"))
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.srv = New(&keys.Verifier{Hasher: h, Index: f.index}, log)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The server options of `inferplane xds serve`, which hosts this service in production.
	g := grpc.NewServer(append(xds.GRPCServerOptions(), grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		t0 := time.Now()
		resp, err := h(ctx, req)
		f.handlerTime.record(time.Since(t0))
		return resp, err
	}))...)
	f.srv.Register(g)
	healthpb.RegisterHealthServer(g, health.NewServer()) // the benchmark's floor
	go g.Serve(lis)
	cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	cleanup(func() { conn.Close() })
	f.client = authv3.NewAuthorizationClient(conn)
	f.health = healthpb.NewHealthClient(conn)
	return f
}

func (f *fixture) key(t testing.TB, tenant, endpoint string, expires time.Time) (string, keys.Record) {
	t.Helper()
	key, id, err := keys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := keys.Record{ID: id, Tenant: tenant, Endpoint: endpoint, Hash: f.hasher.Hex(key),
		CreatedAt: time.Now().Add(-time.Minute).UTC(), ExpiresAt: expires}
	if err := f.store.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return key, r
}

// request is a CheckRequest as Envoy's ext_authz filter sends it: lower-case header names,
// the virtual host's context extensions.
func request(tenant, job string, headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{":authority": job + "." + tenant + ".models.example.com", ":method": "POST", ":path": "/v1/chat/completions"}
	for k, v := range headers {
		h[k] = v
	}
	ext := map[string]string{}
	if tenant != "" {
		ext[ContextTenant], ext[ContextJob] = tenant, job
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "POST", Path: "/v1/chat/completions", Host: h[":authority"], Headers: h,
		}},
		ContextExtensions: ext,
	}}
}

func TestCheckOverGRPC(t *testing.T) {
	f := start(t)
	wide, wideRec := f.key(t, "acme", "", time.Time{})
	chat, _ := f.key(t, "acme", "chat", time.Time{})
	expired, _ := f.key(t, "acme", "", time.Now().Add(-time.Second))
	revoked, revRec := f.key(t, "acme", "", time.Time{})
	if _, err := f.store.Revoke(context.Background(), revRec.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := (&keys.FileSyncer{Store: f.store}).Sync(t.Context(), f.index); err != nil {
		t.Fatal(err)
	}

	bearer := func(k string) map[string]string { return map[string]string{"authorization": "Bearer " + k} }
	cases := []struct {
		name        string
		req         *authv3.CheckRequest
		wantHTTP    int
		wantRPC     code.Code
		wantInBody  string
		wantKeyID   string
		wantTenantH string
	}{
		{"bearer", request("acme", "chat", bearer(wide)), 200, code.Code_OK, "", wideRec.ID, "acme"},
		{"bearer, lower-case scheme", request("acme", "chat", map[string]string{"authorization": "bearer " + wide}), 200, code.Code_OK, "", wideRec.ID, "acme"},
		{"x-api-key", request("acme", "chat", map[string]string{"x-api-key": wide}), 200, code.Code_OK, "", wideRec.ID, "acme"},
		{"basic auth plus x-api-key", request("acme", "chat", map[string]string{"authorization": "Basic dXNlcjpwdw==", "x-api-key": chat}), 200, code.Code_OK, "", "", "acme"},
		{"endpoint key", request("acme", "chat", bearer(chat)), 200, code.Code_OK, "", "", "acme"},
		{"missing", request("acme", "chat", nil), 401, code.Code_UNAUTHENTICATED, "missing API key", "", ""},
		{"garbage", request("acme", "chat", bearer("sk-not-ours")), 401, code.Code_UNAUTHENTICATED, "invalid API key", "", ""},
		{"other tenant", request("globex", "chat", bearer(wide)), 403, code.Code_PERMISSION_DENIED, "is not allowed on this endpoint", "", ""},
		{"other endpoint", request("acme", "embed", map[string]string{"x-api-key": chat}), 403, code.Code_PERMISSION_DENIED, "is not allowed on this endpoint", "", ""},
		{"revoked", request("acme", "chat", bearer(revoked)), 403, code.Code_PERMISSION_DENIED, "revoked", "", ""},
		{"expired", request("acme", "chat", bearer(expired)), 403, code.Code_PERMISSION_DENIED, "expired", "", ""},
		{"vhost without context extensions (fail closed)", request("", "chat", bearer(wide)), 403, code.Code_PERMISSION_DENIED, "not configured", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := f.client.Check(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := code.Code(resp.GetStatus().GetCode()); got != tc.wantRPC {
				t.Fatalf("rpc status %v, want %v (%s)", got, tc.wantRPC, resp.GetStatus().GetMessage())
			}
			if tc.wantHTTP == 200 {
				ok := resp.GetOkResponse()
				if ok == nil {
					t.Fatalf("no ok response: %v", resp)
				}
				hdr := headerMap(ok.GetHeaders())
				if hdr[HeaderTenant] != tc.wantTenantH || hdr[HeaderKeyID] == "" || (tc.wantKeyID != "" && hdr[HeaderKeyID] != tc.wantKeyID) {
					t.Errorf("upstream headers %v", hdr)
				}
				if !strings.Contains(strings.Join(ok.GetHeadersToRemove(), ","), "authorization") ||
					!strings.Contains(strings.Join(ok.GetHeadersToRemove(), ","), "x-api-key") {
					t.Errorf("the key headers are not removed upstream: %v", ok.GetHeadersToRemove())
				}
				md := resp.GetDynamicMetadata().GetFields()
				if md[MetaKeyID].GetStringValue() != hdr[HeaderKeyID] || md[MetaTenant].GetStringValue() != "acme" {
					t.Errorf("dynamic metadata %v", md)
				}
				return
			}
			den := resp.GetDeniedResponse()
			if den == nil || int(den.GetStatus().GetCode()) != tc.wantHTTP {
				t.Fatalf("denied response %v, want HTTP %d", den, tc.wantHTTP)
			}
			var body errorBody
			if err := json.Unmarshal([]byte(den.GetBody()), &body); err != nil || !strings.Contains(body.Error.Message, tc.wantInBody) {
				t.Errorf("body %q (want OpenAI error JSON containing %q): %v", den.GetBody(), tc.wantInBody, err)
			}
			if strings.Contains(den.GetBody(), "tenant") || strings.Contains(den.GetBody(), "acme") {
				t.Errorf("body %q tells the caller whose key it holds", den.GetBody())
			}
			if hdr := headerMap(den.GetHeaders()); hdr["content-type"] != "application/json" ||
				(tc.wantHTTP == 401) != (hdr["www-authenticate"] != "") {
				t.Errorf("denied headers %v", hdr)
			}
		})
	}
	// The decisions metric counted every case by status.
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.srv.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if counts["200"] != 5 || counts["401"] != 2 || counts["403"] != 5 {
		t.Errorf("decisions metric: %v", counts)
	}
	// Nothing the service logged holds a key.
	for _, k := range []string{wide, chat, expired, revoked} {
		if strings.Contains(f.logs.String(), k[len(keys.Prefix):]) {
			t.Fatal("a key was logged")
		}
	}
	if !strings.Contains(f.logs.String(), "API key denied") {
		t.Fatalf("denials are not logged: %s", f.logs.String())
	}
}

// TestHeaderMapForm covers Envoy's encode_raw_headers, where headers come as a header map.
func TestHeaderMapForm(t *testing.T) {
	f := start(t)
	key, _ := f.key(t, "acme", "", time.Time{})
	if err := (&keys.FileSyncer{Store: f.store}).Sync(t.Context(), f.index); err != nil {
		t.Fatal(err)
	}
	req := request("acme", "chat", nil)
	req.Attributes.Request.Http.Headers = nil
	req.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: "authorization", RawValue: []byte("Bearer " + key)},
	}}
	resp, err := f.client.Check(context.Background(), req)
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("raw header map: %v %v", resp, err)
	}
}

func headerMap(hs []*corev3.HeaderValueOption) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	return m
}

// TestSharedCallOverGRPC: with Verifier.Shared, another tenant's key passes on a shared
// endpoint: upstream and in the metadata the key's tenant is the caller, the endpoint's tenant
// and job stay the endpoint's; a key bound to an endpoint and every other endpoint refuse it.
func TestSharedCallOverGRPC(t *testing.T) {
	f := start(t)
	f.srv.Verifier.Shared = func(caller, tenant, job string) bool {
		return caller == "globex" && tenant == "platform" && job == "qwen"
	}
	key, rec := f.key(t, "globex", "", time.Time{})
	bound, _ := f.key(t, "globex", "mine", time.Time{})
	if err := (&keys.FileSyncer{Store: f.store}).Sync(t.Context(), f.index); err != nil {
		t.Fatal(err)
	}
	bearer := func(k string) map[string]string { return map[string]string{"authorization": "Bearer " + k} }
	resp, err := f.client.Check(context.Background(), request("platform", "qwen", bearer(key)))
	if err != nil {
		t.Fatal(err)
	}
	ok := resp.GetOkResponse()
	if ok == nil {
		t.Fatalf("refused: %v", resp)
	}
	if hdr := headerMap(ok.GetHeaders()); hdr[HeaderTenant] != "globex" || hdr[HeaderKeyID] != rec.ID {
		t.Errorf("upstream headers %v", hdr)
	}
	md := resp.GetDynamicMetadata().GetFields()
	if md[MetaTenant].GetStringValue() != "platform" || md[MetaJob].GetStringValue() != "qwen" ||
		md[MetaCaller].GetStringValue() != "globex" || md[MetaKeyID].GetStringValue() != rec.ID {
		t.Errorf("dynamic metadata %v", md)
	}
	for _, req := range []*authv3.CheckRequest{
		request("platform", "qwen", bearer(bound)),
		request("platform", "other", bearer(key)),
		request("acme", "chat", bearer(key)),
	} {
		resp, err := f.client.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if den := resp.GetDeniedResponse(); den == nil || den.GetStatus().GetCode() != 403 || resp.GetDynamicMetadata() != nil {
			t.Errorf("%v: %v", req.GetAttributes().GetContextExtensions(), resp)
		}
	}
}
