package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/gateway/envoydrain"
)

func newGatewayEnvoyDrainerCmd() *cobra.Command {
	var (
		cfg       envoydrain.Config
		now       bool
		logLevel  string
		logFormat string
	)
	cmd := &cobra.Command{
		Use:   "envoy-drainer",
		Short: "Beside Envoy in its pod: on SIGTERM, drain Envoy so that a rolling update loses no request",
		Long: `envoy-drainer waits for SIGTERM (the pod is being deleted), then asks Envoy's admin interface to
drain its listeners gracefully (POST /drain_listeners?graceful&skip_exit) and waits at least
--min-wait, then until no request is active, at most --max-wait.

Envoy itself stops at once on SIGTERM, cutting every connection, and its image has no HTTP
client for a preStop hook; so gateway manifests runs this command as a second container of
each Envoy pod, and gives Envoy's container a preStop sleep that holds its SIGTERM back
while it drains: clients are asked to reconnect elsewhere (Connection: close, HTTP/2
GOAWAY) while the load balancer stops sending new connections, and requests in flight finish.

--now drains at once and exits (e.g. from a preStop hook where the binary is available).`,
		Example: `  # The container beside Envoy (gateway manifests)
  inferplane gateway envoy-drainer --envoy-admin-address 127.0.0.1:9901

  # Drain a local Envoy now
  inferplane gateway envoy-drainer --envoy-admin-address 127.0.0.1:9901 --now --min-wait 0s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := xdsLogger(cmd, logLevel, logFormat)
			if err != nil {
				return usageErr(err)
			}
			if cfg.MinWait < 0 || cfg.MaxWait <= 0 || cfg.MinWait > cfg.MaxWait {
				return usageErr(fmt.Errorf("--min-wait %s and --max-wait %s: want 0 <= min <= max, max > 0", cfg.MinWait, cfg.MaxWait))
			}
			cfg.Logger = log
			if !now {
				log.Info("waiting for SIGTERM to drain Envoy", "admin", cfg.Admin)
				<-cmd.Context().Done()
			}
			// The signal ended the command's context; the drain gets its own.
			ctx, cancel := context.WithTimeout(context.Background(), cfg.MaxWait+5*time.Second)
			defer cancel()
			res, err := envoydrain.Drain(ctx, cfg)
			if err != nil {
				return err
			}
			if res.Active > 0 {
				log.Warn("Envoy drained for the longest wait; requests still active", "active", res.Active, "waited", res.Waited)
				return nil
			}
			log.Info("Envoy drained: no request active", "waited", res.Waited)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Admin, "envoy-admin-address", "127.0.0.1:9901", "Envoy's admin interface (IP:port; keep it on loopback)")
	fl.DurationVar(&cfg.MinWait, "min-wait", envoydrain.DefaultMinWait, "drain at least this long (the load balancer's time to stop sending new connections)")
	fl.DurationVar(&cfg.MaxWait, "max-wait", envoydrain.DefaultMaxWait, "stop waiting for active requests after this long (keep it under Envoy's preStop sleep)")
	fl.BoolVar(&now, "now", false, "drain at once instead of waiting for SIGTERM")
	fl.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}
