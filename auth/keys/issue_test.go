package keys

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/internal/fielderr"
)

// TestIssue: the key is returned once and the store keeps only its hash; a request that is
// wrong on its own, or names what does not exist, is refused with field errors.
func TestIssue(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h, err := NewHasher([]byte(strings.Repeat("s", 40)))
	require.NoError(t, err)
	store := NewFileStore(filepath.Join(t.TempDir(), "keys.db"))
	key, rec, err := Issue(context.Background(), store, h, Request{Tenant: "acme", Endpoint: "chat", Name: "ci"}, now)
	require.NoError(t, err)
	id, err := ParseID(key)
	require.NoError(t, err)
	assert.Equal(t, id, rec.ID)
	stored, err := store.Get(context.Background(), rec.ID)
	require.NoError(t, err)
	assert.Equal(t, h.Hex(key), stored.Hash)
	assert.NotContains(t, stored.Hash, key)
	assert.Equal(t, now, stored.CreatedAt)

	_, _, err = Issue(context.Background(), store, h, Request{Tenant: "Not_A_Tenant", ExpiresAt: now.Add(-time.Hour)}, now)
	assert.ErrorContains(t, err, "tenant: Invalid value")
	assert.ErrorContains(t, err, "expiresAt: Invalid value")

	known := map[string][]string{"acme": {"chat", "embed"}, "globex": {"kimi"}}
	assert.Equal(t, `tenant is "acmee": no such tenant in the inputs (known: acme, globex); did you mean acme?`,
		fielderr.Join(Request{Tenant: "acmee"}.CheckScope(known, "the inputs")))
	assert.Equal(t, `endpoint is "chta": tenant acme has no such job in the inputs (known: chat, embed); did you mean chat?`,
		fielderr.Join(Request{Tenant: "acme", Endpoint: "chta"}.CheckScope(known, "the inputs")))
	assert.Empty(t, Request{Tenant: "acme", Endpoint: "chat"}.CheckScope(known, "the inputs"))
}

func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"": {}, "30d": now.AddDate(0, 0, 30), "720h": now.Add(720 * time.Hour),
		"2027-01-31": time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC), "2027-01-31T12:00:00Z": time.Date(2027, 1, 31, 12, 0, 0, 0, time.UTC),
	} {
		got, err := ParseExpiry(in, now)
		require.NoError(t, err, in)
		assert.True(t, want.Equal(got), "%s: %s", in, got)
	}
	for _, bad := range []string{"yesterday", "xd", "2001-01-01", "-1h"} {
		_, err := ParseExpiry(bad, now)
		assert.Error(t, err, bad)
	}
}
