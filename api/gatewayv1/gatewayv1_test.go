package gatewayv1

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

func TestRuntimePaths(t *testing.T) {
	for _, c := range []struct {
		runtime string
		want    []string
		known   bool
	}{
		{string(v1alpha1.RuntimeVLLM), []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"}, true},
		{string(v1alpha1.RuntimeParakeet), []string{"/v1/audio/transcriptions", "/v1/models"}, true},
		{"sglang", nil, false},
	} {
		t.Run(c.runtime, func(t *testing.T) {
			got, ok := RuntimePaths(c.runtime)
			assert.Equal(t, c.known, ok)
			assert.Equal(t, c.want, got)
		})
	}
	p, _ := RuntimePaths(string(v1alpha1.RuntimeVLLM))
	p[0] = "/admin"
	again, _ := RuntimePaths(string(v1alpha1.RuntimeVLLM))
	assert.Equal(t, "/v1/chat/completions", again[0], "a caller's change to the list is its own")
	assert.Equal(t, []string{"parakeet", "vllm"}, Runtimes())
}

// The wire format is what the gateway's readers decode: these bytes are the contract.
func TestEndpointStatusWire(t *testing.T) {
	for _, c := range []struct {
		name string
		in   EndpointStatus
		want string
	}{
		{"plain", EndpointStatus{Endpoint: "acme/chat", Host: "chat.acme.example.test", Runtime: "vllm", Serving: 1,
			Replicas: []ReplicaStatus{{Name: "acme/chat-r0-n0", Address: "10.0.0.1:8000", Running: true, Ready: true, Probe: "up", Result: "200", Serving: true}}},
			`{"endpoint":"acme/chat","host":"chat.acme.example.test","runtime":"vllm","requireAPIKey":false,"serving":1,` +
				`"replicas":[{"name":"acme/chat-r0-n0","address":"10.0.0.1:8000","running":true,"ready":true,"probe":"up","result":"200","serving":true}]}`},
		{"tls and no replicas", EndpointStatus{Endpoint: "acme/asr", RequireAPIKey: true, TLS: &TLSChoice{Reason: "no valid certificate"}},
			`{"endpoint":"acme/asr","host":"","runtime":"","requireAPIKey":true,"serving":0,"tls":{"reason":"no valid certificate"},"replicas":null}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.in)
			require.NoError(t, err)
			assert.JSONEq(t, c.want, string(b))
			assert.Equal(t, c.want, string(b), "field order is part of what readers see")
		})
	}
}

func TestEndpointNames(t *testing.T) {
	for _, c := range []struct{ tenant, job, domain, host string }{
		{"acme", "chat", "models.example.com", "chat.acme.models.example.com"},
		{"platform", "qwen3-32b", "inference.test", "qwen3-32b.platform.inference.test"},
	} {
		if got := Host(c.tenant, c.job, c.domain); got != c.host {
			t.Errorf("Host(%q, %q, %q) = %q, want %q", c.tenant, c.job, c.domain, got, c.host)
		}
		if got := URL(c.tenant, c.job, c.domain); got != "https://"+c.host {
			t.Errorf("URL(%q, %q, %q) = %q", c.tenant, c.job, c.domain, got)
		}
	}
}
