package endpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	cases := []struct {
		arg, domain, gateway string
		want                 Target
		err                  string
	}{
		{arg: "chat.acme", domain: "models.example.com",
			want: Target{BaseURL: "https://chat.acme.models.example.com", Host: "chat.acme.models.example.com", Tenant: "acme", Job: "chat"}},
		{arg: "https://chat.acme.models.example.com/v1/", domain: "models.example.com",
			want: Target{BaseURL: "https://chat.acme.models.example.com", Host: "chat.acme.models.example.com", Tenant: "acme", Job: "chat"}},
		{arg: "http://127.0.0.1:8080",
			want: Target{BaseURL: "http://127.0.0.1:8080", Host: "127.0.0.1"}},
		{arg: "chat.acme.models.example.com",
			want: Target{BaseURL: "https://chat.acme.models.example.com", Host: "chat.acme.models.example.com"}},
		{arg: "chat.acme", domain: "models.example.com", gateway: "http://127.0.0.1:9000",
			want: Target{BaseURL: "http://127.0.0.1:9000", Host: "chat.acme.models.example.com", Tenant: "acme", Job: "chat", viaGateway: true}},
		{arg: "chat.acme", err: "set --domain or $INFERPLANE_DOMAIN"},
		{arg: "chat", domain: "x.test", err: `endpoint "chat": expected <job>.<tenant>`},
		{arg: "Chat.acme", domain: "x.test", err: "expected <job>.<tenant> (DNS labels)"},
		{arg: "https://chat.acme.x.test/v1/chat/completions", err: "without a path"},
		{arg: "chat.acme", domain: "x.test", gateway: "127.0.0.1:9000", err: `--gateway "127.0.0.1:9000": expected a URL`},
	}
	for _, tc := range cases {
		got, err := Resolve(tc.arg, tc.domain, tc.gateway)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.arg)
			continue
		}
		require.NoError(t, err, tc.arg)
		assert.Equal(t, tc.want, got, tc.arg)
	}
}

func TestKey(t *testing.T) {
	t.Setenv(EnvAPIKey, " ipk_env \n")
	k, err := Key("")
	require.NoError(t, err)
	assert.Equal(t, "ipk_env", k)
	f := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(f, []byte("ipk_file\n"), 0o600))
	k, err = Key(f)
	require.NoError(t, err)
	assert.Equal(t, "ipk_file", k, "the file wins over the environment")
	require.NoError(t, os.WriteFile(f, []byte("two keys\n"), 0o600))
	_, err = Key(f)
	assert.ErrorContains(t, err, "expected one API key (ipk_...) alone in the file")
}
