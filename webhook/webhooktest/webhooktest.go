// Package webhooktest serves the admission webhook for tests and benchmarks: its endpoints on
// a plain mux (no TLS, manager or cache), or the whole server on 127.0.0.1 registered with a
// real API server, the way `inferplane webhook serve --dev` and `webhook manifests --url` do.
package webhooktest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/internal/testnet"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

// Mux serves the endpoints of every reviewed kind behind g (nil: the default guard) over src.
func Mux(t testing.TB, src policy.Source, m *webhook.Metrics, g *webhook.Guard) *http.ServeMux {
	t.Helper()
	if g == nil {
		g = webhook.NewGuard(webhook.GuardOptions{})
	}
	mux := http.NewServeMux()
	// A logger with a sink: with none (logr.Discard), controller-runtime falls back to its global
	// logger, which complains with a stack trace that it was never set.
	quiet := funcr.New(func(string, string) {}, funcr.Options{})
	handlers, err := webhook.Handlers(g, src, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for path, h := range handlers {
		mux.Handle(path, h)
	}
	return mux
}

// Server is webhook.Serve running in the test process, on 127.0.0.1.
type Server struct {
	URL, MetricsURL, ProbeURL string
	// CA is the certificate of the self-signed pair the server serves with (nil when the
	// options keep the certificate in a Secret).
	CA   []byte
	stop context.CancelFunc
	done chan error
}

// Serve runs the webhook against the API server cfg points at, the way `webhook serve --dev`
// does (a self-signed pair for 127.0.0.1, unless o keeps the certificate in a Secret), on
// free loopback ports. It returns once /readyz answers 200 (the policy cache has synced) and
// stops the server when the test ends.
func Serve(t testing.TB, cfg *rest.Config, o webhook.ServeOptions, log logr.Logger) *Server {
	t.Helper()
	port, mport, pport := o.Port, testnet.FreePort(t), testnet.FreePort(t)
	if port == 0 {
		port = testnet.FreePort(t)
	}
	if o.CertDir == "" {
		o.CertDir = t.TempDir()
	}
	var ca []byte
	if o.CertSecret == nil {
		b, err := webhook.SelfSigned([]string{"127.0.0.1"}, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WriteDir(o.CertDir); err != nil {
			t.Fatal(err)
		}
		ca = b.CA
	}
	o.Host, o.Port = "127.0.0.1", port
	o.MetricsAddr, o.ProbeAddr = fmt.Sprintf("127.0.0.1:%d", mport), fmt.Sprintf("127.0.0.1:%d", pport)
	o.ShutdownTimeout = 5 * time.Second
	o.Logger = log
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		URL: fmt.Sprintf("https://127.0.0.1:%d", port), MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport),
		ProbeURL: fmt.Sprintf("http://127.0.0.1:%d", pport), CA: ca, stop: cancel, done: make(chan error, 1),
	}
	go func() { s.done <- webhook.Serve(ctx, cfg, o) }()
	t.Cleanup(func() { s.Stop(t) })
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-s.done:
			s.done <- err
			return false, fmt.Errorf("the webhook stopped: %v", err)
		default:
		}
		return probe(s.ProbeURL+"/readyz") == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("webhook not ready: %v", err)
	}
	return s
}

// Stop cancels the server's context (what SIGTERM does in the CLI) and waits for it to drain.
func (s *Server) Stop(t testing.TB) {
	if s.stop == nil {
		return
	}
	s.stop()
	s.stop = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("graceful shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook did not stop within 30s of its context ending")
	}
}

// Register installs the ValidatingWebhookConfiguration install.Manifests renders for a webhook
// at url (out of cluster) through c, and waits until the API server enforces it: a dry-run
// create of probe (an object the webhook denies) comes back denied by the webhook. The
// configuration is deleted when the test ends.
func Register(t testing.TB, c client.Client, name, url string, ca []byte, probe client.Object) {
	t.Helper()
	objs, err := install.Manifests(install.ManifestOptions{ConfigurationName: name, URL: url, CABundle: ca})
	if err != nil {
		t.Fatal(err)
	}
	vwc := objs[0].(*admissionregistrationv1.ValidatingWebhookConfiguration)
	ctx := context.Background()
	if err := c.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	dryRun := func(ctx context.Context) error {
		return c.Create(ctx, probe.DeepCopyObject().(client.Object), client.DryRunAll)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), vwc); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", vwc.Name, err)
		}
		// The API server drops a deleted configuration from its admission chain a moment later.
		_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return dryRun(ctx) == nil, nil
		})
	})
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = dryRun(ctx)
		return last != nil && strings.Contains(last.Error(), "denied the request"), nil
	})
	if err != nil {
		t.Fatalf("the API server never called the webhook; last answer: %v", last)
	}
}

func probe(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
