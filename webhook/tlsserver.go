package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/inferplane/inferplane/internal/serve"
)

// boundedServer is the admission webhook's HTTPS server, in controller-runtime's place (its
// webhook.Server, which the manager starts and stops): the same certificate watch of CertDir
// and TLS options, but a net/http server and listener within ServeOptions.Bounds, as every
// other server of inferplane, where controller-runtime's takes none (docs/servers.md).
type boundedServer struct {
	addr     string
	certDir  string
	tlsOpts  []func(*tls.Config)
	bounds   serve.HTTP
	shutdown time.Duration
	log      logr.Logger

	// hooks is controller-runtime's own server, never started: its Register instruments each
	// hook with controller-runtime's webhook metrics (requests, latency, in flight), whose
	// collectors live in a package of its own that is not importable.
	hooks   ctrlwebhook.Server
	started atomic.Bool
}

var _ ctrlwebhook.Server = (*boundedServer)(nil)

func newBoundedServer(o ServeOptions, tlsOpts []func(*tls.Config)) *boundedServer {
	return &boundedServer{addr: net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), certDir: o.CertDir, tlsOpts: tlsOpts,
		bounds: o.Bounds, shutdown: o.ShutdownTimeout, log: o.Logger.WithName("webhook-server"),
		hooks: ctrlwebhook.NewServer(ctrlwebhook.Options{})}
}

// NeedLeaderElection: every replica serves admission.
func (s *boundedServer) NeedLeaderElection() bool { return false }

// Register serves hook at path, instrumented as controller-runtime does, within the bounds of
// each request (serve.HTTP.Server).
func (s *boundedServer) Register(path string, hook http.Handler) { s.hooks.Register(path, hook) }

func (s *boundedServer) WebhookMux() *http.ServeMux { return s.hooks.WebhookMux() }

// StartedChecker passes once the TLS listener is open.
func (s *boundedServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		if !s.started.Load() {
			return errors.New("the webhook server has not started yet")
		}
		return nil
	}
}

// Start serves until ctx ends, then lets requests in flight finish within the shutdown time.
// It speaks HTTP/1.1 only: the per-response write deadlines of serve.HTTP are a connection's,
// which over HTTP/2 would be shared by every stream on it.
func (s *boundedServer) Start(ctx context.Context) error {
	certs, err := certwatcher.New(filepath.Join(s.certDir, "tls.crt"), filepath.Join(s.certDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("serving certificate in %s: %w", s.certDir, err)
	}
	go func() {
		if err := certs.Start(ctx); err != nil {
			s.log.Error(err, "serving certificate watch stopped")
		}
	}()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, GetCertificate: certs.GetCertificate}
	for _, opt := range s.tlsOpts {
		opt(cfg)
	}
	l, err := s.bounds.Listen(s.addr)
	if err != nil {
		return fmt.Errorf("webhook listener %s: %w", s.addr, err)
	}
	srv := s.bounds.Server(s.hooks.WebhookMux())
	srv.TLSConfig = cfg
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){} // no HTTP/2
	// net/http's own complaints (a failed TLS handshake, a malformed request) are a client's
	// doing: at debug level, so a flood of them is not a flood of log lines.
	srv.ErrorLog = slog.NewLogLogger(logr.ToSlogHandler(s.log), slog.LevelDebug)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdown)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.log.Error(err, "webhook server shutdown: requests still in flight were cut")
		}
	}()
	s.started.Store(true)
	s.log.Info("serving admission", "address", l.Addr().String())
	if err := srv.ServeTLS(l, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-done
	return nil
}
