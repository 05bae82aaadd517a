package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/gateway"
	"github.com/inferplane/inferplane/gateway/keycheck"
	"github.com/inferplane/inferplane/internal/kubeconfig"
)

func newKeysServeCmd() *cobra.Command {
	var (
		sf        storeFlags
		cfg       keycheck.Config
		lim       gateway.Limits
		logLevel  string
		logFormat string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the key check Envoy asks about every request (ext_authz), as a process of its own",
		Long: `serve runs the API key check until SIGINT or SIGTERM: Envoy's external authorization service
(envoy.service.auth.v3.Authorization) on --grpc-address, over the keys of the store, which it
follows as they are created and revoked. The gateway runs several of them (gateway manifests:
a Deployment of 2 behind a headless Service, with a PodDisruptionBudget); Envoy spreads its
checks over those that pass its gRPC health check, so losing one key check, one xDS server or
the host API server leaves requests unaffected. With no key check answering, requests are
refused (503), never let through.

It is ready once the keys are read: until then (the host API server down at start) it fails
its health checks and retries. While the store cannot be read it checks with the keys last
read; when it answers again, the keys are read again at once (creations and revocations made
meanwhile apply within seconds).

It enforces the keys' and the tenants' rate limits and token budgets (--limits-*, the same
flags as xds serve): request counts are shared with the other key checks through
--limits-redis, where the xDS servers add the tokens of the access logs; without a Redis,
only this process's request counts apply.

On SIGTERM it first fails its health checks and keeps answering for --drain-delay, so Envoy
stops sending it checks, then finishes the checks in flight (--shutdown-timeout at most).

Admin endpoints (--admin-address): /healthz, /readyz, /metrics, /v1/limits.`,
		Example: `  # Beside a local xds serve, with the default key store file
  inferplane keys serve --secret-file /etc/inferplane/keys-secret
  inferplane xds serve --source file --endpoints-file endpoints.yaml --domain localhost \
      --key-check-address 127.0.0.1:18001 --usage-file usage.json

  # In the host cluster (gateway manifests runs it so)
  inferplane keys serve --namespace inferplane-system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := xdsLogger(cmd, logLevel, logFormat)
			if err != nil {
				return usageErr(err)
			}
			if sf.file != "" && sf.namespace != "" {
				return usageErr(errors.New("--store-file and --namespace choose different stores: pass one"))
			}
			if cfg.DrainDelay < 0 || cfg.ShutdownTimeout < 0 {
				return usageErr(errors.New("--drain-delay and --shutdown-timeout: want durations of 0 or more"))
			}
			if errs := lim.Validate(field.NewPath("limits")); len(errs) > 0 {
				return usageErr(flagErrors(errs, limitsFlags("limits."), ""))
			}
			cfg.Store = keycheck.Store{Namespace: sf.namespace}
			if sf.namespace == "" {
				cfg.Store.File = sf.file
				if cfg.Store.File == "" {
					cfg.Store.File = defaultKeysFile()
				}
			}
			path, kubeCtx := sf.kubeconfig, sf.context
			cfg.Kube = func() (*rest.Config, error) { return kubeconfig.Load(path, kubeCtx) }
			cfg.Logger = log
			cfg.SecretFile = secretFile(cfg.SecretFile)
			cfg.Extend = lim.KeyCheck()
			return keycheck.Run(cmd.Context(), cfg)
		},
	}
	sf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&cfg.SecretFile, "secret-file", "", secretFileUsage)
	fl.StringVar(&cfg.GRPCAddress, "grpc-address", keycheck.DefaultGRPCAddress, "address of the key check (gRPC: ext_authz and health)")
	fl.StringVar(&cfg.AdminAddress, "admin-address", keycheck.DefaultAdminAddress, "address of /healthz, /readyz and /metrics")
	fl.DurationVar(&cfg.DrainDelay, "drain-delay", keycheck.DefaultDrainDelay,
		"on SIGTERM, how long the key check keeps answering after it starts failing its health checks")
	fl.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", keycheck.DefaultShutdownTimeout, "how long in-flight checks may take to finish after the drain")
	fl.DurationVar(&cfg.StoreCheckInterval, "store-check-interval", 5*time.Second,
		"how often the host API server is checked (--namespace); a failing one is retried from 0.5s, doubling to 4s")
	registerLimitFlags(fl, &lim)
	fl.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}
