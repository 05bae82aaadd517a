package clientconfig

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDirFollowsXDG(t *testing.T) {
	t.Setenv(EnvDir, "")
	t.Setenv("XDG_CONFIG_HOME", "/tmp/xdg-test")
	d, err := Dir()
	require.NoError(t, err)
	assert.Equal(t, "/tmp/xdg-test/inferplane", d)
	t.Setenv(EnvDir, "/tmp/elsewhere")
	d, err = Dir()
	require.NoError(t, err)
	assert.Equal(t, "/tmp/elsewhere", d)
}

func TestContexts(t *testing.T) {
	s := &Store{Dir: filepath.Join(t.TempDir(), "inferplane")}
	c, err := s.Load()
	require.NoError(t, err, "no file is an empty configuration")
	_, ok := c.Current()
	assert.False(t, ok)

	c.Set(Context{Name: "b", Server: "https://b.example"})
	c.Set(Context{Name: "a", Server: "https://a.example", Tenant: "acme"})
	c.Set(Context{Name: "b", Server: "https://b2.example"})
	c.CurrentContext = "b"
	require.NoError(t, s.Save(c))

	back, err := s.Load()
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, back.Names())
	cur, ok := back.Current()
	require.True(t, ok)
	assert.Equal(t, "https://b2.example", cur.Server, "Set replaces a context of the same name")
	assertPrivate(t, s.configFile(), s.Dir)

	assert.True(t, back.Delete("b"))
	assert.Empty(t, back.CurrentContext, "deleting the current context leaves none current")
	assert.False(t, back.Delete("b"))

	require.NoError(t, os.WriteFile(s.configFile(), []byte("contexts: [{name: a, sever: x}]\n"), 0o600))
	_, err = s.Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config.yaml", "a bad file is named")
	assert.Contains(t, err.Error(), "sever", "and the unknown field")
}

func TestNameFor(t *testing.T) {
	assert.Equal(t, "api.example.com", NameFor("https://api.example.com/"))
	assert.Equal(t, "127.0.0.1:8080", NameFor("http://127.0.0.1:8080"))
	assert.Equal(t, "127.0.0.1-8080", fileName("127.0.0.1:8080"))
	assert.Equal(t, "context", fileName(".."))
	assert.Equal(t, "-etc-passwd", fileName("/etc/passwd"), "a context's name never leaves the tokens folder")
}

func assertPrivate(t *testing.T, file, dir string) {
	t.Helper()
	fi, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), file)
	di, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm(), dir)
}

// jwt is an unsigned token with the claims the CLI reads (the API verifies signatures; the CLI
// only reads the expiry and who it names).
func jwt(exp time.Time, email string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"exp":%d,"sub":"s1","email":%q,"aud":"inferplane"}`, exp.Unix(), email))) + ".sig"
}

func TestParseClaims(t *testing.T) {
	exp := time.Unix(2000000000, 0)
	c, err := ParseClaims(jwt(exp, "dana@acme.example"))
	require.NoError(t, err)
	assert.Equal(t, exp, c.Expiry)
	assert.Equal(t, "dana@acme.example", c.Email)
	assert.Equal(t, []string{"inferplane"}, c.Audience)
	for _, bad := range []string{"", "a.b", "a.!!!.c", "a." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`)) + ".c"} {
		_, err := ParseClaims(bad)
		assert.Error(t, err, bad)
	}
}

// A token cache: a fresh token is used as it is; one expiring within Leeway is refreshed once,
// under a lock, by however many commands need it at once, and the rotated refresh token is
// kept; without a refresh token, or when the refresh fails, the error says how to sign in.
func TestTokenSourceRefreshes(t *testing.T) {
	s := &Store{Dir: filepath.Join(t.TempDir(), "inferplane")}
	ctxt := Context{Name: "127.0.0.1:8080", Server: "http://127.0.0.1:8080"}
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { return now }

	_, err := s.TokenSource(ctxt, nil, clock)(context.Background())
	var nsi *NotSignedInError
	require.ErrorAs(t, err, &nsi)
	assert.Contains(t, err.Error(), "inferplane login http://127.0.0.1:8080")

	fresh := jwt(now.Add(time.Hour), "dana@acme.example")
	require.NoError(t, s.SaveTokens(ctxt.Name, Tokens{IDToken: fresh, RefreshToken: "r1", Expiry: now.Add(time.Hour)}))
	assertPrivate(t, s.tokenFile(ctxt.Name), filepath.Dir(s.tokenFile(ctxt.Name)))
	var calls atomic.Int32
	refresh := func(_ context.Context, c Context, rt string) (Tokens, error) {
		calls.Add(1)
		if rt != "r1" {
			return Tokens{}, errors.New("refresh token reused: " + rt)
		}
		time.Sleep(20 * time.Millisecond)
		return Tokens{IDToken: jwt(now.Add(2*time.Hour), "dana@acme.example"), RefreshToken: "r2", Expiry: now.Add(2 * time.Hour)}, nil
	}
	ts := s.TokenSource(ctxt, refresh, clock)
	tok, err := ts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, fresh, tok)
	assert.Zero(t, calls.Load(), "a token valid beyond the leeway is not refreshed")

	now = now.Add(time.Hour - Leeway/2)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = ts(context.Background()) }()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int32(1), calls.Load(), "eight commands at once refresh once")
	got, err := s.Tokens(ctxt.Name)
	require.NoError(t, err)
	assert.Equal(t, "r2", got.RefreshToken, "the rotated refresh token is kept")

	now = now.Add(3 * time.Hour)
	_, err = ts(context.Background())
	require.ErrorAs(t, err, &nsi, "a refused refresh says to sign in again")
	assert.Contains(t, err.Error(), "refresh token reused: r2")

	require.NoError(t, s.SaveTokens(ctxt.Name, Tokens{IDToken: fresh, Expiry: now.Add(-time.Minute)}))
	_, err = ts(context.Background())
	require.ErrorAs(t, err, &nsi)
	assert.Contains(t, err.Error(), "no refresh token")

	require.NoError(t, s.DeleteTokens(ctxt.Name))
	require.NoError(t, s.DeleteTokens(ctxt.Name), "deleting nothing is no error")
	_, err = s.Tokens(ctxt.Name)
	assert.ErrorIs(t, err, ErrNotSignedIn)
}
