package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/internal/testnet"
	"github.com/inferplane/inferplane/usage"
)

// sharedTenants is a tenants folder with the shared serving tier: platform, a provider tenant
// serving Qwen/Qwen3-32B at qwen.platform; acme, a dedicated tenant with its own endpoint
// chat.acme; globex, on a tier without GPUs whose catalogue offers the shared Qwen, with a
// budget of 30 tokens a day; initech, whose catalogue does not offer it.
var sharedTenants = map[string]string{
	"tiers/h100-dedicated.yaml": `apiVersion: inferplane.io/v1alpha1
kind: Tier
metadata: {name: h100-dedicated}
spec:
  nodeTypes: [metal3.gpu-h100]
  models: [Qwen/*, meta-llama/*]
`,
	"tiers/shared-serving.yaml": `apiVersion: inferplane.io/v1alpha1
kind: Tier
metadata: {name: shared-serving}
spec:
  nodeTypes: []
  models: [Qwen/Qwen3-32B]
  limits:
    tokensPerDay: {value: 30}
`,
	"tiers/llama-only.yaml": `apiVersion: inferplane.io/v1alpha1
kind: Tier
metadata: {name: llama-only}
spec:
  nodeTypes: []
  models: [meta-llama/*]
`,
	"platform/tenant.yaml": "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata: {name: platform}\nspec: {tier: h100-dedicated, provider: true}\n",
	"platform/jobs/qwen.yaml": `apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata: {name: qwen}
spec: {model: Qwen/Qwen3-32B, replicas: 1, gpuCount: 1, nodeType: metal3.gpu-h100}
`,
	"acme/tenant.yaml":    "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {tier: h100-dedicated}\n",
	"globex/tenant.yaml":  "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata: {name: globex}\nspec: {tier: shared-serving}\n",
	"initech/tenant.yaml": "apiVersion: inferplane.io/v1alpha1\nkind: Tenant\nmetadata: {name: initech}\nspec: {tier: llama-only}\n",
}

// TestSharedTierThroughEnvoyStandIn: the shared serving tier end to end through gateway.Run
// (its key check over real gRPC, its access-log service, its limiter over a real Redis), a
// stand-in for Envoy (no Envoy binary here; package envoystandin) and replica doubles. A key
// of globex calls the provider's model with openai-go and its budget and usage are globex's;
// acme's dedicated endpoint refuses it; a tenant whose catalogue lacks the model is refused.
func TestSharedTierThroughEnvoyStandIn(t *testing.T) {
	dir := t.TempDir()
	for p, s := range sharedTenants {
		write(t, filepath.Join(dir, "tenants", p), s)
	}
	w := startWorldIn(t, dir, []string{"platform/qwen", "acme/chat"}, 1, 1, "acme")
	bKey, bID := w.key("globex", nil)
	aKey, _ := w.key("acme", nil)
	cKey, _ := w.key("initech", nil)
	// A key bound to one endpoint of its own tenant stays there.
	boundKey, boundID, err := keys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.store.Create(context.Background(), keys.Record{ID: boundID, Tenant: "globex", Endpoint: "mine",
		Hash: w.hasher.Hex(boundKey), CreatedAt: time.Now().Add(-time.Minute).UTC()}); err != nil {
		t.Fatal(err)
	}
	waitKeyLoaded(t, w, "globex", boundKey)

	t.Run("B's key calls the provider's model: served, with B's budget in the headers", func(t *testing.T) {
		c := openai.NewClient(option.WithBaseURL(w.envoys[0].URL()+"/v1/"), option.WithAPIKey(bKey), option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: testnet.HostTransport("qwen.platform." + testDomain)}))
		params := openai.ChatCompletionNewParams{Model: "Qwen/Qwen3-32B",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello world")}}
		var raw *http.Response
		got, err := c.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got.Choices[0].Message.Content, "Replica platform-qwen heard") {
			t.Fatalf("answered by %q", got.Choices[0].Message.Content)
		}
		if raw.Header.Get(limits.HeaderLimitTokens) != "30" || raw.Header.Get(limits.HeaderRemainingTokens) != "30" {
			t.Fatalf("B's tenant budget is not the one in the headers: %v", raw.Header)
		}
	})

	t.Run("B's budget is charged, then refuses B on the shared endpoint", func(t *testing.T) {
		// Each answer: prompt "hello world" (2 tokens) + "Replica platform-qwen heard: hello world" (5).
		w.tenantUsedReaches("globex", 7)
		for i, rem := range []int64{23, 16, 9, 2} {
			a := w.chat("platform/qwen", bKey, hello)
			if a.code != http.StatusOK || num(t, a.header, limits.HeaderRemainingTokens) != rem {
				t.Fatalf("request %d: %d, remaining tokens %q, want %d (%s)", i, a.code, a.header.Get(limits.HeaderRemainingTokens), rem, a.body)
			}
			w.tenantUsedReaches("globex", int64(7*(i+2)))
		}
		a := w.chat("platform/qwen", bKey, hello)
		if a.code != http.StatusTooManyRequests || !strings.Contains(a.body, `"insufficient_quota"`) ||
			!strings.Contains(a.body, "of the tenant: limit 30, used 35") {
			t.Fatalf("after B's budget: %d %s", a.code, a.body)
		}
		// The provider pays nothing: it has no limits, and none of its counts moved.
		if rep := w.status(0, "tenant=platform"); len(rep.Limits) != 0 {
			t.Fatalf("the provider's limits: %+v", rep.Limits)
		}
	})

	t.Run("B's usage shows the calls, under B, to the provider's endpoint", func(t *testing.T) {
		u := w.usage("tenant=globex")
		if len(u.Keys) != 1 || u.Keys[0].KeyID != bID || u.Keys[0].Tenant != "globex" ||
			u.Keys[0].Total.Requests != 5 || u.Keys[0].Total.TokensIn != 10 || u.Keys[0].Total.TokensOut != 25 ||
			strings.Join(u.Keys[0].Endpoints, ",") != "qwen.platform" {
			t.Fatalf("globex's usage: %+v", u.Keys)
		}
		if u := w.usage("tenant=platform"); len(u.Keys) != 0 {
			t.Fatalf("the provider's usage lists keys: %+v", u.Keys)
		}
	})

	deny := func(t *testing.T, ep, key string) {
		t.Helper()
		a := w.chat(ep, key, hello)
		var e struct{ Error struct{ Code string } }
		if a.code != http.StatusForbidden || json.Unmarshal([]byte(a.body), &e) != nil || e.Error.Code != "api_key_not_allowed" {
			t.Fatalf("%s: %d %s", ep, a.code, a.body)
		}
	}
	t.Run("A's dedicated endpoint refuses B's key", func(t *testing.T) {
		deny(t, "acme/chat", bKey)
		if a := w.chat("acme/chat", aKey, hello); a.code != http.StatusOK {
			t.Fatalf("A's own key: %d %s", a.code, a.body)
		}
	})
	t.Run("the provider's model refuses a tenant whose catalogue lacks it, and a key bound to an endpoint", func(t *testing.T) {
		deny(t, "platform/qwen", cKey)
		deny(t, "platform/qwen", boundKey)
	})
	t.Run("A's tier offers Qwen: A's key calls the shared model too", func(t *testing.T) {
		if a := w.chat("platform/qwen", aKey, hello); a.code != http.StatusOK {
			t.Fatalf("%d %s", a.code, a.body)
		}
	})
}

// waitKeyLoaded waits until the gateway knows key (it reloads the key store file every
// 200 ms): the key is then refused as not allowed rather than unknown on another's endpoint.
func waitKeyLoaded(t *testing.T, w *world, tenant, key string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		a := w.chat("acme/chat", key, hello)
		if a.code != http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key of %s never loaded: %d %s", tenant, a.code, a.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tenantUsedReaches waits until tenant's first limit shows at least want used on every
// replica: the tokens of the requests before have been counted.
func (w *world) tenantUsedReaches(tenant string, want int64) {
	w.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < len(w.admins); {
		rep := w.status(i, "tenant="+tenant)
		if len(rep.Limits) > 0 && rep.Limits[0].Used >= want {
			i++
			continue
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("tenant %s: used never reached %d on replica %d: %+v", tenant, want, i, rep.Limits)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// usage reads /v1/usage from replica 0.
func (w *world) usage(q string) usage.UsageReport {
	w.t.Helper()
	resp, err := http.Get(w.admins[0] + usage.UsagePath + "?" + q)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep usage.UsageReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != http.StatusOK {
		w.t.Fatalf("%s: %d %v", usage.UsagePath, resp.StatusCode, err)
	}
	return rep
}
