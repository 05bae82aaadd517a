package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/internal/testnet"
	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/webhooktest"
)

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

func freePort(t testing.TB) int { return testnet.FreePort(t) }

// testLogger writes warnings and errors to stderr; the webhook's denials are logged at info.
func testLogger() logr.Logger {
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// server is a webhook.Serve running in the test process on loopback.
type server = webhooktest.Server

// startServer runs the webhook the way `inferplane webhook serve --dev` does: a self-signed pair
// in a cert dir, TLS on 127.0.0.1. It returns once /readyz answers 200 (policy cache synced).
func startServer(t testing.TB, o webhook.ServeOptions) *server {
	t.Helper()
	return startServerWithConfig(t, env.Config, o)
}

// startServerWithConfig is startServer with another identity (e.g. an impersonated
// ServiceAccount).
func startServerWithConfig(t testing.TB, cfg *rest.Config, o webhook.ServeOptions) *server {
	t.Helper()
	return webhooktest.Serve(t, cfg, o, testLogger())
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// register installs the ValidatingWebhookConfiguration that Manifests renders for a webhook at
// url (out of cluster), and waits until the API server enforces it: a dry-run of a VM that
// breaks the GPU rule comes back denied by our webhook.
func register(t testing.TB, name, url string, ca []byte) {
	t.Helper()
	webhooktest.Register(t, env.Client, name, url, ca, probeVM())
}

func unregister(t testing.TB, vwc *admissionregistrationv1.ValidatingWebhookConfiguration) {
	err := env.Client.Delete(context.Background(), vwc)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete %s: %v", vwc.Name, err)
	}
	// The API server drops a deleted configuration from its admission chain a moment later.
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return env.DryRun(ctx, probeVM()) == nil, nil
	})
}

// probeVM breaks the GPU rule: one GPU where the master needs four.
func probeVM() client.Object {
	vm := pt.VM("probe", 0, 0, pt.Master("qwen-4", 4), pt.H100())
	vm.Spec.Template.Spec.Domain.Devices.GPUs = vm.Spec.Template.Spec.Domain.Devices.GPUs[:1]
	return vm
}

func waitEnforced(t testing.TB) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = env.DryRun(ctx, probeVM())
		return last != nil && strings.Contains(last.Error(), "denied the request"), nil
	})
	require.NoError(t, err, "the API server never called the webhook; last answer: %v", last)
}

// applyPolicyData creates the tenants, node types and masters of policytest in the cluster
// (the objects a tenant's platform/ folder holds) and the tenant's namespace.
func applyPolicyData(t testing.TB) { applyPolicyDataTo(t, env) }

// applyPolicyDataTo is applyPolicyData on another API server.
func applyPolicyDataTo(t testing.TB, env *kubeenv.Env) {
	t.Helper()
	ctx := context.Background()
	for _, o := range pt.Objects() {
		err := env.Client.Create(ctx, o)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		require.NoError(t, err, "%T %s", o, o.GetName())
	}
	require.NoError(t, env.EnsureNamespace(ctx, "acme"))
}

// inertOnLoopback makes an installed webhook configuration safe to register in the test API
// server: it matches nothing, and its clients are moved from the Service (a ClusterIP, off
// loopback) to a URL on 127.0.0.1 where nothing listens. Its caBundle is left as it is.
func inertOnLoopback(vwc *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range vwc.Webhooks {
		w := &vwc.Webhooks[i]
		w.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"inferplane.io/never": "true"}}
		url := "https://127.0.0.1:1/validate"
		if w.ClientConfig.Service != nil && w.ClientConfig.Service.Path != nil {
			url = "https://127.0.0.1:1" + *w.ClientConfig.Service.Path
		}
		w.ClientConfig.Service, w.ClientConfig.URL = nil, &url
	}
}
