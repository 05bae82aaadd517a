package envoyfilters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/internal/testnet"
	"github.com/inferplane/inferplane/usage"
	"github.com/inferplane/inferplane/xds/resources"
)

const e2eHost = "chat.acme.models.test"

// bootstrap is a static Envoy config around our Filters: one listener whose virtual host routes
// to the upstream double, with our HTTP filters, per-vhost config, access log and cluster.
func bootstrap(t *testing.T, f *Filters, listenPort, adminPort int, upstream string) *bootstrapv3.Bootstrap {
	t.Helper()
	httpFilters, err := f.HTTPFilters()
	if err != nil {
		t.Fatal(err)
	}
	router, _ := anypb.New(&routerv3.Router{})
	httpFilters = append(httpFilters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}})
	perVH, err := f.VirtualHostFilterConfig(resources.EndpointInfo{Tenant: "acme", Job: "chat", Runtime: "vllm", RequireAPIKey: true})
	if err != nil {
		t.Fatal(err)
	}
	logs, err := f.AccessLogs()
	if err != nil {
		t.Fatal(err)
	}
	hcm, _ := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: "ingress",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "e2e",
			VirtualHosts: []*routev3.VirtualHost{{
				Name: "acme/chat", Domains: []string{e2eHost, e2eHost + ":*"}, TypedPerFilterConfig: perVH,
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "upstream"}, Timeout: durationpb.New(0)}},
				}},
			}},
		}},
		HttpFilters: httpFilters,
		AccessLog:   logs,
	})
	clusters, err := f.Clusters()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(upstream)
	var p uint32
	fmt.Sscan(port, &p)
	clusters = append(clusters, &clusterv3.Cluster{
		Name: "upstream", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout: durationpb.New(time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: "upstream", Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: sockAddr(host, p)}}}},
		}}},
	})
	return &bootstrapv3.Bootstrap{
		Node:  &corev3.Node{Id: "e2e", Cluster: "e2e"},
		Admin: &bootstrapv3.Admin{Address: sockAddr("127.0.0.1", uint32(adminPort))},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: []*listenerv3.Listener{{
				Name:    "ingress",
				Address: sockAddr("127.0.0.1", uint32(listenPort)),
				FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
					Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
				}}}},
			}},
			Clusters: clusters,
		},
	}
}

func sockAddr(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

func freePort(t *testing.T) int { return testnet.FreePort(t) }

// replicaDouble is a test double of a vLLM replica (not vLLM): chat completions, JSON or SSE
// with usage, and it records the credential headers it was sent.
type replicaDouble struct {
	mu   sync.Mutex
	seen []http.Header
}

func (d *replicaDouble) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.seen = append(d.seen, r.Header.Clone())
	d.mu.Unlock()
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	usageJSON := `{"prompt_tokens":11,"completion_tokens":3,"total_tokens":14}`
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi there you"},"finish_reason":"stop"}],"usage":%s}`, usageJSON)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	for _, tok := range []string{"hi", " there", " you"} {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}],\"usage\":null}\n\n", tok)
		fl.Flush()
	}
	if req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":%s}\n\n", usageJSON)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestThroughEnvoy is the whole path: Envoy with our filters, the key check and the access
// log service over real gRPC, a replica double, and the official openai-go client. It needs an
// envoy binary on PATH; the bootstrap is built and validated either way.
func TestThroughEnvoy(t *testing.T) {
	secret := []byte(strings.Repeat("e2e-secret-", 4))
	h, _ := keys.NewHasher(secret)
	store := keys.NewFileStore(filepath.Join(t.TempDir(), "keys.db"))
	key, id, _ := keys.Generate(nil)
	if err := store.Create(context.Background(), keys.Record{ID: id, Tenant: "acme", Hash: h.Hex(key), CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	idx := keys.NewIndex()
	if err := (&keys.FileSyncer{Store: store, Interval: 50 * time.Millisecond}).Sync(t.Context(), idx); err != nil {
		t.Fatal(err)
	}
	agg := usage.NewAggregator(usage.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	extauthz.New(&keys.Verifier{Hasher: h, Index: idx}, nil).Register(g)
	usage.NewService(agg, usage.HostResolver("models.test"), nil).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)

	double := &replicaDouble{}
	up := httptest.NewServer(double)
	t.Cleanup(up.Close)

	f, err := New(Config{Address: lis.Addr().String(), LogFlushInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	listenPort, adminPort := freePort(t), freePort(t)
	bs := bootstrap(t, f, listenPort, adminPort, up.Listener.Addr().String())
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	envoy, err := exec.LookPath("envoy")
	if err != nil {
		t.Skip("SKIPPED: envoy is not on PATH, so the path through Envoy (ext_authz, the Lua usage filter, " +
			"gRPC access logs, openai-go) could not run here; the bootstrap it would use was built and validated")
	}
	cfg, _ := protojson.Marshal(bs)
	cfgPath := filepath.Join(t.TempDir(), "envoy.json")
	os.WriteFile(cfgPath, cfg, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, envoy, "-c", cfgPath, "--base-id", fmt.Sprint(adminPort), "-l", "warning")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	waitUntil(t, "envoy ready", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", adminPort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	client := func(k string) openai.Client {
		return openai.NewClient(
			option.WithBaseURL(fmt.Sprintf("http://127.0.0.1:%d/v1/", listenPort)),
			option.WithAPIKey(k), option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: testnet.HostTransport(e2eHost)}))
	}
	params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}

	c := client(key)
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil || resp.Usage.PromptTokens != 11 {
		t.Fatalf("chat completion with a key: %v %v", resp, err)
	}
	sp := params
	sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(ctx, sp)
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if stream.Err() != nil || text.String() != "hi there you" {
		t.Fatalf("stream through envoy: %q %v", text.String(), stream.Err())
	}

	wantStatus := func(k string, code int) {
		t.Helper()
		kc := client(k)
		_, err := kc.Chat.Completions.New(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != code {
			t.Fatalf("want HTTP %d, got %v", code, err)
		}
	}
	wantStatus("", 401)
	wantStatus("ipk_"+strings.Repeat("A", keys.KeyLen-4), 401)
	if _, err := store.Revoke(context.Background(), id, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "revocation", func() bool { return idx.Len() == 1 && mustGet(idx, id).Status(time.Now()) == keys.StatusRevoked })
	wantStatus(key, 403)

	// Usage: two requests with tokens from the JSON response and from the SSE stream.
	waitUntil(t, "usage from the access log", func() bool {
		u := agg.Usage(usage.UsageQuery{KeyID: id})
		return len(u) == 1 && u[0].Total.Requests == 2 && u[0].Total.TokensIn == 22 && u[0].Total.TokensOut == 6
	})
	double.mu.Lock()
	defer double.mu.Unlock()
	for _, hdr := range double.seen {
		if hdr.Get("Authorization") != "" || hdr.Get("X-Api-Key") != "" {
			t.Fatal("the key reached the replica")
		}
		if hdr.Get(extauthz.HeaderTenant) != "acme" || hdr.Get(extauthz.HeaderKeyID) != id {
			t.Fatalf("upstream headers %v", hdr)
		}
	}
}

func mustGet(idx *keys.Index, id string) keys.Record { r, _ := idx.Get(id); return r }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
