package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/e2e/envoystandin"
	"github.com/inferplane/inferplane/e2e/redistest"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/internal/testnet"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/resources"
)

const testDomain = "models.example.com"

var testSecret = "0123456789abcdef0123456789abcdef-limits-secret"

// fakeClock is the windows' clock: the test moves it across a minute's boundary.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// world is 3 gateway replicas (gateway.Run, each with its key check, access-log service and
// limiter) over one real Redis, one key store file and one tenants folder, replica doubles as
// the model servers, and two stand-ins for Envoy, each sending its key checks to all three
// replicas in turn and its access logs to one of them.
type world struct {
	t       *testing.T
	redis   *redistest.Server
	clock   *fakeClock
	store   *keys.FileStore
	hasher  *keys.Hasher
	admins  []string
	envoys  []*envoystandin.Proxy
	doubles map[string]*replicadouble.Double
	n       atomic.Uint64
}

func startWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "tenants", "globex", "tenant.yaml"), `apiVersion: inferplane.io/v1alpha1
kind: Tenant
metadata:
  name: globex
spec:
  tier: test
  limits:
    requestsPerMinute: {value: 6}
    onStoreDown: closed
`)
	write(t, filepath.Join(dir, "tenants", "acme", "tenant.yaml"), "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  tier: test\n")
	return startWorldIn(t, dir, []string{"acme/chat", "globex/chat", "acme/long"}, 3, 2, "globex")
}

// startWorldIn starts a world over the tenants folder dir/tenants: replica doubles for the
// endpoints eps (tenant/job), replicas gateway replicas and envoys stand-ins for Envoy, after
// a first key of tenant first (so that the key store file exists).
func startWorldIn(t *testing.T, dir string, epNames []string, replicas, envoys int, first string) *world {
	t.Helper()
	w := &world{t: t, redis: redistest.Start(t), clock: &fakeClock{}, doubles: map[string]*replicadouble.Double{}}
	// 10:00:05 UTC: 55 s left in the minute, whatever the real clock says.
	w.clock.ns.Store(time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC).UnixNano())
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	for _, ep := range epNames {
		d, err := replicadouble.Start(replicadouble.Options{Name: strings.ReplaceAll(ep, "/", "-"), ChunkDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		w.doubles[ep] = d
		tenant, job, _ := strings.Cut(ep, "/")
		fmt.Fprintf(&eps, "- tenant: %s\n  job: %s\n  replicas:\n  - address: %s\n    port: %d\n", tenant, job, d.Host(), d.Port())
	}
	write(t, filepath.Join(dir, "endpoints.yaml"), eps.String())
	write(t, filepath.Join(dir, "secret"), testSecret)
	w.store = keys.NewFileStore(filepath.Join(dir, "keys.db"))
	h, err := keys.NewHasher([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	w.hasher = h
	w.key(first, nil) // the store exists before the gateways read it
	ctx, cancel := context.WithCancel(context.Background())
	var grpcs []string
	for i := range replicas {
		admin, grpcAddr := w.gateway(ctx, i, dir)
		w.admins, grpcs = append(w.admins, admin), append(grpcs, grpcAddr)
	}
	for i := range envoys {
		w.envoys = append(w.envoys, envoystandin.Start(t, envoystandin.Options{
			Admin: w.admins[0], Authz: grpcs, ALS: grpcs[i], Node: "envoy-" + strconv.Itoa(i)}))
	}
	t.Cleanup(cancel)
	return w
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// gateway runs replica i until ctx ends and returns its admin URL and gRPC address once ready.
func (w *world) gateway(ctx context.Context, i int, dir string) (string, string) {
	t := w.t
	ready := make(chan xds.Running, 1)
	res := resources.DefaultConfig(testDomain)
	hc := health.DefaultConfig()
	hc.Interval, hc.Timeout = 200*time.Millisecond, 150*time.Millisecond
	cfg := Config{
		XDS: xds.Config{GRPCAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0", Resources: res, Health: hc,
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Started: func(r xds.Running) { ready <- r }},
		Source: Source{Kind: SourceFile, File: filepath.Join(dir, "endpoints.yaml"), FileInterval: time.Second},
		APIKeys: APIKeys{File: w.store.Path, SecretFile: filepath.Join(dir, "secret"), ServicesAddress: "127.0.0.1:18000",
			UsageFile: "-", UsageSaveInterval: time.Minute,
			Limits: Limits{Redis: w.redis.Addr(), TenantsDir: filepath.Join(dir, "tenants"), Grace: 300 * time.Millisecond,
				FlushInterval: 20 * time.Millisecond, Now: w.clock.Now,
				// Every check reads the token counts it uses, so that each step's headers are
				// exact; the default (2 s) lets a replica answer from a view up to that old.
				MaxStale: time.Nanosecond,
				// The default 100 ms is tight for a machine as loaded as the test machines get:
				// a timeout would (rightly) switch a replica to its own counts.
				Timeout: 2 * time.Second}},
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() { <-done })
	var r xds.Running
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("gateway %d: %v", i, err)
	}
	admin := "http://" + r.AdminAddr.String()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %d not ready", i)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return admin, r.GRPCAddr.String()
}

// key creates a key of tenant with limits l and returns it. The gateways reload the key store
// file every 200 ms: a key with limits is returned once every replica lists it in /v1/limits.
// A key without limits shows nowhere, so a test makes it before a key with limits: the file is
// reloaded whole, so the second key's arrival is the first one's too.
func (w *world) key(tenant string, l *v1alpha1.RateLimits) (string, string) {
	w.t.Helper()
	key, id, err := keys.Generate(nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.store.Create(context.Background(), keys.Record{ID: id, Tenant: tenant, Hash: w.hasher.Hex(key),
		CreatedAt: time.Now().Add(-time.Minute).UTC(), Limits: l}); err != nil {
		w.t.Fatal(err)
	}
	if l != nil {
		w.keyLoaded(id)
	}
	return key, id
}

// keyLoaded waits until every replica lists the key's limits in /v1/limits.
func (w *world) keyLoaded(id string) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < len(w.admins); {
		if rep := w.status(i, "key="+id); len(rep.Limits) > 0 && rep.Limits[0].KeyID == id {
			i++
			continue
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("replica %d never loaded key %s from the key store", i, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type answer struct {
	code    int
	header  http.Header
	body    string
	gotBody bool
}

// chat sends one chat completion through the stand-ins, in turn.
func (w *world) chat(ep, key, body string) answer {
	w.t.Helper()
	envoy := w.envoys[w.n.Add(1)%uint64(len(w.envoys))]
	tenant, job, _ := strings.Cut(ep, "/")
	req, _ := http.NewRequest(http.MethodPost, envoy.URL()+"/v1/chat/completions", strings.NewReader(body))
	req.Host = job + "." + tenant + "." + testDomain
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

const hello = `{"model":"m","messages":[{"role":"user","content":"hello world"}]}`

func num(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, h.Get(name), err)
	}
	return n
}

// status reads /v1/limits from replica i.
func (w *world) status(i int, q string) limits.StatusReport {
	w.t.Helper()
	resp, err := http.Get(w.admins[i] + limits.Path + "?" + q)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep limits.StatusReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		w.t.Fatal(err)
	}
	return rep
}

// storeDownEverywhere waits until every replica's metrics say the limits store is down, as
// each replica's own grace starts then (its flush loop pings the store every FlushInterval).
func (w *world) storeDownEverywhere() {
	w.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < len(w.admins); {
		resp, err := http.Get(w.admins[i] + "/metrics")
		if err != nil {
			w.t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "\ninferplane_ratelimit_store_up 0\n") {
			i++
			continue
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("replica %d never noticed the limits store down", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// usedReaches waits until the key's first limit shows at least want used on every replica's
// /v1/limits (Redis's count plus what that replica counted and has not pushed): the tokens of
// the requests before have propagated (the stand-in logs at once, a replica counts them, its
// flush pushes them). It returns the least any replica shows.
func (w *world) usedReaches(id string, want int64) int64 {
	w.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		least := int64(-1)
		for i := range w.admins {
			rep := w.status(i, "key="+id)
			if len(rep.Limits) == 0 {
				w.t.Fatalf("replica %d: no limits for key %s", i, id)
			}
			if u := rep.Limits[0].Used; least < 0 || u < least {
				least = u
			}
		}
		if least >= want {
			return least
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("key %s: used never reached %d on every replica (least %d)", id, want, least)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLimitsThroughEnvoyStandIn: 3 gateway replicas, one Redis, two stand-ins for Envoy,
// replica doubles. Envoy itself does not run here (no binary); see package envoystandin.
func TestLimitsThroughEnvoyStandIn(t *testing.T) {
	w := startWorld(t)

	t.Run("a key's requests per minute: exactly N, then 429 from any replica, until the minute ends", func(t *testing.T) {
		key, id := w.key("acme", &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 10}})
		for i := 0; i < 10; i++ {
			a := w.chat("acme/chat", key, hello)
			if a.code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, a.code, a.body)
			}
			if got := num(t, a.header, limits.HeaderRemainingRequests); got != int64(9-i) {
				t.Fatalf("request %d: remaining %d, want %d", i, got, 9-i)
			}
			if a.header.Get(limits.HeaderLimitRequests) != "10" || a.header.Get(limits.HeaderResetRequests) != "55s" {
				t.Fatalf("headers %v", a.header)
			}
		}
		for i := 0; i < 6; i++ { // every replica refuses, twice
			a := w.chat("acme/chat", key, hello)
			var e struct {
				Error struct{ Code, Type, Message string }
			}
			if a.code != http.StatusTooManyRequests || a.header.Get("Retry-After") != "55" || json.Unmarshal([]byte(a.body), &e) != nil ||
				e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" ||
				!strings.Contains(e.Error.Message, "requests per minute (requestsPerMinute) of API key "+id+": limit 10, used 10") {
				t.Fatalf("refusal %d: %d %v %s", i, a.code, a.header, a.body)
			}
			if a.header.Get(limits.HeaderRemainingRequests) != "0" {
				t.Fatalf("refusal remaining %q", a.header.Get(limits.HeaderRemainingRequests))
			}
		}
		if got := w.doubles["acme/chat"].RequestsTo("/v1/chat/completions"); got < 10 {
			t.Fatalf("the replica saw %d requests", got)
		}
		// The next minute, on the fake clock: the key is served again.
		w.clock.Add(time.Minute)
		if a := w.chat("acme/chat", key, hello); a.code != http.StatusOK || a.header.Get(limits.HeaderRemainingRequests) != "9" {
			t.Fatalf("next minute: %d %v", a.code, a.header)
		}
	})

	t.Run("openai-go reads the headers and the 429", func(t *testing.T) {
		key, _ := w.key("acme", &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 1}})
		c := openai.NewClient(option.WithBaseURL(w.envoys[0].URL()+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: testnet.HostTransport("chat.acme." + testDomain)}))
		params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}
		var raw *http.Response
		if _, err := c.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&raw)); err != nil {
			t.Fatalf("first: %v", err)
		}
		if raw.Header.Get(limits.HeaderRemainingRequests) != "0" || raw.Header.Get(limits.HeaderLimitRequests) != "1" {
			t.Fatalf("first: headers %v", raw.Header)
		}
		_, err := c.Chat.Completions.New(context.Background(), params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" ||
			apiErr.Type != "requests" || apiErr.Response.Header.Get("Retry-After") == "" {
			t.Fatalf("second: %v", err)
		}
	})

	t.Run("a tenant's limit caps all its keys together", func(t *testing.T) {
		k1, _ := w.key("globex", nil) // first: k2's arrival is k1's (see key)
		k2, _ := w.key("globex", &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 100}})
		ok := 0
		for i := 0; i < 10; i++ {
			k := k1
			if i%2 == 1 {
				k = k2
			}
			a := w.chat("globex/chat", k, hello)
			switch a.code {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				if !strings.Contains(a.body, "of the tenant: limit 6") {
					t.Fatalf("refusal names %s", a.body)
				}
			default:
				t.Fatalf("%d %s", a.code, a.body)
			}
		}
		if ok != 6 {
			t.Fatalf("%d of 10 requests of two keys passed, the tenant's limit is 6", ok)
		}
	})

	t.Run("a token budget stops the key within the overshoot, remaining tokens decrease", func(t *testing.T) {
		key, id := w.key("acme", &v1alpha1.RateLimits{TokensPerDay: &v1alpha1.Limit{Value: 30}})
		// Each answer: prompt "hello world" (2 tokens) + "Replica acme-chat heard: hello world" (5).
		want := []int64{30, 23, 16, 9, 2}
		for i, rem := range want {
			a := w.chat("acme/chat", key, hello)
			if a.code != http.StatusOK || num(t, a.header, limits.HeaderRemainingTokens) != rem {
				t.Fatalf("request %d: %d, remaining tokens %q, want %d (%s)", i, a.code, a.header.Get(limits.HeaderRemainingTokens), rem, a.body)
			}
			w.usedReaches(id, int64(7*(i+1)))
		}
		a := w.chat("acme/chat", key, hello)
		if a.code != http.StatusTooManyRequests || !strings.Contains(a.body, `"insufficient_quota"`) ||
			!strings.Contains(a.body, "tokens per day (tokensPerDay) of API key "+id+": limit 30, used 35") {
			t.Fatalf("after the budget: %d %s", a.code, a.body)
		}
		rep := w.status(2, "key="+id)
		if len(rep.Limits) != 1 || rep.Limits[0].Used != 35 || rep.Limits[0].Remaining != 0 || !rep.StoreUp {
			t.Fatalf("/v1/limits: %+v", rep)
		}
	})

	t.Run("a stream cut off by its client counts what was generated", func(t *testing.T) {
		key, id := w.key("acme", &v1alpha1.RateLimits{TokensPerDay: &v1alpha1.Limit{Value: 100000}})
		words := strings.Repeat("word ", 40)
		for _, opts := range []string{`"stream_options":{"include_usage":true,"continuous_usage_stats":true}`, `"stream_options":{"include_usage":true}`} {
			before := w.status(1, "key="+id).Limits[0].Used
			body := `{"model":"m","stream":true,` + opts + `,"messages":[{"role":"user","content":"` + words + `"}]}`
			tenantJob := strings.SplitN("acme/chat", "/", 2)
			req, _ := http.NewRequest(http.MethodPost, w.envoys[0].URL()+"/v1/chat/completions", strings.NewReader(body))
			req.Host = tenantJob[1] + "." + tenantJob[0] + "." + testDomain
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1)
			events := 0
			for events < 10 { // read 10 events (20 ms apart), then hang up
				if _, err := resp.Body.Read(buf); err != nil {
					t.Fatal(err)
				}
				if buf[0] == '\n' {
					events++
				}
			}
			resp.Body.Close()
			used := w.usedReaches(id, before+1) - before
			// 5 events in, about 3 to 8 content events passed; a whole answer is 43 prompt +
			// 43 completion tokens.
			if used < 3 || used >= 86 {
				t.Fatalf("%s: the aborted stream counted %d tokens", opts, used)
			}
			t.Logf("%s: the aborted stream counted %d tokens (a whole answer: 86)", opts, used)
		}
	})

	t.Run("a replica killed mid-stream: what passed is counted", func(t *testing.T) {
		key, id := w.key("acme", &v1alpha1.RateLimits{TokensPerDay: &v1alpha1.Limit{Value: 100000}})
		body := `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"messages":[{"role":"user","content":"` + strings.Repeat("word ", 40) + `"}]}`
		req, _ := http.NewRequest(http.MethodPost, w.envoys[1].URL()+"/v1/chat/completions", strings.NewReader(body))
		req.Host = "long.acme." + testDomain
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(200*time.Millisecond, func() { w.doubles["acme/long"].Close() })
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		used := w.usedReaches(id, 1)
		if used < 40 || used >= 86 || strings.Contains(string(b), "[DONE]") {
			t.Fatalf("killed mid-stream: counted %d tokens; got %d bytes", used, len(b))
		}
		t.Logf("a replica killed after 200 ms: %d tokens counted (a whole answer: 86)", used)
	})

	t.Run("Redis stopped and restarted", func(t *testing.T) {
		g, _ := w.key("globex", nil) // first: the next key's arrival is its own (see key)
		key, id := w.key("acme", &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 8}})
		w.clock.Add(time.Minute) // a fresh minute for globex too
		for i := 0; i < 3; i++ {
			if a := w.chat("acme/chat", key, hello); a.code != http.StatusOK {
				t.Fatalf("before: %d", a.code)
			}
			if a := w.chat("globex/chat", g, hello); a.code != http.StatusOK {
				t.Fatalf("before: globex %d %s", a.code, a.body)
			}
		}
		w.redis.Stop()
		// In the grace both go on, with the warning.
		a := w.chat("acme/chat", key, hello)
		if a.code != http.StatusOK || !strings.Contains(a.header.Get(limits.HeaderWarning), "limits store unreachable") {
			t.Fatalf("in the grace: %d %v", a.code, a.header)
		}
		// The grace runs on each replica from the moment it noticed the outage, and the key
		// check may land on any of the three: wait until all have noticed, then outlast it.
		w.storeDownEverywhere()
		time.Sleep(400 * time.Millisecond)
		if a := w.chat("globex/chat", g, hello); a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "rate_limit_store_unavailable") {
			t.Fatalf("globex fails closed after the grace: %d %s", a.code, a.body)
		}
		// acme fails open: each replica enforces what it knows; never unlimited.
		passed := 0
		for i := 0; i < 40; i++ {
			if a := w.chat("acme/chat", key, hello); a.code == http.StatusOK {
				passed++
			}
		}
		// The documented bound: each replica admits up to the limit from the count it last
		// saw, so at most 3 x 8 in the minute with the 4 passed before.
		if passed+4 > 3*8 {
			t.Fatalf("%d passed while Redis was down: more than 3 replicas x the limit", passed)
		}
		t.Logf("Redis down, fail open: %d more requests passed on 3 replicas (limit 8, 4 spent before)", passed)
		w.redis.Restart()
		// The replicas ping, then put their counts back; the next check may land on any.
		deadline := time.Now().Add(15 * time.Second)
		for i := 0; i < len(w.admins); {
			rep := w.status(i, "key="+id)
			if rep.StoreUp && rep.Limits[0].Used >= 8 {
				i++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the restart, replica %d: %+v", i, rep)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if a := w.chat("acme/chat", key, hello); a.code != http.StatusTooManyRequests {
			t.Fatalf("after the restart the minute is still spent, got %d", a.code)
		}
	})
}
