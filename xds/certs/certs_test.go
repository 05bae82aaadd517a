package certs

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inferplane/inferplane/xds/internal/tlstest"
)

func tlsSecret(name string, cert, key []byte) corev1.Secret {
	return corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "inferplane-system", Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}}
}

func TestRead(t *testing.T) {
	ca := tlstest.NewCA()
	now := time.Now()
	good, goodKey := ca.Leaf([]string{"*.acme.example.com", "acme.example.com"}, now.Add(-time.Hour), now.Add(90*24*time.Hour))
	_, otherKey := ca.Leaf([]string{"x.example.com"}, now.Add(-time.Hour), now.Add(time.Hour))
	expired, expiredKey := ca.Leaf([]string{"old.example.com"}, now.Add(-48*time.Hour), now.Add(-time.Hour))
	future, futureKey := ca.Leaf([]string{"new.example.com"}, now.Add(time.Hour), now.Add(48*time.Hour))
	ed, edKey := ca.LeafEd25519([]string{"ed.example.com"})
	opaque := tlsSecret("opaque", good, goodKey)
	opaque.Type = corev1.SecretTypeOpaque

	u := Read([]corev1.Secret{
		tlsSecret("acme-wildcard", good, goodKey),
		tlsSecret("wrong-key", good, otherKey),
		tlsSecret("expired", expired, expiredKey),
		tlsSecret("future", future, futureKey),
		tlsSecret("ed25519", ed, edKey),
		tlsSecret("no-key", good, nil),
		tlsSecret("garbage", []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), goodKey),
		opaque,
	}, now)
	require.Len(t, u.Certificates, 1)
	c := u.Certificates[0]
	assert.Equal(t, "inferplane-system/acme-wildcard", c.Name)
	assert.Equal(t, []string{"*.acme.example.com", "acme.example.com"}, c.Hosts)
	assert.Equal(t, goodKey, c.KeyPEM)

	var got []string
	for _, p := range u.Problems {
		got = append(got, p.String())
		for _, k := range [][]byte{goodKey, otherKey, expiredKey, edKey} {
			assert.NotContains(t, p.String(), strings.TrimSpace(string(k[30:60])), "a problem never shows a key")
		}
	}
	for _, want := range []string{
		"Secret/inferplane-system/wrong-key: not served: tls.crt and tls.key do not make a certificate and its key",
		"Secret/inferplane-system/expired: not served: expired at ",
		"Secret/inferplane-system/future: not served: not valid before ",
		"Secret/inferplane-system/ed25519: not served: Ed25519 key: Envoy serves RSA and ECDSA",
		"Secret/inferplane-system/no-key: not served: needs both tls.crt and tls.key",
		"Secret/inferplane-system/garbage: not served: tls.crt and tls.key do not make a certificate",
		`Secret/inferplane-system/opaque: not served: type "Opaque": expected kubernetes.io/tls`,
	} {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, want)
		}
		assert.True(t, found, "want %q in\n%s", want, strings.Join(got, "\n"))
	}
}
