package console

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadSessionKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	hexKey := strings.Repeat("ab", 32)
	b64Key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	keys, err := LoadSessionKeys(write("ok", "# the new key first\n"+hexKey+"\n\n"+b64Key+"\n"))
	require.NoError(t, err)
	require.Len(t, keys, 2)
	assert.Equal(t, byte(0xab), keys[0][0])
	assert.Equal(t, byte(31), keys[1][31])

	for _, tc := range []struct{ name, body, want string }{
		{"empty", "# nothing\n", "holds no key"},
		{"short", hexKey + "\nabcd\n", "line 2: not a 32-byte key"},
		{"a password", "correct horse battery staple\n", "line 1"},
	} {
		_, err := LoadSessionKeys(write(tc.name, tc.body))
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err = LoadSessionKeys(filepath.Join(dir, "absent"))
	assert.ErrorContains(t, err, "session key file")
}

func TestSealer(t *testing.T) {
	k1, k2 := make([]byte, KeySize), make([]byte, KeySize)
	k2[0] = 1
	s1, err := newSealer([][]byte{k1})
	require.NoError(t, err)
	v, err := s1.seal(SessionCookie, session{V: sessionVersion, CSRF: "t", Refresh: "secret-refresh-token"})
	require.NoError(t, err)
	assert.NotContains(t, v, "secret-refresh-token", "the cookie is not encrypted")

	var got session
	require.NoError(t, s1.open(SessionCookie, v, &got))
	assert.Equal(t, "secret-refresh-token", got.Refresh)
	assert.ErrorIs(t, s1.open(loginCookie, v, &got), errBadCookie, "a session cookie opened as the login cookie")

	rotated, _ := newSealer([][]byte{k2, k1})
	require.NoError(t, rotated.open(SessionCookie, v, &got), "the old key no longer opens")
	other, _ := newSealer([][]byte{k2})
	assert.ErrorIs(t, other.open(SessionCookie, v, &got), errBadCookie)

	for _, bad := range []string{"", "!!!", v[:10], v[:len(v)-2] + "AA"} {
		assert.ErrorIs(t, s1.open(SessionCookie, bad, &got), errBadCookie, bad)
	}
}

func TestPlaceFieldProblems(t *testing.T) {
	f := createForm{Errors: map[string][]string{}}
	f.place(&Problem{Status: 422, Detail: "refused", Fields: []FieldProblem{
		{Field: "spec.gpuCount", Message: "gpu"},
		{Field: "body.replicas", Message: "replicas"},
		{Field: "metadata.name", Message: "name"},
		{Field: "spec.gpuQuota", File: "tenants/acme/tenant.yaml", Message: "quota"},
		{Message: "no field"},
	}})
	assert.Equal(t, []string{"gpu"}, f.Errors["gpuCount"])
	assert.Equal(t, []string{"replicas"}, f.Errors["replicas"])
	assert.Equal(t, []string{"name"}, f.Errors["name"])
	assert.Equal(t, []string{"refused", "quota", "no field"}, f.Other)
}
