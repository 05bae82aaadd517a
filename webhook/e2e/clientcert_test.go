package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

// TestClientCertificateRequired runs a second real kube-apiserver whose admission configuration
// gives it a client certificate for the webhook's host (docs/webhook.md, "Only the API server
// may call"), and a webhook that requires one (--client-ca-file): the API server's calls go
// through and are decided as usual, while a TLS client without the certificate is refused.
func TestClientCertificateRequired(t *testing.T) {
	kubeenv.Require(t, env)
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := clientCertificate(t)
	caFile := filepath.Join(dir, "client-ca.crt")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))

	port := freePort(t)
	host := fmt.Sprintf("127.0.0.1:%d", port)
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: %q
  user:
    client-certificate-data: %s
    client-key-data: %s
`, host, b64(certPEM), b64(keyPEM))
	kubeconfigFile := filepath.Join(dir, "webhook-kubeconfig.yaml")
	require.NoError(t, os.WriteFile(kubeconfigFile, []byte(kubeconfig), 0o600))
	admission := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, kubeconfigFile)
	admissionFile := filepath.Join(dir, "admission.yaml")
	require.NoError(t, os.WriteFile(admissionFile, []byte(admission), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	api, err := kubeenv.StartWith(ctx, kubeenv.Options{APIServerFlags: map[string]string{"admission-control-config-file": admissionFile}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, api.Stop()) })
	applyPolicyDataTo(t, api)

	srv := startServerWithConfig(t, api.Config, webhook.ServeOptions{Port: port, ClientCAFile: caFile})
	objs, err := install.Manifests(install.ManifestOptions{ConfigurationName: "inferplane-policy-mtls", URL: srv.URL, CABundle: srv.CA})
	require.NoError(t, err)
	require.NoError(t, api.Client.Create(ctx, objs[0].(*admissionregistrationv1.ValidatingWebhookConfiguration)))

	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		last = api.DryRun(ctx, probeVM())
		return last != nil && strings.Contains(last.Error(), "denied the request: VirtualMachine/acme/probe-r0-n0: spec.template.spec.domain.devices.gpus is 1"), nil
	})
	require.NoError(t, err, "the API server, with its client certificate, never got a decision; last answer: %v", last)

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(srv.CA))
	anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	_, err = anonymous.Post(srv.URL+"/validate/virtualmachines", "application/json", strings.NewReader("{}"))
	require.Error(t, err, "a client without the certificate is refused")
	assert.Contains(t, err.Error(), "certificate required")
}

// clientCertificate makes a CA and a client certificate it signs (ECDSA P-256, one hour).
func clientCertificate(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "apiserver-client-ca"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
