package resources

import (
	"slices"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/xds/internal/tlstest"
)

func cert(ca *tlstest.CA, name string, notAfter time.Time, hosts ...string) Certificate {
	c, k := ca.Leaf(hosts, time.Now().Add(-time.Hour), notAfter)
	return Certificate{Name: name, Hosts: hosts, NotAfter: notAfter, CertPEM: c, KeyPEM: k}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          int
	}{
		{"chat.acme.example.com", "chat.acme.example.com", 2},
		{"CHAT.acme.example.com", "chat.acme.example.com", 2},
		{"*.acme.example.com", "chat.acme.example.com", 1},
		{"*.example.com", "chat.acme.example.com", 0}, // one label only (RFC 6125)
		{"*.acme.example.com", "acme.example.com", 0},
		{"*", "chat", 0},
		{"chat.*.example.com", "chat.acme.example.com", 0},
	} {
		assert.Equal(t, tc.want, covers(tc.pattern, tc.host), "%s vs %s", tc.pattern, tc.host)
	}
}

// TLS at the edge: each endpoint's host is served with the certificate that covers it best,
// over SDS; the set passes go-control-plane's validation; plain HTTP to an endpoint on TLS is
// redirected; an endpoint no certificate covers stays on plain HTTP, with the reason.
func TestBuildTLS(t *testing.T) {
	ca := tlstest.NewCA()
	later := time.Now().Add(90 * 24 * time.Hour)
	certs := []Certificate{
		cert(ca, "inferplane-system/acme-wildcard", later, "*.acme.example.com"),
		cert(ca, "inferplane-system/chat-exact", later.Add(-time.Hour), "chat.acme.example.com"),
		cert(ca, "inferplane-system/acme-wildcard-old", later.Add(-48*time.Hour), "*.acme.example.com"),
		cert(ca, "inferplane-system/domain-wildcard", later, "*.example.com"),
	}
	eps := []Endpoint{vllm("acme", "chat", rep("r0", "10.0.0.1", 8000)), vllm("acme", "embed"), vllm("globex", "llama")}
	cfg := DefaultConfig("example.com")
	set, report, err := BuildTLS(cfg, eps, certs, nil)
	require.NoError(t, err)
	require.NoError(t, set.Validate(), "every resource passes ValidateAll, the SDS names resolve")

	assert.Equal(t, gatewayv1.TLSChoice{Certificate: "inferplane-system/chat-exact"}, report["acme/chat"], "an exact name wins over a wildcard")
	assert.Equal(t, gatewayv1.TLSChoice{Certificate: "inferplane-system/acme-wildcard"}, report["acme/embed"], "the wildcard that expires last")
	assert.Contains(t, report["globex/llama"].Reason, "no valid certificate covers llama.globex.example.com")

	require.Len(t, set.Listeners, 2)
	tls := set.Listeners[1]
	assert.Equal(t, TLSListenerName, tls.Name)
	assert.EqualValues(t, 8443, tls.GetAddress().GetSocketAddress().GetPortValue())
	var chains [][]string
	for _, fc := range tls.FilterChains {
		chains = append(chains, fc.GetFilterChainMatch().GetServerNames())
		var ctx tlsv3.DownstreamTlsContext
		require.NoError(t, fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx))
		assert.Equal(t, []string{"h2", "http/1.1"}, ctx.GetCommonTlsContext().GetAlpnProtocols())
		assert.NotNil(t, ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetSdsConfig().GetAds(), "the certificate comes over ADS")
	}
	assert.Equal(t, [][]string{{"embed.acme.example.com"}, {"chat.acme.example.com"}}, chains, "one chain per certificate in use, exact names, no overlap")
	var names []string
	for _, s := range set.Secrets {
		names = append(names, s.Name)
		assert.NotEmpty(t, s.GetTlsCertificate().GetPrivateKey().GetInlineBytes())
	}
	assert.Equal(t, []string{"inferplane-system/acme-wildcard", "inferplane-system/chat-exact"}, names, "unused certificates are not sent")

	assert.Equal(t, routev3.VirtualHost_ALL, vhostByName(set, "acme/chat").RequireTls, "plain HTTP is redirected to HTTPS")
	assert.Equal(t, routev3.VirtualHost_NONE, vhostByName(set, "globex/llama").RequireTls, "an endpoint without a certificate stays on plain HTTP")

	cfg.KeepPlainHTTP = true
	set, _, err = BuildTLS(cfg, eps, certs, nil)
	require.NoError(t, err)
	assert.Equal(t, routev3.VirtualHost_NONE, vhostByName(set, "acme/chat").RequireTls, "redirect turned off")

	// Without certificates: no TLS listener (Envoy refuses a listener without filter chains).
	set, report, err = BuildTLS(DefaultConfig("example.com"), eps, nil, nil)
	require.NoError(t, err)
	assert.Len(t, set.Listeners, 1)
	assert.Empty(t, set.Secrets)
	assert.Len(t, report, 3)

	// The same input in another order is the same output.
	a, _, _ := BuildTLS(DefaultConfig("example.com"), eps, certs, nil)
	rev := slices.Clone(eps)
	slices.Reverse(rev)
	b, _, _ := BuildTLS(DefaultConfig("example.com"), rev, certs, nil)
	assert.Equal(t, names, secretNames(b))
	assert.Equal(t, secretNames(a), secretNames(b))
}

func secretNames(s *Set) []string {
	var out []string
	for _, x := range s.Secrets {
		out = append(out, x.Name)
	}
	return out
}

// A listener naming a secret the set lacks fails the set's check before anything is published.
func TestSetValidateSecretRefs(t *testing.T) {
	ca := tlstest.NewCA()
	set, _, err := BuildTLS(DefaultConfig("example.com"), []Endpoint{vllm("acme", "chat")},
		[]Certificate{cert(ca, "ns/c", time.Now().Add(time.Hour), "*.acme.example.com")}, nil)
	require.NoError(t, err)
	set.Secrets = nil
	assert.ErrorContains(t, set.Validate(), `listener "inferplane_https" names secret "ns/c", which the set lacks`)
}
