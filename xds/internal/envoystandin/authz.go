package envoystandin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/inferplane/inferplane/xds/internal/adstest"
)

// authorize runs the ext_authz check as the listener's filter and the virtual host's
// per-filter config say; it answers a denial or a failed check itself.
func (e *Envoy) authorize(w http.ResponseWriter, r *http.Request, st adstest.State, hcm *hcmv3.HttpConnectionManager, vh *routev3.VirtualHost) bool {
	name, cfg := extAuthzFilter(hcm)
	if cfg == nil {
		return true
	}
	var ext map[string]string
	if a := vh.GetTypedPerFilterConfig()[name]; a != nil {
		var per extauthzv3.ExtAuthzPerRoute
		if err := a.UnmarshalTo(&per); err == nil {
			if per.GetDisabled() {
				return true
			}
			ext = per.GetCheckSettings().GetContextExtensions()
		}
	}
	gs := cfg.GetGrpcService()
	timeout := 200 * time.Millisecond // Envoy's default
	if gs.GetTimeout() != nil {
		timeout = gs.GetTimeout().AsDuration()
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	req := checkRequest(r, cfg, ext)
	retries := 0
	if rp := gs.GetRetryPolicy(); rp != nil {
		retries = 1 // Envoy's default num_retries
		if rp.GetNumRetries() != nil {
			retries = int(rp.GetNumRetries().GetValue())
		}
	}
	tried := map[string]bool{}
	var why error
	for attempt := 0; attempt <= retries; attempt++ {
		h := e.checkHostFor(st, gs.GetEnvoyGrpc().GetClusterName(), tried)
		if h == nil {
			why = fmt.Errorf("no healthy key check (tried %d)", len(tried))
			break // the check fails
		}
		tried[h.addr] = true
		resp, err := h.authz.Check(ctx, req)
		if err == nil {
			return e.applyCheck(w, r, resp)
		}
		why = fmt.Errorf("%s: %w", h.addr, err)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil || gs.GetRetryPolicy() == nil {
			break
		}
	}
	e.log.Warn("envoy stand-in: the key check failed", "host", r.Host, "error", why)
	if cfg.GetFailureModeAllow() {
		return true
	}
	code := http.StatusForbidden // Envoy's default status_on_error
	if cfg.GetStatusOnError() != nil {
		code = int(cfg.GetStatusOnError().GetCode())
	}
	w.WriteHeader(code)
	return false
}

func extAuthzFilter(hcm *hcmv3.HttpConnectionManager) (string, *extauthzv3.ExtAuthz) {
	for _, f := range hcm.GetHttpFilters() {
		var cfg extauthzv3.ExtAuthz
		if f.GetTypedConfig().UnmarshalTo(&cfg) == nil && cfg.GetGrpcService() != nil {
			return f.GetName(), &cfg
		}
	}
	return "", nil
}

// checkRequest carries the allowed headers (and the pseudo-headers Envoy always adds).
func checkRequest(r *http.Request, cfg *extauthzv3.ExtAuthz, ext map[string]string) *authv3.CheckRequest {
	headers := map[string]string{":authority": r.Host, ":path": r.URL.Path, ":method": r.Method}
	for k := range r.Header {
		lk := strings.ToLower(k)
		for _, m := range cfg.GetAllowedHeaders().GetPatterns() {
			if m.GetExact() != "" && strings.EqualFold(m.GetExact(), lk) {
				headers[lk] = r.Header.Get(k)
			}
		}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: ext,
		Request:           &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Headers: headers}},
	}}
}

// applyCheck answers a denial, or changes the request's headers as an allowed check says.
func (e *Envoy) applyCheck(w http.ResponseWriter, r *http.Request, resp *authv3.CheckResponse) bool {
	if d := resp.GetDeniedResponse(); d != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		setHeaders(w.Header(), d.GetHeaders())
		code := int(d.GetStatus().GetCode())
		if code == 0 {
			code = http.StatusForbidden
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, d.GetBody())
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

// checkHost is one host of a service's cluster: its connection and what its health checks
// found.
type checkHost struct {
	addr   string
	conn   *grpc.ClientConn
	authz  authv3.AuthorizationClient
	health healthpb.HealthClient

	healthy       bool // starts false: a host is used once it passes a health check
	passes, fails int
	next          time.Time
	running       bool
}

func (h *checkHost) close() { _ = h.conn.Close() }

// checkHostFor is the next healthy host of the cluster not tried yet, round robin; nil when
// there is none.
func (e *Envoy) checkHostFor(st adstest.State, cluster string, tried map[string]bool) *checkHost {
	c := st.ClusterResources[cluster]
	if c == nil {
		return nil
	}
	addrs := adstest.Addresses(c.GetLoadAssignment())
	e.mu.Lock()
	defer e.mu.Unlock()
	checked := len(c.GetHealthChecks()) > 0
	for range addrs {
		i := e.rr[cluster] % len(addrs)
		e.rr[cluster]++
		h := e.checks[addrs[i]]
		if h == nil || tried[h.addr] || (checked && !h.healthy) {
			continue
		}
		return h
	}
	return nil
}

// healthChecks keeps a connection to every host of the ext_authz cluster and health-checks
// each at the cluster's interval and thresholds.
func (e *Envoy) healthChecks(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
		st, ok := e.config()
		if !ok {
			continue
		}
		hcm, _, ok := httpListener(st)
		if !ok {
			continue
		}
		_, cfg := extAuthzFilter(hcm)
		c := st.ClusterResources[cfg.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
		if c == nil {
			continue
		}
		e.reconcileHosts(ctx, adstest.Addresses(c.GetLoadAssignment()), c.GetHealthChecks())
	}
}

func (e *Envoy) reconcileHosts(ctx context.Context, addrs []string, hcs []*corev3.HealthCheck) {
	e.mu.Lock()
	defer e.mu.Unlock()
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
		if e.checks[a] == nil {
			conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				continue
			}
			e.checks[a] = &checkHost{addr: a, conn: conn, authz: authv3.NewAuthorizationClient(conn), health: healthpb.NewHealthClient(conn),
				healthy: len(hcs) == 0}
		}
	}
	for a, h := range e.checks {
		if !want[a] {
			h.close()
			delete(e.checks, a)
		}
	}
	if len(hcs) == 0 {
		return
	}
	hc := hcs[0]
	now := time.Now()
	for _, h := range e.checks {
		if h.running || now.Before(h.next) {
			continue
		}
		h.running = true
		h.next = now.Add(hc.GetInterval().AsDuration())
		go e.healthCheck(ctx, h, hc)
	}
}

// healthCheck asks one host once and applies the thresholds.
func (e *Envoy) healthCheck(ctx context.Context, h *checkHost, hc *corev3.HealthCheck) {
	cctx, cancel := context.WithTimeout(ctx, hc.GetTimeout().AsDuration())
	resp, err := h.health.Check(cctx, &healthpb.HealthCheckRequest{Service: hc.GetGrpcHealthCheck().GetServiceName()})
	cancel()
	pass := err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	e.mu.Lock()
	defer e.mu.Unlock()
	h.running = false
	if pass {
		h.passes, h.fails = h.passes+1, 0
		if !h.healthy && uint32(h.passes) >= hc.GetHealthyThreshold().GetValue() {
			h.healthy = true
			e.log.Debug("envoy stand-in: key check healthy", "host", h.addr)
		}
		return
	}
	h.passes, h.fails = 0, h.fails+1
	if h.healthy && uint32(h.fails) >= hc.GetUnhealthyThreshold().GetValue() {
		h.healthy = false
		e.log.Debug("envoy stand-in: key check unhealthy", "host", h.addr, "error", err)
	}
}

// HealthyChecks lists the ext_authz cluster's hosts that pass their health checks.
func (e *Envoy) HealthyChecks() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for a, h := range e.checks {
		if h.healthy {
			out = append(out, a)
		}
	}
	return out
}
