// Package keycheck runs the API key check as a process of its own (`inferplane keys serve`):
// Envoy's ext_authz service (auth/extauthz) over a key index it keeps current from the key
// store, gRPC health for Envoy's active health checks, and /healthz, /readyz and /metrics.
//
// Run as several replicas behind a headless Service, it is what keeps requests flowing when any
// one process of the gateway goes: Envoy spreads checks over the replicas that pass its health
// check (auth/envoyfilters), an xDS server or the host API server going down does not touch
// it (its index stays as last read), and one replica stopping drains first: it fails its
// health check, waits DrainDelay for Envoy to notice, then finishes the checks in flight.
package keycheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/gateway/envoyfilters"
	"github.com/inferplane/inferplane/internal/serve"
)

// Defaults of Config.
const (
	DefaultGRPCAddress  = ":18001"
	DefaultAdminAddress = ":9091"
	// DefaultDrainDelay covers Envoy's health checks (1 s apart, two failures take a process
	// out) and the DNS refresh of the headless Service (2 s), with room to spare.
	DefaultDrainDelay      = 5 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
)

// Config is the key check process.
type Config struct {
	GRPCAddress  string
	AdminAddress string
	Store        Store
	// SecretFile holds the key secret; empty: $INFERPLANE_KEYS_SECRET.
	SecretFile string
	// Kube is the client configuration of the host cluster (Store.Namespace only).
	Kube func() (*rest.Config, error)
	// DrainDelay is how long a stopping process keeps answering checks after it has started
	// failing its health check; ShutdownTimeout bounds the checks in flight after that.
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	// StoreCheckInterval is how often the host API server is checked while all is well
	// (default 5s; Store.Namespace only).
	StoreCheckInterval time.Duration
	Logger             *slog.Logger
	Registry           *prometheus.Registry
	// Extend, when set, adds to the key check before it serves (its rate limits and token
	// budgets: gateway.Limits.KeyCheck); the returned stop runs once it has stopped serving.
	Extend func(ctx context.Context, x Extension) (stop func(), err error)
	// Started, when set, is called once both listeners are bound (tests use the addresses).
	Started func(Running)
	// GRPCBounds and AdminBounds bound the two servers against slow and hostile clients; zero
	// fields take serve.GRPCDefaults and serve.AdminHTTP (docs/servers.md).
	GRPCBounds  serve.GRPC
	AdminBounds serve.HTTP
}

// Extension is what Config.Extend adds to: the key index, the check, the metrics registry
// and the admin mux.
type Extension struct {
	Index    *keys.Index
	Authz    *extauthz.Server
	Registry prometheus.Registerer
	Mux      *http.ServeMux
	Logger   *slog.Logger
}

// Running describes a started process.
type Running struct {
	GRPCAddr, AdminAddr net.Addr
	Index               *keys.Index
}

// Validate checks what needs nothing running.
func (c Config) Validate() error {
	if err := c.Store.Validate(); err != nil {
		return err
	}
	if c.DrainDelay < 0 || c.ShutdownTimeout < 0 {
		return errors.New("drain delay and shutdown timeout: want durations of 0 or more")
	}
	return nil
}

// Run serves key checks until ctx ends, then drains and stops. It returns an error when a
// part cannot start (a listener, the secret, a store it cannot open); a store that cannot be
// read yet (the host API server down) is retried while the process reports not ready.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	secret, err := keys.LoadSecret(cfg.SecretFile)
	if err != nil {
		return err
	}
	hasher, err := keys.NewHasher(secret)
	if err != nil {
		return err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg.GRPCBounds, cfg.AdminBounds = cfg.GRPCBounds.Over(serve.GRPCDefaults()), cfg.AdminBounds.Over(serve.AdminHTTP())
	p := &proc{cfg: cfg, log: log, idx: keys.NewIndex(), health: health.NewServer()}
	keeper, err := newKeeper(cfg, p.idx, log, reg)
	if err != nil {
		return err
	}
	if err := p.listen(); err != nil {
		return err
	}
	authz := extauthz.New(&keys.Verifier{Hasher: hasher, Index: p.idx}, log)
	reg.MustRegister(authz.Collectors()...)
	p.setServing(false)
	p.grpc = grpc.NewServer(p.cfg.GRPCBounds.ServerOptions(p.grpcLis)...)
	authz.Register(p.grpc)
	healthpb.RegisterHealthServer(p.grpc, p.health)
	mux := p.adminMux(reg)
	p.admin = p.cfg.AdminBounds.Server(mux)
	stopExt := func() {}
	if cfg.Extend != nil {
		if stopExt, err = cfg.Extend(ctx, Extension{Index: p.idx, Authz: authz, Registry: reg, Mux: mux, Logger: log}); err != nil {
			p.grpcLis.Close()
			p.adminLis.Close()
			return err
		}
	}
	defer stopExt()
	return p.run(ctx, keeper)
}

// proc is a started key check process.
type proc struct {
	cfg               Config
	log               *slog.Logger
	idx               *keys.Index
	health            *health.Server
	grpcLis, adminLis *serve.Listener
	grpc              *grpc.Server
	admin             *http.Server
	loaded            atomic.Bool
	ready             serve.Health
}

func (p *proc) listen() (err error) {
	if p.grpcLis, err = p.cfg.GRPCBounds.Listen(cmp.Or(p.cfg.GRPCAddress, DefaultGRPCAddress)); err != nil {
		return fmt.Errorf("grpc listen address: %w", err)
	}
	p.grpcLis.Log = p.log
	if p.adminLis, err = p.cfg.AdminBounds.Listen(cmp.Or(p.cfg.AdminAddress, DefaultAdminAddress)); err != nil {
		p.grpcLis.Close()
		return fmt.Errorf("admin listen address: %w", err)
	}
	return nil
}

// setServing is what Envoy's health checks and /readyz see.
func (p *proc) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	p.health.SetServingStatus("", st)
	p.health.SetServingStatus(envoyfilters.HealthService, st)
}

func (p *proc) adminMux(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	p.ready.AddReadyzCheck("keys", func() (string, error) {
		if !p.loaded.Load() {
			return "", errors.New("the key index is not loaded yet (waiting for the key store)")
		}
		return fmt.Sprintf("%d keys", p.idx.Len()), nil
	})
	p.ready.Register(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// run serves until ctx ends, then drains.
func (p *proc) run(ctx context.Context, keeper *keeper) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() {
		keeper.run(ctx, func() {
			p.loaded.Store(true)
			if !p.ready.Draining() {
				p.setServing(true)
			}
			p.log.Info("key check serving", "keys", p.idx.Len())
		})
	})
	wg.Go(func() {
		if err := p.grpc.Serve(p.grpcLis); err != nil {
			errs <- fmt.Errorf("grpc server: %w", err)
			cancel()
		}
	})
	wg.Go(func() {
		if err := p.admin.Serve(p.adminLis); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("admin server: %w", err)
			cancel()
		}
	})
	p.log.Info("key check started", "grpc", p.grpcLis.Addr().String(), "admin", p.adminLis.Addr().String())
	if p.cfg.Started != nil {
		p.cfg.Started(Running{GRPCAddr: p.grpcLis.Addr(), AdminAddr: p.adminLis.Addr(), Index: p.idx})
	}
	<-ctx.Done()
	p.drain()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	p.log.Info("key check stopped")
	return errors.Join(all...)
}

// drain fails the health checks, keeps answering for DrainDelay while Envoy takes the
// process out, then lets the checks in flight finish (ShutdownTimeout at most).
func (p *proc) drain() {
	p.ready.Drain()
	p.setServing(false)
	delay := p.cfg.DrainDelay
	if delay == 0 {
		delay = DefaultDrainDelay
	}
	p.log.Info("key check stopping: failing health checks, still answering", "for", delay)
	time.Sleep(delay)
	timeout := cmp.Or(p.cfg.ShutdownTimeout, DefaultShutdownTimeout)
	serve.StopGRPC(p.grpc, timeout, nil)
	shutdownCtx, done := context.WithTimeout(context.Background(), timeout)
	defer done()
	_ = p.admin.Shutdown(shutdownCtx)
}
