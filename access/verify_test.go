package access

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/dex"
)

// Every test here signs in against a real Dex (e2e/dex) on 127.0.0.1.

var users = []dex.User{
	{Email: "dana@acme.example", Password: "pw-dana", Name: "Dana", Groups: []string{"acme-ml", "acme-all"}},
	{Email: "vera@acme.example", Password: "pw-vera", Name: "Vera", Groups: []string{"acme-all"}},
	{Email: "ops@acme.example", Password: "pw-ops", Name: "Ops"},
	{Email: "eve@acme.example", Password: "pw-eve", Name: "Eve", EmailUnverified: true},
	{Email: "gina@globex.example", Password: "pw-gina", Name: "Gina", Groups: []string{"globex-admins"}},
}

func startDex(t *testing.T) *dex.Dex {
	return dex.Start(t, dex.Options{
		Clients: []dex.Client{
			{ID: "inferplane", Secret: "api-secret", RedirectURIs: []string{"http://127.0.0.1:1/callback"}},
			{ID: "another-app", Secret: "other-secret"},
		},
		Users: users,
	})
}

func verifierFor(t *testing.T, d *dex.Dex, cfg VerifierConfig) *Verifier {
	t.Helper()
	cfg.Issuer, cfg.ClientID = d.Issuer, "inferplane"
	v, err := NewVerifier(cfg)
	require.NoError(t, err)
	return v
}

func signIn(t *testing.T, d *dex.Dex, client, email string) string {
	t.Helper()
	for _, u := range users {
		if u.Email == email {
			tok, err := d.PasswordGrant(context.Background(), d.Client(client), email, u.Password)
			require.NoError(t, err, d.Log(20))
			return tok.IDToken
		}
	}
	t.Fatalf("no user %s", email)
	return ""
}

func kindOf(err error) string {
	var te *TokenError
	if errors.As(err, &te) {
		return te.Kind
	}
	return ""
}

// tamper replaces part i (0 header, 1 payload, 2 signature) of a JWT.
func tamper(jwt string, i int, part string) string {
	parts := strings.Split(jwt, ".")
	parts[i] = part
	return strings.Join(parts, ".")
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestVerifyAgainstDex(t *testing.T) {
	ctx := context.Background()
	d := startDex(t)
	other := startDex(t) // another issuer, with a client of the same id
	v := verifierFor(t, d, VerifierConfig{})
	good := signIn(t, d, "inferplane", "dana@acme.example")

	t.Run("a good token names the caller and its groups", func(t *testing.T) {
		id, err := v.Verify(ctx, good)
		require.NoError(t, err)
		assert.Equal(t, d.Issuer, id.Issuer)
		assert.NotEmpty(t, id.Subject)
		assert.Equal(t, "dana@acme.example", id.Email)
		assert.True(t, id.EmailVerified)
		assert.Equal(t, "Dana", id.Name)
		assert.Equal(t, []string{"acme-ml", "acme-all"}, id.Groups)
	})
	t.Run("another groups claim: here a string claim, read as one group", func(t *testing.T) {
		id, err := verifierFor(t, d, VerifierConfig{GroupsClaim: "email"}).Verify(ctx, good)
		require.NoError(t, err)
		assert.Equal(t, []string{"dana@acme.example"}, id.Groups)
	})
	t.Run("no token", func(t *testing.T) {
		_, err := v.Verify(ctx, "")
		require.ErrorIs(t, err, ErrNoToken)
		assert.Equal(t, `Bearer realm="inferplane"`, Challenge("inferplane", err))
	})
	t.Run("expired", func(t *testing.T) {
		later := verifierFor(t, d, VerifierConfig{Now: func() time.Time { return time.Now().Add(25 * time.Hour) }})
		_, err := later.Verify(ctx, good)
		assert.Equal(t, Expired, kindOf(err), "%v", err)
		assert.Equal(t, `Bearer realm="inferplane", error="invalid_token", error_description="token expired"`, Challenge("inferplane", err))
	})
	t.Run("wrong audience: issued for another client of the same provider", func(t *testing.T) {
		_, err := v.Verify(ctx, signIn(t, d, "another-app", "dana@acme.example"))
		assert.Equal(t, WrongAudience, kindOf(err), "%v", err)
	})
	t.Run("another issuer", func(t *testing.T) {
		_, err := v.Verify(ctx, signIn(t, other, "inferplane", "dana@acme.example"))
		assert.Equal(t, WrongIssuer, kindOf(err), "%v", err)
	})
	t.Run("another issuer's token relabelled with our issuer: its signature fails", func(t *testing.T) {
		foreign := signIn(t, other, "inferplane", "dana@acme.example")
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(foreign, ".")[1])
		require.NoError(t, err)
		relabelled := strings.Replace(string(payload), other.Issuer, d.Issuer, 1)
		_, err = v.Verify(ctx, tamper(foreign, 1, b64(relabelled)))
		assert.Equal(t, BadSignature, kindOf(err), "%v", err)
	})
	t.Run("alg none", func(t *testing.T) {
		payload := strings.Split(good, ".")[1]
		unsigned := b64(`{"alg":"none","typ":"JWT"}`) + "." + payload + "."
		_, err := v.Verify(ctx, unsigned)
		assert.Equal(t, Malformed, kindOf(err), "%v", err)
	})
	t.Run("tampered signature", func(t *testing.T) {
		sig := []byte(strings.Split(good, ".")[2])
		// Another base64url letter in the middle: still decodes, to other bytes.
		if sig[10] == 'A' {
			sig[10] = 'B'
		} else {
			sig[10] = 'A'
		}
		_, err := v.Verify(ctx, tamper(good, 2, string(sig)))
		assert.Equal(t, BadSignature, kindOf(err), "%v", err)
	})
	t.Run("tampered claims: a group added to a real token", func(t *testing.T) {
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(good, ".")[1])
		require.NoError(t, err)
		forged := strings.Replace(string(payload), `"acme-ml"`, `"platform-admins"`, 1)
		require.NotEqual(t, string(payload), forged)
		_, err = v.Verify(ctx, tamper(good, 1, b64(forged)))
		assert.Equal(t, BadSignature, kindOf(err), "%v", err)
	})
	t.Run("garbage", func(t *testing.T) {
		_, err := v.Verify(ctx, "not-a-jwt")
		assert.Equal(t, Malformed, kindOf(err), "%v", err)
	})
}

// Dex restarted with memory storage signs with a new key: the verifier, which holds the old
// key set, fetches the new one for the new key id and accepts the new token; the old token's
// key is gone and it is refused.
func TestVerifyKeyRotation(t *testing.T) {
	ctx := context.Background()
	d := startDex(t)
	v := verifierFor(t, d, VerifierConfig{})
	before := signIn(t, d, "inferplane", "dana@acme.example")
	_, err := v.Verify(ctx, before)
	require.NoError(t, err)

	d.Restart(t)
	after := signIn(t, d, "inferplane", "dana@acme.example")
	_, err = v.Verify(ctx, after)
	require.NoError(t, err, "a token signed with the new key")
	_, err = v.Verify(ctx, before)
	assert.Equal(t, BadSignature, kindOf(err), "%v", err)
}

// The API server starts while its provider is down: requests get ErrProviderUnavailable (a
// 503), and once the provider is up, tokens verify with no restart.
func TestVerifyProviderDownThenUp(t *testing.T) {
	ctx := context.Background()
	d := startDex(t)
	tok := signIn(t, d, "inferplane", "dana@acme.example")
	d.Stop()
	v := verifierFor(t, d, VerifierConfig{RetryDiscovery: time.Millisecond})
	_, err := v.Verify(ctx, tok)
	require.ErrorIs(t, err, ErrProviderUnavailable)
	assert.Empty(t, kindOf(err), "not the caller's fault: no 401")
	assert.Error(t, v.Ready(ctx))

	d.Restart(t)
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, v.Ready(ctx))
	_, err = v.Verify(ctx, signIn(t, d, "inferplane", "dana@acme.example"))
	require.NoError(t, err)
}

// Tokens from a real Dex, decided against tenants shaped like the bundled examples.
func TestRolesFromDexTokens(t *testing.T) {
	ctx := context.Background()
	d := startDex(t)
	v := verifierFor(t, d, VerifierConfig{})
	tenants := map[string]*v1alpha1.Tenant{"acme": acme, "globex": globex}
	identity := func(email string) Identity {
		id, err := v.Verify(ctx, signIn(t, d, "inferplane", email))
		require.NoError(t, err)
		return id
	}
	proxied, err := d.AuthCodeProxy(ctx, d.Client("inferplane"), dex.ProxyLogin{User: "root", Email: "root@platform.example", Groups: []string{"platform-admins"}})
	require.NoError(t, err)
	operator, err := v.Verify(ctx, proxied.IDToken)
	require.NoError(t, err)

	cases := []struct {
		who     Identity
		tenant  string
		action  Action
		allowed bool
	}{
		{identity("dana@acme.example"), "acme", WriteJobs, true},     // group acme-ml: developer
		{identity("dana@acme.example"), "acme", ScaleJobs, false},    // ... not admin
		{identity("dana@acme.example"), "globex", Read, false},       // a member of acme reading globex
		{identity("vera@acme.example"), "acme", Read, true},          // group acme-all: viewer
		{identity("vera@acme.example"), "acme", WriteJobs, false},    // a viewer creating a job
		{identity("ops@acme.example"), "acme", RequestQuota, true},   // user entry: admin
		{identity("eve@acme.example"), "acme", Read, false},          // email not verified
		{identity("gina@globex.example"), "globex", ScaleJobs, true}, // group globex-admins
		{identity("gina@globex.example"), "acme", Read, false},       // ... and nothing in acme
		{operator, "globex", ScaleJobs, true},                        // operator group, through the auth-code flow
		{operator, "umbrella", Read, true},                           // ... even a tenant that does not exist
		{identity("dana@acme.example"), "umbrella", Read, false},     // which nobody else can tell
	}
	for _, tc := range cases {
		d := policy.Decide(tc.who, tc.tenant, tenants[tc.tenant], tc.action)
		assert.Equal(t, tc.allowed, d.Allowed, "%s %s %s: %s", tc.who.Email, tc.action, tc.tenant, d.Reason)
	}
}

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc ": "abc", "Basic abc": "", "": "", "Bearer": "",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		assert.Equal(t, want, BearerToken(r), header)
	}
}

func TestNewVerifierConfig(t *testing.T) {
	_, err := NewVerifier(VerifierConfig{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--oidc-issuer")
	assert.Contains(t, err.Error(), "--oidc-client-id")
	_, err = NewVerifier(VerifierConfig{Issuer: "dex.example", ClientID: "x"})
	assert.ErrorContains(t, err, "not an http(s) URL")
}

// Dex rotating its signing key while running (every second, looked at every 30 s): a token
// signed with the new key verifies (the verifier fetches the keys for the new key id), and one
// signed before still does (Dex keeps the old key for verification until its tokens expire).
func TestVerifyDexRotatesItsKey(t *testing.T) {
	ctx := context.Background()
	d := dex.Start(t, dex.Options{
		Clients:     []dex.Client{{ID: "inferplane", Secret: "api-secret"}},
		Users:       users,
		KeyRotation: time.Second,
	})
	v := verifierFor(t, d, VerifierConfig{})
	before := signIn(t, d, "inferplane", "dana@acme.example")
	_, err := v.Verify(ctx, before)
	require.NoError(t, err)
	kid := func(jwt string) string {
		header, err := base64.RawURLEncoding.DecodeString(strings.Split(jwt, ".")[0])
		require.NoError(t, err)
		var h struct {
			Kid string `json:"kid"`
		}
		require.NoError(t, json.Unmarshal(header, &h))
		return h.Kid
	}
	var after string
	require.Eventually(t, func() bool {
		after = signIn(t, d, "inferplane", "dana@acme.example")
		return kid(after) != kid(before)
	}, 75*time.Second, time.Second, "Dex did not rotate its key")
	_, err = v.Verify(ctx, after)
	require.NoError(t, err, "a token signed with the new key")
	_, err = v.Verify(ctx, before)
	require.NoError(t, err, "a token signed with the previous key, which Dex still publishes")
}
