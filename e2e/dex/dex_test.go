package dex

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// claimsOf decodes a JWT's payload without checking it: the harness's own test only looks at
// what Dex put in (the access package's tests verify tokens).
func claimsOf(t *testing.T, jwt string) map[string]any {
	t.Helper()
	parts := strings.Split(jwt, ".")
	require.Len(t, parts, 3)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(payload, &c))
	return c
}

func jwks(t *testing.T, d *Dex) []string {
	t.Helper()
	resp, err := http.Get(d.Issuer + "/keys")
	require.NoError(t, err)
	defer resp.Body.Close()
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&set))
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	return kids
}

func TestDexTokens(t *testing.T) {
	ctx := context.Background()
	d := Start(t, Options{
		Clients: []Client{
			{ID: "inferplane", Secret: "s3cret", RedirectURIs: []string{"http://127.0.0.1:1/callback"}},
			{ID: "cli", Public: true, RedirectURIs: []string{"http://127.0.0.1:1/cli"}},
		},
		Users: []User{{Email: "dana@acme.example", Password: "pw-dana", Name: "Dana", Groups: []string{"acme-ml", "acme-all"}}},
	})
	assert.True(t, strings.HasPrefix(d.Issuer, "http://127.0.0.1:"), d.Issuer)

	t.Run("password grant: a static user's groups are in the token", func(t *testing.T) {
		tok, err := d.PasswordGrant(ctx, d.Client("inferplane"), "dana@acme.example", "pw-dana")
		require.NoError(t, err)
		c := claimsOf(t, tok.IDToken)
		assert.Equal(t, d.Issuer, c["iss"])
		assert.Equal(t, "inferplane", c["aud"])
		assert.Equal(t, "dana@acme.example", c["email"])
		assert.Equal(t, true, c["email_verified"])
		assert.Equal(t, []any{"acme-ml", "acme-all"}, c["groups"])
	})
	t.Run("password grant: a wrong password is refused", func(t *testing.T) {
		_, err := d.PasswordGrant(ctx, d.Client("inferplane"), "dana@acme.example", "nope")
		require.Error(t, err)
	})
	t.Run("auth code with PKCE through the login form", func(t *testing.T) {
		tok, err := d.AuthCodePassword(ctx, d.Client("cli"), PasswordLogin{Email: "dana@acme.example", Password: "pw-dana"})
		require.NoError(t, err, d.Log(20))
		c := claimsOf(t, tok.IDToken)
		assert.Equal(t, "cli", c["aud"])
		assert.Equal(t, []any{"acme-ml", "acme-all"}, c["groups"])
	})
	t.Run("auth code through the authproxy connector: any user and groups", func(t *testing.T) {
		tok, err := d.AuthCodeProxy(ctx, d.Client("inferplane"), ProxyLogin{User: "ops", Email: "ops@platform.example", Groups: []string{"platform-admins"}})
		require.NoError(t, err, d.Log(20))
		c := claimsOf(t, tok.IDToken)
		assert.Equal(t, "ops@platform.example", c["email"])
		assert.Equal(t, []any{"platform-admins"}, c["groups"])
	})
	t.Run("restart: new signing keys", func(t *testing.T) {
		before := jwks(t, d)
		require.NotEmpty(t, before)
		d.Restart(t)
		after := jwks(t, d)
		require.NotEmpty(t, after)
		assert.NotEqual(t, before, after)
	})
}
