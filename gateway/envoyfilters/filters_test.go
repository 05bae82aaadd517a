package envoyfilters

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	// Registers every Envoy type so that each Any can be unpacked and validated.
	_ "github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/usage/envoylua"
	"github.com/inferplane/inferplane/xds/resources"
)

type validator interface{ ValidateAll() error }

// validate runs go-control-plane's generated validation on m and on every Any inside it.
func validate(t *testing.T, what string, m proto.Message) {
	t.Helper()
	v, ok := m.(validator)
	if !ok {
		t.Fatalf("%s: %T has no ValidateAll", what, m)
	}
	if err := v.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func unpack(t *testing.T, what string, a *anypb.Any) proto.Message {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("%s: unpack %s: %v", what, a.GetTypeUrl(), err)
	}
	validate(t, what, m)
	return m
}

func newFilters(t *testing.T, addr string) *Filters {
	t.Helper()
	f, err := New(Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestResourcesValidate(t *testing.T) {
	for _, addr := range []string{"10.0.0.7:18000", "inferplane-xds.inferplane-system.svc:18000", "[::1]:18000"} {
		t.Run(addr, func(t *testing.T) {
			f := newFilters(t, addr)
			hf, err := f.HTTPFilters()
			if err != nil {
				t.Fatal(err)
			}
			if len(hf) != 2 || hf[0].GetName() != ExtAuthzName || hf[1].GetName() != UsageLuaName {
				t.Fatalf("filters: %v", hf)
			}
			for _, h := range hf {
				validate(t, h.GetName(), h)
				unpack(t, h.GetName(), h.GetTypedConfig())
			}
			authz := unpack(t, "ext_authz", hf[0].GetTypedConfig()).(*extauthzv3.ExtAuthz)
			if authz.GetFailureModeAllow() || authz.GetGrpcService().GetEnvoyGrpc().GetClusterName() != DefaultCluster {
				t.Errorf("ext_authz must fail closed and call %s: %v", DefaultCluster, authz)
			}
			lua := unpack(t, "lua", hf[1].GetTypedConfig()).(*luav3.Lua)
			if lua.GetDefaultSourceCode().GetInlineString() != envoylua.Script {
				t.Error("lua filter does not carry the usage script")
			}

			als, err := f.AccessLogs()
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range als {
				validate(t, "access log", a)
				unpack(t, "access log", a.GetTypedConfig())
			}

			cl, err := f.Clusters()
			if err != nil || len(cl) != 2 {
				t.Fatalf("clusters: %v %v", cl, err)
			}
			wantType := clusterv3.Cluster_STATIC
			if strings.Contains(addr, "svc") {
				wantType = clusterv3.Cluster_STRICT_DNS
			}
			for i, want := range []string{DefaultCluster, DefaultUsageCluster} {
				c := cl[i]
				validate(t, "cluster", c)
				for k, a := range c.GetTypedExtensionProtocolOptions() {
					unpack(t, k, a)
				}
				if c.GetName() != want || c.GetType() != wantType {
					t.Errorf("cluster %s type %v, want %s %v", c.GetName(), c.GetType(), want, wantType)
				}
				// Each request holds a key check open: the services clusters allow as many
				// concurrent requests as a job cluster, not Envoy's default 1,024.
				th := c.GetCircuitBreakers().GetThresholds()
				if len(th) != 1 || th[0].GetMaxRequests().GetValue() != 4096 || th[0].GetMaxPendingRequests().GetValue() != 4096 ||
					th[0].GetMaxConnections().GetValue() != 4096 {
					t.Errorf("services cluster circuit breakers: %v", th)
				}
			}
		})
	}
}

func TestVirtualHostConfig(t *testing.T) {
	f := newFilters(t, "127.0.0.1:18000")
	for _, tc := range []struct {
		ep           resources.EndpointInfo
		wantDisabled bool
	}{
		{resources.EndpointInfo{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true}, false},
		{resources.EndpointInfo{Tenant: "acme", Job: "open", Runtime: "vllm", RequireAPIKey: false}, true},
		// The catch-all virtual host (unknown host names answer 404, not 401).
		{resources.EndpointInfo{}, true},
	} {
		m, err := f.VirtualHostFilterConfig(tc.ep)
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 1 || m[ExtAuthzName] == nil {
			t.Fatalf("%s: config keyed %v, want %s", tc.ep.Job, m, ExtAuthzName)
		}
		per := unpack(t, tc.ep.Job, m[ExtAuthzName]).(*extauthzv3.ExtAuthzPerRoute)
		if per.GetDisabled() != tc.wantDisabled {
			t.Errorf("%s: disabled=%v, want %v", tc.ep.Job, per.GetDisabled(), tc.wantDisabled)
		}
		if !tc.wantDisabled {
			ext := per.GetCheckSettings().GetContextExtensions()
			if ext[extauthz.ContextTenant] != "acme" || ext[extauthz.ContextJob] != tc.ep.Job {
				t.Errorf("%s: context extensions %v", tc.ep.Job, ext)
			}
		}
	}
	if _, err := f.VirtualHostFilterConfig(resources.EndpointInfo{Job: "x", RequireAPIKey: true}); err == nil {
		t.Error("a key-checked endpoint without a tenant was accepted")
	}
}

// TestIdentityHeadersMatchTheKeyCheck: the routes strip exactly the headers the key check sets,
// on endpoints where no check runs to overwrite them.
func TestIdentityHeadersMatchTheKeyCheck(t *testing.T) {
	want := []string{extauthz.HeaderTenant, extauthz.HeaderKeyID}
	if !slices.Equal(resources.IdentityHeaders, want) {
		t.Fatalf("resources.IdentityHeaders = %v, the key check sets %v", resources.IdentityHeaders, want)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, addr := range []string{"", "localhost", ":18000", "host:0", "host:http", "host:70000"} {
		if _, err := New(Config{Address: addr}); err == nil {
			t.Errorf("address %q accepted", addr)
		} else if !strings.Contains(err.Error(), "address") {
			t.Errorf("address %q: unclear error %v", addr, err)
		}
	}
}

// With key check processes of their own, checks go to all of them: health-checked over gRPC,
// never to one that fails (no panic mode), retried on another when one cannot be reached;
// access logs still go to the xDS server.
func TestKeyChecksCluster(t *testing.T) {
	f, err := New(Config{Address: "10.0.0.7:18000", KeyChecks: []string{"10.0.1.1:18001", "10.0.1.2:18001"}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := f.Clusters()
	if err != nil || len(cl) != 2 {
		t.Fatalf("clusters: %v %v", cl, err)
	}
	checks, usage := cl[0], cl[1]
	for _, c := range cl {
		validate(t, c.GetName(), c)
	}
	if got := adsAddrs(checks); got != "10.0.1.1:18001 10.0.1.2:18001" {
		t.Errorf("key checks: %s", got)
	}
	if got := adsAddrs(usage); got != "10.0.0.7:18000" {
		t.Errorf("usage: %s", got)
	}
	hc := checks.GetHealthChecks()
	if len(hc) != 1 || hc[0].GetGrpcHealthCheck().GetServiceName() != HealthService || hc[0].GetNoTrafficInterval().AsDuration() != time.Second {
		t.Errorf("health checks: %v", hc)
	}
	if checks.GetCommonLbConfig().GetHealthyPanicThreshold().GetValue() != 0 || checks.GetOutlierDetection() == nil {
		t.Errorf("no panic mode and outlier detection on the key checks: %v", checks)
	}
	if len(usage.GetHealthChecks()) != 0 {
		t.Error("the usage cluster needs no health checks")
	}
	hf, err := f.HTTPFilters()
	if err != nil {
		t.Fatal(err)
	}
	authz := unpack(t, "ext_authz", hf[0].GetTypedConfig()).(*extauthzv3.ExtAuthz)
	rp := authz.GetGrpcService().GetRetryPolicy()
	if rp.GetNumRetries().GetValue() != 2 || !strings.Contains(rp.GetRetryOn(), "connect-failure") || len(rp.GetRetryHostPredicate()) != 1 {
		t.Errorf("retry policy: %v", rp)
	}
	for _, h := range rp.GetRetryHostPredicate() {
		unpack(t, h.GetName(), h.GetTypedConfig())
	}
	als, err := f.AccessLogs()
	if err != nil {
		t.Fatal(err)
	}
	var cfg grpcalsv3.HttpGrpcAccessLogConfig
	if err := als[0].GetTypedConfig().UnmarshalTo(&cfg); err != nil || cfg.GetCommonConfig().GetGrpcService().GetEnvoyGrpc().GetClusterName() != DefaultUsageCluster {
		t.Errorf("access logs go to %v (%v)", cfg.GetCommonConfig().GetGrpcService(), err)
	}
	if _, err := New(Config{Address: "10.0.0.7:18000", KeyChecks: []string{"nohost"}}); err == nil || !strings.Contains(err.Error(), "key check") {
		t.Errorf("a bad key check address: %v", err)
	}
}

func adsAddrs(c *clusterv3.Cluster) string {
	var out []string
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
		}
	}
	return strings.Join(out, " ")
}
