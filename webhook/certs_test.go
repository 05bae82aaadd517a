package webhook_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/webhook"
)

func TestSelfSigned(t *testing.T) {
	now := time.Now()
	hosts := webhook.Hosts("inferplane-system", "inferplane-webhook")
	b, err := webhook.SelfSigned(append(hosts, "127.0.0.1"), now, 24*time.Hour)
	require.NoError(t, err)
	notAfter, err := b.Check(append(hosts, "127.0.0.1"))
	require.NoError(t, err)
	assert.WithinDuration(t, now.Add(24*time.Hour), notAfter, time.Second)

	_, err = b.Check([]string{"other.example.com"})
	require.ErrorContains(t, err, "certificate for other.example.com")

	other, err := webhook.SelfSigned(hosts, now, time.Hour)
	require.NoError(t, err)
	mixed := webhook.Bundle{CA: other.CA, Cert: b.Cert, Key: b.Key}
	_, err = mixed.Check(hosts)
	require.Error(t, err, "a certificate its CA did not sign")
	mixed = webhook.Bundle{CA: b.CA, Cert: b.Cert, Key: other.Key}
	_, err = mixed.Check(hosts)
	require.ErrorContains(t, err, "certificate and key")

	_, err = webhook.SelfSigned(nil, now, time.Hour)
	require.Error(t, err)

	dir := filepath.Join(t.TempDir(), "certs")
	require.NoError(t, b.WriteDir(dir))
	for name, mode := range map[string]os.FileMode{webhook.CertFile: 0o644, webhook.KeyFile: 0o600, webhook.CAFile: 0o644} {
		info, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, mode, info.Mode().Perm(), name)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 3, "no temporary files left behind")
}
