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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

// TestInstallRBAC applies the install manifests' Namespace, ServiceAccount and RBAC for real and
// runs the server as that ServiceAccount (impersonated) in its in-cluster certificate mode: the
// permissions are enough to watch the policy data (readiness needs the synced cache), create
// and read the TLS Secret and fill in the configuration's caBundle.
func TestInstallRBAC(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	const ns = "inferplane-rbac"
	objs, err := install.Manifests(install.ManifestOptions{Namespace: ns, ConfigurationName: "inferplane-rbac-test"})
	require.NoError(t, err)
	var vwc *admissionregistrationv1.ValidatingWebhookConfiguration
	for _, o := range objs {
		switch o.GetObjectKind().GroupVersionKind().Kind {
		case "Deployment", "Service", "PodDisruptionBudget":
			continue // proven by the dry-run test; nothing runs pods here
		case "ValidatingWebhookConfiguration":
			vwc = o.(*admissionregistrationv1.ValidatingWebhookConfiguration)
			inertOnLoopback(vwc) // registered for real, matching nothing, never through a Service
		}
		require.NoError(t, env.Client.Create(ctx, o), "%T %s", o, o.GetName())
		t.Cleanup(func() { _ = env.Client.Delete(ctx, o) })
	}
	require.NotNil(t, vwc)

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + install.DefaultName}
	secret := types.NamespacedName{Namespace: ns, Name: install.DefaultName + "-tls"}
	srv := startServerWithConfig(t, cfg, webhook.ServeOptions{CertSecret: &webhook.CertSecret{
		Secret: secret, Hosts: webhook.Hosts(ns, install.DefaultName), WebhookConfiguration: vwc.Name,
	}, CertSyncInterval: 200 * time.Millisecond})
	_ = srv

	// The impersonation is real: a ServiceAccount without the bindings cannot even start.
	nobody := rest.CopyConfig(env.Config)
	nobody.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":nobody"}
	err = webhook.Serve(ctx, nobody, webhook.ServeOptions{CertDir: t.TempDir(), Port: freePort(t), MetricsAddr: "0", ProbeAddr: "0",
		CertSecret: &webhook.CertSecret{Secret: secret, Hosts: []string{"x"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forbidden")

	var sec corev1.Secret
	require.NoError(t, env.Client.Get(ctx, secret, &sec))
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vwc), vwc); err != nil {
			return false, err
		}
		return string(vwc.Webhooks[0].ClientConfig.CABundle) == string(sec.Data[webhook.CAFile]), nil
	})
	require.NoError(t, err, "caBundle not injected")
	for _, w := range vwc.Webhooks {
		assert.Equal(t, sec.Data[webhook.CAFile], w.ClientConfig.CABundle, w.Name)
	}
}
