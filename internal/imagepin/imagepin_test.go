package imagepin

import "testing"

func TestMoving(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		image, digest string
		moving        bool
	}{
		{"vllm/vllm-openai:latest", "", true},
		{"vllm/vllm-openai:nightly", "", true},
		{"vllm/vllm-openai", "", true},
		{"registry.example.com:5000/vllm", "", true}, // the port is not a tag
		{"vllm/vllm-openai:gemma", "", true},
		{"vllm/vllm-openai:Latest", "", true},
		{"vllm/vllm-openai:latest", digest, false},
		{"vllm/vllm-openai@" + digest, "", false},
		{"vllm/vllm-openai:v0.27.1", "", false},
		{"vllm/vllm-openai:v0.12-cu130", "", false},
		{"registry.example.com:5000/vllm:v1", "", false},
		{"ghcr.io/inferplane/parakeet-openai:0.6b-v3-r1", "", false},
		{"", "", false},
	} {
		if got := Moving(c.image, c.digest) != ""; got != c.moving {
			t.Errorf("Moving(%q, %q) = %q, want moving %v", c.image, c.digest, Moving(c.image, c.digest), c.moving)
		}
	}
}
