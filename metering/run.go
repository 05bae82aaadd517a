package metering

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inferplane/inferplane/internal/serve"
)

// DefaultAdminAddress is where the meter serves its admin endpoints unless told otherwise.
const DefaultAdminAddress = "127.0.0.1:9095"

// Serve runs the meter (`inferplane meter serve`) until ctx ends: the Service, and on
// adminAddr /healthz, /readyz (every tenant cluster read once), /metrics and the meter's own
// paths (Handler), within bounds (zero fields: the admin servers' serve.AdminHTTP, docs/servers.md). It returns once the last records and checkpoint are written.
func Serve(ctx context.Context, cfg Config, adminAddr string, bounds serve.HTTP) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registerer = reg
	svc, err := New(cfg)
	if err != nil {
		return err
	}
	bounds = bounds.Over(serve.AdminHTTP())
	lis, err := bounds.Listen(adminAddr)
	if err != nil {
		svc.close()
		return fmt.Errorf("meter admin address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/meter/", svc.Handler())
	var health serve.Health
	health.AddReadyzCheck("clusters", func() (string, error) {
		if !svc.Ready() {
			return "", errors.New("not every tenant cluster has been read yet")
		}
		return "", nil
	})
	health.Register(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := bounds.Server(mux)
	serr := make(chan error, 1)
	go func() { serr <- srv.Serve(lis) }()
	svc.log.Info("meter: serving", "admin", lis.Addr().String(), "store", cfg.Dir)
	runErr := svc.Run(ctx)
	health.Drain()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	if err := <-serr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(runErr, err)
	}
	return runErr
}
