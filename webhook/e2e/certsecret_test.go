package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

// TestCertSecret: the in-cluster certificate mode keeps one bundle in a Secret (created once,
// reused, renewed before expiry) and writes its CA into the webhook configuration.
func TestCertSecret(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	require.NoError(t, env.EnsureNamespace(ctx, "inferplane-certs"))
	objs, err := install.Manifests(install.ManifestOptions{Namespace: "inferplane-certs", ConfigurationName: "inferplane-certs-test"})
	require.NoError(t, err)
	vwc := objs[len(objs)-1].(*admissionregistrationv1.ValidatingWebhookConfiguration)
	inertOnLoopback(vwc) // registered for real, matching nothing, never through a Service
	require.NoError(t, env.Client.Create(ctx, vwc))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, vwc) })

	now := time.Now()
	cs := &webhook.CertSecret{
		Client: env.Client, Secret: types.NamespacedName{Namespace: "inferplane-certs", Name: "webhook-tls"},
		Hosts: webhook.Hosts("inferplane-certs", install.DefaultName), WebhookConfiguration: vwc.Name,
		Now: func() time.Time { return now },
	}
	first, err := cs.Ensure(ctx)
	require.NoError(t, err)
	var sec corev1.Secret
	require.NoError(t, env.Client.Get(ctx, cs.Secret, &sec))
	assert.Equal(t, corev1.SecretTypeTLS, sec.Type)
	notAfter, err := first.Check(cs.Hosts)
	require.NoError(t, err)

	again, err := cs.Ensure(ctx)
	require.NoError(t, err)
	assert.Equal(t, first.Cert, again.Cert, "a valid certificate is reused")

	now = notAfter.Add(-24 * time.Hour) // within the renewal window
	renewed, err := cs.Ensure(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, first.Cert, renewed.Cert, "a certificate close to expiry is replaced")

	dir := t.TempDir()
	var current webhook.Bundle
	require.NoError(t, cs.Sync(ctx, dir, &current))
	assert.Equal(t, renewed.Cert, current.Cert)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vwc), vwc))
	for _, w := range vwc.Webhooks {
		assert.Equal(t, renewed.CA, w.ClientConfig.CABundle, w.Name)
	}
}

// TestServeWithCertSecret runs the server in its in-cluster mode (the certificate from a
// Secret, the CA injected by the server itself into a configuration rendered without one) and
// checks that the API server reaches it and gets our denial.
func TestServeWithCertSecret(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	applyPolicyData(t)
	require.NoError(t, env.EnsureNamespace(ctx, "inferplane-serve"))
	cs := &webhook.CertSecret{
		Secret: types.NamespacedName{Namespace: "inferplane-serve", Name: "webhook-tls"},
		Hosts:  []string{"127.0.0.1"}, WebhookConfiguration: "inferplane-serve-test",
	}
	srv := startServer(t, webhook.ServeOptions{CertSecret: cs, CertSyncInterval: 200 * time.Millisecond})
	// Rendered with a placeholder CA, as from git; the server's next sync replaces it.
	objs, err := install.Manifests(install.ManifestOptions{ConfigurationName: cs.WebhookConfiguration, URL: srv.URL, CABundle: []byte("placeholder")})
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(ctx, objs[0]))
	t.Cleanup(func() { unregister(t, objs[0].(*admissionregistrationv1.ValidatingWebhookConfiguration)) })
	waitEnforced(t)
}
