package redact

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/auth/keys"
)

// Real-looking secrets: a Hugging Face token has "hf_" and 34 letters and digits; an
// inferplane key comes from auth/keys itself, so a change of its format breaks this test.
const (
	hfToken   = "hf_QmTyxZbWvKcNpRsLdJfGhEaUoIiYtRwXqZk"
	envSecret = "wandb-5f0c1d2e3a4b5c6d7e8f90a1b2c3d4e5"
)

func TestRedactsSecrets(t *testing.T) {
	apiKey, _, err := keys.Generate(rand.Reader)
	require.NoError(t, err)
	r := New(hfToken, envSecret, "short", "  ")
	assert.Equal(t, 2, r.Secrets(), "values under MinSecret are no secret")

	for _, tc := range []struct{ name, in, want string }{
		{"the token file's value", "token is " + hfToken + ".", "token is " + Mask + "."},
		{"another HF token", "using hf_abcdefghijklmnopqrstuvwxyz0123456789 now", "using " + Mask + " now"},
		{"an inferplane key", "key=" + apiKey, "key=" + Mask},
		{"an inferplane key in a sentence", "called with " + apiKey + " twice", "called with " + Mask + " twice"},
		{"bearer header", "Authorization: Bearer sk-proj-0123456789abcdef", "Authorization: Bearer " + Mask},
		{"bearer in a curl line", `curl -H 'authorization: bearer eyJhbGciOiJIUzI1NiJ9.e30.x'`, `curl -H 'authorization: bearer ` + Mask + `'`},
		{"basic header", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic " + Mask},
		{"a secret env value", "WANDB_API_KEY=" + envSecret, "WANDB_API_KEY=" + Mask},
		{"python dict", `non-default args: {'model': 'm', 'api_key': 'sk-0123456789', 'hf_token': 'abcdefgh12345'}`,
			`non-default args: {'model': 'm', 'api_key': '` + Mask + `', 'hf_token': '` + Mask + `'}`},
		{"json", `{"password": "correct horse battery"}`, `{"password": "` + Mask + `"}`},
		{"a flag", "vllm serve m --api-key abcdefgh12345678 --port 8000", "vllm serve m --api-key " + Mask + " --port 8000"},
		{"url password", "git clone https://oauth2:glpat-0123456789@git.example.com/x.git", "git clone https://oauth2:" + Mask + "@git.example.com/x.git"},
		{"carriage-return progress", "\rDownloading 10% " + hfToken + "\rDownloading 20% " + hfToken,
			"\rDownloading 10% " + Mask + "\rDownloading 20% " + Mask},
		{"twice masked is the same", "token=" + Mask, "token=" + Mask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.String(tc.in)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, r.String(got), "redaction is idempotent")
		})
	}
	assert.NotContains(t, strings.Join(r.Strings([]string{hfToken, apiKey}), " "), "hf_Q")
}

// Text that only looks near a credential stays as it is: vLLM's own lines are full of
// "tokens" and "keys".
func TestLeavesOrdinaryLines(t *testing.T) {
	r := New(hfToken)
	for _, line := range []string{
		"(EngineCore_DP0 pid=461101) INFO 12-18 06:00:55 [kv_cache_utils.py:1199] GPU KV cache size: 1,661,008 tokens",
		"non-default args: {'max_num_batched_tokens': 8192, 'tokenizer': 'Qwen/Qwen3-32B', 'max_model_len': 32768}",
		"Maximum concurrency for 4,096 tokens per request: 405.52x",
		"[NeMo I 2025-09-20 07:40:01 mixins:184] Tokenizer SentencePieceTokenizer initialized with 8192 tokens",
		"INFO:     127.0.0.1:53422 - \"GET /health HTTP/1.1\" 200 OK",
		"config.json: 100%|██████████| 728/728 [00:00<00:00, 5.37MB/s]",
		"key: short",
	} {
		assert.Equal(t, line, r.String(line))
	}
}

func BenchmarkRedactLine(b *testing.B) {
	r := New(hfToken, envSecret)
	line := "(APIServer pid=1) INFO 12-03 07:00:00 [api_server.py:1] Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:02<00:02,  1.72it/s]"
	for b.Loop() {
		r.String(line)
	}
}
