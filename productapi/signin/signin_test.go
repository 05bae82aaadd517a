package signin

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/productapi/clientconfig"
)

var dana = dex.User{Email: "dana@acme.example", Password: "pw-dana", Name: "Dana", Groups: []string{"acme-ml"}}

// startDex is a real Dex with the CLI's client: public (no secret), no registered redirect
// URI, so Dex lets it come back to any loopback port and to its device callback; sessions on,
// so that its refresh works (dex.Options.Sessions).
func startDex(t *testing.T, ttl time.Duration) *dex.Dex {
	return dex.Start(t, dex.Options{Clients: []dex.Client{{ID: "inferplane", Public: true}}, Users: []dex.User{dana}, IDTokenTTL: ttl, Sessions: true})
}

// The authorization-code flow with PKCE through a loopback redirect on 127.0.0.1, with Dex's
// own login form filled in as a person would: the ID token verifies and names the user, a
// refresh token comes with it, and the refresh gives a new ID token.
func TestAuthCodeWithLoopbackAndRefresh(t *testing.T) {
	d := startDex(t, 0)
	ctx := context.Background()
	p, err := Discover(ctx, d.Issuer, "inferplane", nil)
	require.NoError(t, err)

	var opened string
	tokens, err := p.AuthCode(ctx, LoopbackOptions{Open: func(ctx context.Context, u string) error {
		opened = u
		go func() {
			status, err := d.Browse(ctx, u, dex.PasswordLogin{Email: dana.Email, Password: dana.Password})
			assert.NoError(t, err, d.Log(20))
			assert.Equal(t, http.StatusOK, status, "the CLI's page says signed in")
		}()
		return nil
	}})
	require.NoError(t, err, d.Log(20))
	assert.Contains(t, opened, "code_challenge_method=S256", "PKCE")
	assert.Contains(t, opened, "redirect_uri=http%3A%2F%2F127.0.0.1%3A", "a loopback redirect on 127.0.0.1")
	assert.Contains(t, opened, "offline_access")
	c, err := clientconfig.ParseClaims(tokens.IDToken)
	require.NoError(t, err)
	assert.Equal(t, dana.Email, c.Email)
	assert.Equal(t, dana.Email, Who(tokens))
	assert.NotEmpty(t, tokens.RefreshToken)
	assert.WithinDuration(t, c.Expiry, tokens.Expiry, time.Second)

	again, err := p.Refresh(ctx, tokens.RefreshToken)
	require.NoError(t, err, d.Log(20))
	assert.NotEqual(t, tokens.IDToken, again.IDToken)
	assert.Equal(t, dana.Email, Who(again))

	_, err = p.Refresh(ctx, "not-a-refresh-token")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the identity provider refused: invalid_request", "the provider's own words")
}

// A wrong password leaves the browser on Dex's form: the CLI gets no code and stops at its
// timeout, saying so.
func TestAuthCodeTimesOut(t *testing.T) {
	d := startDex(t, 0)
	ctx := context.Background()
	p, err := Discover(ctx, d.Issuer, "inferplane", nil)
	require.NoError(t, err)
	_, err = p.AuthCode(ctx, LoopbackOptions{Timeout: 2 * time.Second, Open: func(ctx context.Context, u string) error {
		_, berr := d.Browse(ctx, u, dex.PasswordLogin{Email: dana.Email, Password: "wrong"})
		assert.NoError(t, berr)
		return nil
	}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no answer from the browser within 2s")
}

// The device flow: Dex (at our pin) lists its device endpoint; the person enters the user
// code at Dex's verification page and signs in; the poll gets the tokens. Dex serves at the
// root of its address here: under /dex, Dex at our pin refuses its own device callback for a
// public client without registered redirect URIs (TestDeviceFlowUnderAPathNeedsTheCallback).
func TestDeviceFlow(t *testing.T) {
	d := dex.Start(t, dex.Options{Clients: []dex.Client{{ID: "inferplane", Public: true}}, Users: []dex.User{dana}, RootIssuer: true, Sessions: true})
	ctx := context.Background()
	p, err := Discover(ctx, d.Issuer, "inferplane", nil)
	require.NoError(t, err)
	tokens, err := p.Device(ctx, func(uri, complete, code string) error {
		assert.True(t, strings.HasPrefix(uri, d.Issuer+"/device"), uri)
		assert.Contains(t, complete, code)
		go func() {
			assert.NoError(t, d.ApproveDevice(ctx, code, dex.PasswordLogin{Email: dana.Email, Password: dana.Password}), d.Log(20))
		}()
		return nil
	})
	require.NoError(t, err, d.Log(20))
	assert.Equal(t, dana.Email, Who(tokens))
}

// A token of another audience is not kept: the CLI verifies what the provider gave.
func TestTokensVerified(t *testing.T) {
	d := dex.Start(t, dex.Options{Clients: []dex.Client{{ID: "inferplane", Public: true}, {ID: "other", Secret: "s"}}, Users: []dex.User{dana}})
	ctx := context.Background()
	other, err := d.PasswordGrant(ctx, d.Client("other"), dana.Email, dana.Password)
	require.NoError(t, err)
	p, err := Discover(ctx, d.Issuer, "inferplane", nil)
	require.NoError(t, err)
	_, err = p.Refresh(ctx, other.RefreshToken)
	require.Error(t, err, "another client's refresh token")
}

// Dex at our pin, issuer under /dex: the device flow of a public client works once the client
// registers Dex's own callback, /dex/device/callback, among its redirect URIs (and then the
// loopback redirect must be registered too, with a fixed port: login --port).
func TestDeviceFlowUnderAPathNeedsTheCallback(t *testing.T) {
	const port = 38123
	d := dex.Start(t, dex.Options{Users: []dex.User{dana}, Clients: []dex.Client{{ID: "inferplane", Public: true,
		RedirectURIs: []string{"/dex/device/callback", "http://127.0.0.1:38123/callback"}}}})
	ctx := context.Background()
	p, err := Discover(ctx, d.Issuer, "inferplane", nil)
	require.NoError(t, err)
	tokens, err := p.Device(ctx, func(_, _, code string) error {
		go func() {
			assert.NoError(t, d.ApproveDevice(ctx, code, dex.PasswordLogin{Email: dana.Email, Password: dana.Password}), d.Log(20))
		}()
		return nil
	})
	require.NoError(t, err, d.Log(20))
	assert.Equal(t, dana.Email, Who(tokens))
	tokens, err = p.AuthCode(ctx, LoopbackOptions{Port: port, Open: func(ctx context.Context, u string) error {
		go func() {
			_, err := d.Browse(ctx, u, dex.PasswordLogin{Email: dana.Email, Password: dana.Password})
			assert.NoError(t, err)
		}()
		return nil
	}})
	require.NoError(t, err, d.Log(20))
	assert.Equal(t, dana.Email, Who(tokens))
}
