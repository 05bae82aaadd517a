package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/resources"
)

// envoyStandIn is OUR OWN small stand-in for Envoy, which cannot run here (no envoy binary on
// these machines; gateway/envoyfilters and xds run the real one where it exists). It does, per
// request, what the configuration `xds serve` gives Envoy does, reading that server's state
// instead of its xDS resources: the virtual host by Host (<job>.<tenant>.<domain>; an unknown
// host is 404), only the OpenAI paths of the job's runtime (else 404), the ext_authz check
// against the real key check `xds serve` runs on its gRPC port (its denial answered as Envoy
// answers it), the credential headers removed, and the request proxied to a replica the
// server has in rotation (none: 503 "no healthy upstream", Envoy's answer), streamed through
// unbuffered.
type envoyStandIn struct {
	domain string
	admin  string // the xDS server's admin base URL, for /debug/endpoints
	authz  authv3.AuthorizationClient
}

func startEnvoyStandIn(t *testing.T, domain, admin, grpcAddr string) string {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	s := &envoyStandIn{domain: domain, admin: admin, authz: authv3.NewAuthorizationClient(conn)}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (s *envoyStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep, ok := s.endpoint(r)
	if !ok {
		jsonError(w, http.StatusNotFound, "no endpoint for host "+r.Host)
		return
	}
	paths, _ := resources.RuntimePaths(ep.Runtime)
	if !slices.Contains(paths, r.URL.Path) {
		jsonError(w, http.StatusNotFound, "path "+r.URL.Path+" is not served by this endpoint")
		return
	}
	tenant, job, _ := strings.Cut(ep.Endpoint, "/")
	if ep.RequireAPIKey && !s.check(w, r, tenant, job) {
		return
	}
	var upstream string
	for _, rep := range ep.Replicas {
		if rep.Serving {
			upstream = rep.Address
			break
		}
	}
	if upstream == "" {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("no healthy upstream"))
		return
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstream})
	proxy.FlushInterval = -1
	proxy.ServeHTTP(w, r)
}

// endpoint finds the request's endpoint in the xDS server's current state.
func (s *envoyStandIn) endpoint(r *http.Request) (xds.EndpointStatus, bool) {
	resp, err := http.Get(s.admin + "/debug/endpoints")
	if err != nil {
		return xds.EndpointStatus{}, false
	}
	defer resp.Body.Close()
	var debug struct {
		Endpoints []xds.EndpointStatus `json:"endpoints"`
	}
	if json.NewDecoder(resp.Body).Decode(&debug) != nil {
		return xds.EndpointStatus{}, false
	}
	host, _, _ := strings.Cut(r.Host, ":")
	for _, e := range debug.Endpoints {
		if e.Host == host {
			return e, true
		}
	}
	return xds.EndpointStatus{}, false
}

// check asks the key check as Envoy's ext_authz filter does; it answers a denial itself.
func (s *envoyStandIn) check(w http.ResponseWriter, r *http.Request, tenant, job string) bool {
	headers := map[string]string{":authority": r.Host, ":path": r.URL.Path, ":method": r.Method}
	for k := range r.Header {
		headers[strings.ToLower(k)] = r.Header.Get(k)
	}
	resp, err := s.authz.Check(r.Context(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{extauthz.ContextTenant: tenant, extauthz.ContextJob: job},
		Request:           &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Headers: headers}},
	}})
	if err != nil {
		// Envoy's failure_mode_allow is off: a broken key check denies.
		jsonError(w, http.StatusForbidden, "ext_authz: "+err.Error())
		return false
	}
	if d := resp.GetDeniedResponse(); d != nil {
		setHeaders(w.Header(), d.GetHeaders())
		w.WriteHeader(int(d.GetStatus().GetCode()))
		_, _ = w.Write([]byte(d.GetBody()))
		return false
	}
	ok := resp.GetOkResponse()
	for _, h := range ok.GetHeadersToRemove() {
		r.Header.Del(h)
	}
	setHeaders(r.Header, ok.GetHeaders())
	return true
}

func setHeaders(h http.Header, hvs []*corev3.HeaderValueOption) {
	for _, hv := range hvs {
		h.Set(hv.GetHeader().GetKey(), hv.GetHeader().GetValue())
	}
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": "not_found"}})
}
