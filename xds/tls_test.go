package xds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/xds/certs"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/internal/tlstest"
	"github.com/inferplane/inferplane/xds/resources"
)

// endpointsFile writes a file source with acme/chat and globex/llama on the given doubles.
func endpointsFile(t *testing.T, chat, llama *replicadouble.Double) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	data := fmt.Sprintf("endpoints:\n- {tenant: acme, job: chat, replicas: [{address: %s, port: %d}]}\n"+
		"- {tenant: globex, job: llama, replicas: [{address: %s, port: %d}]}\n", chat.Host(), chat.Port(), llama.Host(), llama.Port())
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	return path
}

func tlsSecret(name string, cert, key []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "inferplane-system", Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}}
}

func requireTLSOf(s adstest.State, vhost string) routev3.VirtualHost_TlsRequirementType {
	for _, rc := range s.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			if vh.GetName() == vhost {
				return vh.GetRequireTls()
			}
		}
	}
	return -1
}

// TestTLSCertificatesOverSDS: kubernetes.io/tls Secrets in the host cluster (as cert-manager
// writes them) become the TLS listener's certificates, sent over SDS on the ADS stream. A
// certificate change reaches the ADS client as a new secret without touching the listener; a
// certificate that does not match its key, or none at all, leaves the endpoint on plain HTTP
// with the reason reported.
func TestTLSCertificatesOverSDS(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, env.EnsureNamespace(ctx, "inferplane-system"))
	ca := tlstest.NewCA()
	now := time.Now()
	cert1, key1 := ca.Leaf([]string{"*.acme.example.test"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	globexCert, _ := ca.Leaf([]string{"*.globex.example.test"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	_, otherKey := ca.Leaf([]string{"x.example.test"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	acme := tlsSecret("acme-wildcard", cert1, key1)
	for _, s := range []*corev1.Secret{acme, tlsSecret("globex-wildcard", globexCert, otherKey)} {
		require.NoError(t, env.Client.Create(ctx, s))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	}

	ds := startDoubles(t, "127.0.0.21", "127.0.0.22")
	p := serve(t, Config{
		Source:       &discovery.File{Path: endpointsFile(t, ds[0], ds[1]), Interval: 50 * time.Millisecond},
		Certificates: &certs.Kube{Config: env.Config, Namespaces: []string{"inferplane-system"}, Debounce: 10 * time.Millisecond},
	})
	var agents []*adstest.Agent
	for _, delta := range []bool{true, false} {
		a := &adstest.Agent{NodeID: fmt.Sprintf("envoy-tls-%v", delta), Delta: delta, KeepRoutes: true}
		require.NoError(t, adstest.Start(ctx, p.conn, a))
		agents = append(agents, a)
	}
	const secret = "inferplane-system/acme-wildcard"
	waitAll(t, ctx, agents, func(s adstest.State) bool {
		return strings.Join(s.Listeners, ",") == "inferplane_http,inferplane_https" && string(s.Secrets[secret]) == string(cert1) &&
			requireTLSOf(s, "acme/chat") == routev3.VirtualHost_ALL && requireTLSOf(s, "globex/llama") == routev3.VirtualHost_NONE
	}, "acme on TLS over SDS, plain HTTP redirected; globex (key does not match) on plain HTTP")

	// The debug state and the metrics are recorded after the publish the clients just saw, so
	// under load they may trail it by a moment.
	var body, metrics string
	assert.Eventually(t, func() bool {
		_, body = get(t, "http://"+p.AdminAddr.String()+"/debug/endpoints")
		_, metrics = get(t, "http://"+p.AdminAddr.String()+"/metrics")
		return strings.Contains(body, `"certificate": "inferplane-system/acme-wildcard"`) &&
			strings.Contains(metrics, `inferplane_xds_tls_endpoints{state="tls"} 1`)
	}, 10*time.Second, 20*time.Millisecond, "debug state and metrics catch up with the published configuration")
	assert.Contains(t, body, `"certificate": "inferplane-system/acme-wildcard"`)
	assert.Contains(t, body, "Secret/inferplane-system/globex-wildcard: not served: tls.crt and tls.key do not make a certificate and its key")
	assert.Contains(t, body, "endpoint globex/llama: served on plain HTTP only: no valid certificate covers llama.globex.example.test")
	assert.NotContains(t, body, "PRIVATE KEY", "keys never leave the server but over ADS")
	assert.Contains(t, metrics, `inferplane_xds_tls_endpoints{state="tls"} 1`)

	// cert-manager renews the certificate: the new one reaches the clients, same secret name.
	cert2, key2 := ca.Leaf([]string{"*.acme.example.test"}, now.Add(-time.Minute), now.Add(48*time.Hour))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(acme), acme))
	acme.Data = map[string][]byte{corev1.TLSCertKey: cert2, corev1.TLSPrivateKeyKey: key2}
	require.NoError(t, env.Client.Update(ctx, acme))
	waitAll(t, ctx, agents, func(s adstest.State) bool { return string(s.Secrets[secret]) == string(cert2) }, "renewed certificate over SDS")

	// The certificate is deleted: acme falls back to plain HTTP and the TLS listener goes.
	require.NoError(t, env.Client.Delete(ctx, acme))
	waitAll(t, ctx, agents, func(s adstest.State) bool {
		return strings.Join(s.Listeners, ",") == "inferplane_http" && requireTLSOf(s, "acme/chat") == routev3.VirtualHost_NONE
	}, "no certificate left: plain HTTP only")
}

// chanCerts is a certificate source the test feeds (the real one, certs.Kube, is tested above
// against the API server).
type chanCerts chan certs.Update

func (c chanCerts) Run(ctx context.Context, out chan<- certs.Update) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-c:
			out <- u
		}
	}
}

// TestTLSThroughEnvoy needs the envoy binary: a TLS client (SNI, the test CA) through a real
// Envoy configured only by this server gets the endpoint's certificate and a completion; plain
// HTTP is redirected to HTTPS; a renewed certificate is served to new connections without
// restarting Envoy.
func TestTLSThroughEnvoy(t *testing.T) {
	envoy, err := exec.LookPath("envoy")
	if err != nil {
		t.Skip("SKIPPED: no envoy binary on PATH, so TLS through a real Envoy (SNI, SDS certificates, " +
			"the HTTP to HTTPS redirect, a certificate renewal without restart) could not run here; install Envoy and rerun to run it")
	}
	ca := tlstest.NewCA()
	now := time.Now()
	leaf := func(validFor time.Duration) resources.Certificate {
		c, k := ca.Leaf([]string{"*.acme.example.test"}, now.Add(-time.Hour), now.Add(validFor))
		return resources.Certificate{Name: "inferplane-system/acme", Hosts: []string{"*.acme.example.test"}, NotAfter: now.Add(validFor), CertPEM: c, KeyPEM: k}
	}
	ds := startDoubles(t, "127.0.0.31", "127.0.0.32")
	plainPort, tlsPort := freePort(t), freePort(t)
	rc := resources.DefaultConfig("example.test")
	rc.ListenerAddress, rc.ListenerPort, rc.TLSListenerPort = "127.0.0.1", uint32(plainPort), uint32(tlsPort)
	feed := make(chanCerts, 1)
	feed <- certs.Update{Certificates: []resources.Certificate{leaf(24 * time.Hour)}}
	p := serve(t, Config{Source: &discovery.File{Path: endpointsFile(t, ds[0], ds[1])}, Certificates: feed, Resources: rc})
	startEnvoy(t, envoy, p.GRPCAddr.String(), true)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	var served atomic.Pointer[x509.Certificate]
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(tlsPort))
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: roots,
		VerifyConnection: func(cs tls.ConnectionState) error { served.Store(cs.PeerCertificates[0]); return nil }}}}
	oa := openai.NewClient(option.WithBaseURL(fmt.Sprintf("https://chat.acme.example.test:%d/v1/", tlsPort)),
		option.WithHTTPClient(hc), option.WithAPIKey("sk-unused"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		_, err := oa.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "no completion over TLS")
	require.NotNil(t, served.Load())
	first := served.Load().SerialNumber

	// Plain HTTP to an endpoint on TLS: a redirect to HTTPS.
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(plainPort))
		}}}
	resp, err := plain.Get("http://chat.acme.example.test/v1/models")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Location"), "https://chat.acme.example.test"), resp.Header.Get("Location"))

	// Renewal: new connections get the new certificate, Envoy keeps running.
	feed <- certs.Update{Certificates: []resources.Certificate{leaf(48 * time.Hour)}}
	require.Eventually(t, func() bool {
		hc.CloseIdleConnections()
		_, err := oa.Models.List(ctx)
		return err == nil && served.Load().SerialNumber.Cmp(first) != 0
	}, 30*time.Second, 100*time.Millisecond, "the renewed certificate is not served")
}
