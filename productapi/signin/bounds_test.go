package signin

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
)

// TestLoopbackHoldsAgainstHostileClients attacks the sign-in's redirect listener on 127.0.0.1
// while the person signs in at the real Dex, with its bounds set short through
// LoopbackOptions: every attack is answered or cut, a stray request is answered meanwhile, and
// the sign-in completes afterwards.
func TestLoopbackHoldsAgainstHostileClients(t *testing.T) {
	d := startDex(t, 0)
	ctx := context.Background()
	p, err := Discover(ctx, d.Issuer, "inferplane", nil)
	require.NoError(t, err)
	short := serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		IdleTimeout: 2 * time.Second, MaxHeaderBytes: 16 << 10, Conns: serve.Conns{Max: 50}}
	tokens, err := p.AuthCode(ctx, LoopbackOptions{Bounds: short, Open: func(ctx context.Context, u string) error {
		auth, err := url.Parse(u)
		require.NoError(t, err)
		redirect, err := url.Parse(auth.Query().Get("redirect_uri"))
		require.NoError(t, err)
		// A stale tab's request: answered, and the sign-in goes on waiting.
		stray := servetest.Request(http.MethodGet, redirect.String()+"?state=stale", nil, http.StatusBadRequest)
		// Every client is 127.0.0.1: the idle connections take the listener's 50 places, and the
		// others wait in the kernel's queue until the header timeout frees them.
		servetest.Run(t, servetest.Target{Addr: redirect.Host, Method: http.MethodPost, Path: redirect.Path, Normal: stray},
			servetest.Options{}, []servetest.Case{
				{Name: "slow header", Attack: servetest.SlowHeader(200 * time.Millisecond), Status: []int{400, 408}, Cut: true},
				{Name: "slow body", Attack: servetest.SlowBody(200 * time.Millisecond), Status: []int{400}, Cut: true},
				{Name: "500 idle connections", Attack: servetest.IdleConns(500), Cut: true},
				{Name: "1 MiB header", Attack: servetest.BigHeader(1 << 20), Status: []int{431}, Cut: true},
				{Name: "10 MB bodies, four at once", Attack: servetest.BigBody(10_000_000, 4), Status: []int{400}, Cut: true},
			})
		go func() {
			_, err := d.Browse(ctx, u, dex.PasswordLogin{Email: dana.Email, Password: dana.Password})
			assert.NoError(t, err, d.Log(20))
		}()
		return nil
	}})
	require.NoError(t, err, d.Log(20))
	assert.Equal(t, dana.Email, Who(tokens), "the sign-in completes after the attacks")
}
