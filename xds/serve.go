package xds

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	// Aliased: the package's tests have a helper named serve.
	bounds "github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/xds/certs"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/resources"
	"github.com/inferplane/inferplane/xds/server"
)

// Config is the xDS server process's configuration.
type Config struct {
	// GRPCAddress serves ADS (and the extra gRPC services); AdminAddress serves /healthz,
	// /readyz, /metrics, /debug/endpoints and the extra HTTP handlers.
	GRPCAddress  string
	AdminAddress string

	Source discovery.Source
	// Certificates, when set, are the TLS certificates Envoy terminates TLS with (Resources'
	// TLS listener); nil serves plain HTTP only.
	Certificates certs.Source
	Resources    resources.Config
	Health       health.Config
	// Filters adds the API-key and usage filters to the listener; nil adds none.
	Filters resources.Filters

	// ShutdownTimeout bounds the graceful stop. ADS streams are ended at once (Envoy keeps its
	// configuration and reconnects, to another replica of this server if there is one); other
	// RPCs in flight (API-key checks) get this long to finish.
	ShutdownTimeout time.Duration

	// Extension points for the rest of the process (API keys, usage): more gRPC services on
	// the same server, more handlers on the admin mux, more metrics in the same registry.
	GRPCServices []func(*grpc.Server)
	HTTPHandlers map[string]http.Handler
	Registry     *prometheus.Registry
	GRPCOptions  []grpc.ServerOption

	// GRPCBounds and AdminBounds bound the two servers against slow and hostile clients; zero
	// fields take bounds.GRPCDefaults and bounds.AdminHTTP (docs/servers.md).
	GRPCBounds  bounds.GRPC
	AdminBounds bounds.HTTP

	Logger *slog.Logger
	// Started, when set, is called once both listeners are bound (tests use the addresses).
	Started func(Running)
}

// Running describes a started process.
type Running struct {
	GRPCAddr, AdminAddr net.Addr
	Server              *server.Server
	Controller          *Controller
	Checker             *health.Checker
}

// GRPCServerOptions are the ADS server's defaults (bounds.GRPCDefaults: keepalives that find
// dead Envoys in under a minute, bounded messages, streams and windows) for a server on a
// listener of its own (the send watchdog, which needs serve's listener, is left out).
func GRPCServerOptions() []grpc.ServerOption { return grpcOptions(bounds.GRPCDefaults(), nil) }

func grpcOptions(b bounds.GRPC, l *bounds.Listener) []grpc.ServerOption {
	// The same process answers ext_authz Check calls, one short stream per API request: a pool
	// of workers whose stacks have already grown spares each call a new goroutine and its
	// stack copies. Long ADS streams do not starve it: with every worker busy, gRPC starts a
	// goroutine as it would without the pool.
	return append(b.ServerOptions(l), grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))))
}

// NewRegistry is the server's default metrics registry: Go runtime and process metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Serve runs the xDS server process until ctx ends, then stops it gracefully. It returns an
// error when a part cannot start (a listener, the source); nothing is left running then.
func Serve(ctx context.Context, cfg Config) error {
	if cfg.Source == nil {
		return errors.New("no replica source configured")
	}
	if err := cfg.Resources.Validate(); err != nil {
		return err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = NewRegistry()
	}
	// The ADS streams get their own context: they end when the graceful stop begins, not
	// when a part of the process fails.
	streamCtx, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	p, err := newProcess(streamCtx, cfg)
	if err != nil {
		return err
	}
	return p.run(ctx, endStreams)
}

// proc is a started xDS server process: its listeners and parts.
type proc struct {
	cfg               Config
	log               *slog.Logger
	grpcLis, adminLis *bounds.Listener
	srv               *server.Server
	ctrl              *Controller
	checker           *health.Checker
	grpc              *grpc.Server
	admin             *http.Server
	health            bounds.Health
}

// newProcess binds the listeners and builds the parts; on error nothing is left open.
func newProcess(streamCtx context.Context, cfg Config) (_ *proc, err error) {
	p := &proc{cfg: cfg, log: cfg.Logger}
	gb, ab := cfg.GRPCBounds.Over(bounds.GRPCDefaults()), cfg.AdminBounds.Over(bounds.AdminHTTP())
	if p.grpcLis, err = gb.Listen(cfg.GRPCAddress); err != nil {
		return nil, fmt.Errorf("grpc listen address: %w", err)
	}
	p.grpcLis.Log = p.log
	if p.adminLis, err = ab.Listen(cfg.AdminAddress); err != nil {
		p.grpcLis.Close()
		return nil, fmt.Errorf("admin listen address: %w", err)
	}
	defer func() {
		if err != nil {
			p.grpcLis.Close()
			p.adminLis.Close()
		}
	}()
	reg := cfg.Registry
	p.srv = server.New(streamCtx, server.Options{Logger: p.log, Registerer: reg})
	p.checker, err = health.New(cfg.Health, func(ev health.Event) { p.ctrl.HealthChanged(ev) }, p.log, reg)
	if err != nil {
		return nil, err
	}
	p.ctrl, err = NewController(ControllerConfig{
		Resources:        cfg.Resources,
		Filters:          cfg.Filters,
		HealthPath:       cfg.Health.Path,
		InitialProbeWait: cfg.Health.Timeout + time.Second + min(cfg.Health.Interval, time.Second),
		TLS:              cfg.Certificates != nil,
		Logger:           p.log,
		Registerer:       reg,
	}, p.srv, p.checker)
	if err != nil {
		return nil, err
	}
	p.grpc = grpc.NewServer(append(grpcOptions(gb, p.grpcLis), cfg.GRPCOptions...)...)
	p.srv.Register(p.grpc)
	for _, register := range cfg.GRPCServices {
		register(p.grpc)
	}
	p.admin = ab.Server(p.adminMux())
	return p, nil
}

// adminMux serves /healthz, /readyz, /metrics, /debug/endpoints and the extra handlers.
func (p *proc) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	p.health.AddReadyzCheck("configuration", func() (string, error) {
		if !p.ctrl.Ready() {
			return "", errors.New("no configuration published yet (waiting for the replica source)")
		}
		// Serving stale replicas is still serving (taking the gateway out of service would
		// take every tenant down): the note says what is stale.
		if n, ok := p.cfg.Source.(discovery.ReadyNoter); ok {
			return n.ReadyNote(), nil
		}
		return "", nil
	})
	p.health.Register(mux)
	reg := p.cfg.Registry
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /debug/endpoints", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(p.debugState())
	})
	for pattern, h := range p.cfg.HTTPHandlers {
		mux.Handle(pattern, h)
	}
	return mux
}

// debugState is /debug/endpoints' document.
func (p *proc) debugState() map[string]any {
	problems, lastErr := p.ctrl.Problems()
	state := map[string]any{
		"version":   p.srv.Version(),
		"nodes":     p.srv.Nodes(),
		"endpoints": p.ctrl.Status(),
		"problems":  problems,
		"lastError": lastErr,
	}
	if d, ok := p.cfg.Source.(discovery.Describer); ok {
		state["source"] = d.Describe()
	}
	return state
}

// run starts every part, waits until ctx ends or a part fails, then stops gracefully.
func (p *proc) run(ctx context.Context, endStreams context.CancelFunc) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := make(chan discovery.Update)
	var wg sync.WaitGroup
	errs := make(chan error, 7)
	start := func(name string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	start("replica source", func() error { return p.cfg.Source.Run(ctx, updates) })
	if p.cfg.Certificates != nil {
		certUpdates := make(chan certs.Update)
		start("certificates", func() error { return p.cfg.Certificates.Run(ctx, certUpdates) })
		start("certificate updates", func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case u := <-certUpdates:
					p.ctrl.CertificatesChanged(u)
				}
			}
		})
	}
	start("health checker", func() error { p.checker.Run(ctx); return nil })
	start("controller", func() error { p.ctrl.Run(ctx, updates); return nil })
	start("grpc server", func() error { return p.grpc.Serve(p.grpcLis) })
	start("admin server", func() error {
		if err := p.admin.Serve(p.adminLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	p.log.Info("xds server started", "grpc", p.grpcLis.Addr().String(), "admin", p.adminLis.Addr().String())
	if p.cfg.Started != nil {
		p.cfg.Started(Running{GRPCAddr: p.grpcLis.Addr(), AdminAddr: p.adminLis.Addr(), Server: p.srv, Controller: p.ctrl, Checker: p.checker})
	}

	<-ctx.Done()
	p.stop(endStreams)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	p.log.Info("xds server stopped")
	return errors.Join(all...)
}

// stop turns /readyz to 503, ends the ADS streams at once and gives other RPCs the shutdown
// timeout to finish.
func (p *proc) stop(endStreams context.CancelFunc) {
	p.health.Drain()
	p.log.Info("xds server stopping")
	timeout := cmp.Or(p.cfg.ShutdownTimeout, 10*time.Second)
	bounds.StopGRPC(p.grpc, timeout, endStreams)
	shutdownCtx, done := context.WithTimeout(context.Background(), timeout)
	defer done()
	_ = p.admin.Shutdown(shutdownCtx)
}
