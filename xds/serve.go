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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

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

	Source    discovery.Source
	Resources resources.Config
	Health    health.Config
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

// GRPCServerOptions are the ADS server's defaults: keepalives that find dead Envoys in under
// a minute and room for many streams per connection.
func GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(1 << 20),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// The same process answers ext_authz Check calls, one short stream per API request:
		// a pool of workers whose stacks have already grown spares each call a new goroutine
		// and its stack copies. Long ADS streams do not starve it: with every worker busy,
		// gRPC starts a goroutine as it would without the pool.
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
	}
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
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Source == nil {
		return errors.New("no replica source configured")
	}
	reg := cfg.Registry
	if reg == nil {
		reg = NewRegistry()
	}
	if err := cfg.Resources.Validate(); err != nil {
		return err
	}

	grpcLis, err := net.Listen("tcp", cfg.GRPCAddress)
	if err != nil {
		return fmt.Errorf("grpc listen address: %w", err)
	}
	adminLis, err := net.Listen("tcp", cfg.AdminAddress)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("admin listen address: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The ADS streams get their own context: they end when the graceful stop begins, not
	// when a part of the process fails.
	streamCtx, endStreams := context.WithCancel(context.Background())
	defer endStreams()

	srv := server.New(streamCtx, server.Options{Logger: log, Registerer: reg})
	var ctrl *Controller
	checker, err := health.New(cfg.Health, func(ev health.Event) { ctrl.HealthChanged(ev) }, log, reg)
	if err != nil {
		grpcLis.Close()
		adminLis.Close()
		return err
	}
	ctrl, err = NewController(ControllerConfig{
		Resources:        cfg.Resources,
		Filters:          cfg.Filters,
		HealthPath:       cfg.Health.Path,
		InitialProbeWait: cfg.Health.Timeout + time.Second + min(cfg.Health.Interval, time.Second),
		Logger:           log,
		Registerer:       reg,
	}, srv, checker)
	if err != nil {
		grpcLis.Close()
		adminLis.Close()
		return err
	}

	g := grpc.NewServer(append(GRPCServerOptions(), cfg.GRPCOptions...)...)
	srv.Register(g)
	for _, register := range cfg.GRPCServices {
		register(g)
	}

	var draining atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case draining.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case !ctrl.Ready():
			http.Error(w, "no configuration published yet (waiting for the replica source)", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /debug/endpoints", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		problems, lastErr := ctrl.Problems()
		_ = enc.Encode(map[string]any{
			"version":   srv.Version(),
			"nodes":     srv.Nodes(),
			"endpoints": ctrl.Status(),
			"problems":  problems,
			"lastError": lastErr,
		})
	})
	for pattern, h := range cfg.HTTPHandlers {
		mux.Handle(pattern, h)
	}
	admin := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	updates := make(chan discovery.Update)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	run("replica source", func() error { return cfg.Source.Run(ctx, updates) })
	run("health checker", func() error { checker.Run(ctx); return nil })
	run("controller", func() error { ctrl.Run(ctx, updates); return nil })
	run("grpc server", func() error { return g.Serve(grpcLis) })
	run("admin server", func() error {
		if err := admin.Serve(adminLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	log.Info("xds server started", "grpc", grpcLis.Addr().String(), "admin", adminLis.Addr().String())
	if cfg.Started != nil {
		cfg.Started(Running{GRPCAddr: grpcLis.Addr(), AdminAddr: adminLis.Addr(), Server: srv, Controller: ctrl, Checker: checker})
	}

	<-ctx.Done()
	draining.Store(true)
	log.Info("xds server stopping")
	timeout := cmp.Or(cfg.ShutdownTimeout, 10*time.Second)
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	endStreams()
	select {
	case <-stopped:
	case <-time.After(timeout):
		g.Stop()
		<-stopped
	}
	shutdownCtx, done := context.WithTimeout(context.Background(), timeout)
	defer done()
	_ = admin.Shutdown(shutdownCtx)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	log.Info("xds server stopped")
	return errors.Join(all...)
}
