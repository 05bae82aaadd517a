package main

import (
	"errors"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/kubeconfig"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/metering"
)

func newMeterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "meter",
		Short: "The GPU meter: GPU-seconds per VM and hour, and the keys' tokens, as usage records",
		Long: `The meter records what a tenant is billed for (docs/business.md, Metering): the GPU-seconds
each of its VMs holds GPUs, from the phases of its KubeVirt VMIs in every tenant cluster, and
the tokens each of its API keys spends, from the gateways. It runs as one process of its own in
the host cluster (one writer of its records), beside the gateway; api serve --meter reads it.`,
		Example: `  inferplane meter serve --dir /var/lib/inferplane/meter --server http://inferplane-gateway-xds:9090`,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newMeterServeCmd())
	return cmd
}

func newMeterServeCmd() *cobra.Command {
	var (
		cfg                 metering.Config
		admin               string
		regFlags            registryFlags
		kubePath, kubeCtx   string
		logLevel, logFormat string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the meter",
		Long: `serve runs the meter until SIGINT or SIGTERM, then writes its last records and checkpoint.

It reads the cluster registry of the host cluster (--kubeconfig, --context, $KUBECONFIG,
in-cluster: the same Argo CD cluster Secrets and vCluster kubeconfig Secrets as xds serve
--source clusters) and watches the VMIs of every tenant cluster. A VMI's GPUs are held from its
first Scheduled or Running transition to its Succeeded or Failed one (KubeVirt's own timestamps),
or to its deletion. While it holds them the meter puts its finalizer
(metering.inferplane.io/gpu-time) on it, so a VMI deleted while the meter is down stays until
the meter has recorded its end (--no-hold: recorded up to when it was last seen instead).

Records go to --dir (a volume of the meter's own; one meter a folder): CloudEvents JSON lines,
one per VM and UTC hour, in the shape OpenMeter ingests, beside a checkpoint that makes a restart
lose and repeat nothing. A running VM's hour is recorded once the hour ends (plus --settle);
every --interval the clusters are looked at in full and the records written. With --server, the
keys' token counts of each hour are read from every gateway replica and recorded too.

Admin endpoints (--admin-address): /healthz, /readyz (every tenant cluster read once),
/metrics (inferplane_meter_gpu_seconds_total, inferplane_meter_tokens_total, ...),
/v1/meter/usage?tenant=T&from=&to=&groupBy= (a usage answer), /v1/meter/events?tenant=&from=&to=
(the records, CloudEvents JSON lines: the export), /v1/meter/vmis (what the meter accounts for).`,
		Example: `  # In the host cluster, beside the gateway (its admin addresses give the tokens)
  inferplane meter serve --dir /var/lib/inferplane/meter --admin-address :9095 \
      --server http://inferplane-gateway-xds-0.inferplane-gateway-xds:9090 \
      --server http://inferplane-gateway-xds-1.inferplane-gateway-xds:9090

  # The API reads the meter for its usage route, the CLI and the console
  inferplane api serve ... --meter http://inferplane-meter:9095

  # Export a month's records to OpenMeter's collector (JSON lines)
  curl -s 'http://127.0.0.1:9095/v1/meter/events?from=2026-05-01T00:00:00Z&to=2026-06-01T00:00:00Z' > may.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := xdsLogger(cmd, logLevel, logFormat)
			if err != nil {
				return usageErr(err)
			}
			if cfg.Dir == "" {
				return usageErr(errors.New("--dir is required: the meter's records and checkpoint"))
			}
			if cfg.Interval < 0 || cfg.Retention < 0 || cfg.TokenDelay < 0 {
				return usageErr(errors.New("--interval, --retention and --token-delay: want durations of 0 or more"))
			}
			opts, err := regFlags.options()
			if err == nil {
				err = opts.Validate()
			}
			if err != nil {
				return usageErr(err)
			}
			host, err := kubeconfig.Load(kubePath, kubeCtx)
			if err != nil {
				return err
			}
			ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
			cfg.Registry = &registry.Registry{Config: host, Options: opts, Logger: log}
			cfg.Logger = log
			if gw := cmd.Flags().Lookup("server"); gw.Changed {
				urls, _ := cmd.Flags().GetStringArray("server")
				cfg.Tokens = metering.Gateways{URLs: urls}
			}
			return metering.Serve(cmd.Context(), cfg, admin, serve.HTTP{})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Dir, "dir", "", "folder of the records and the checkpoint, on a volume of the meter's own (required)")
	fl.StringVar(&admin, "admin-address", metering.DefaultAdminAddress, "address of /healthz, /readyz, /metrics and /v1/meter/* (loopback only by default; :9095 listens on every interface)")
	fl.StringArray("server", nil, "the gateway: base URL of the xDS server's admin address; repeat it for each server replica (the keys' token counts are summed and recorded; one that cannot be read delays the hour's records, never halves them)")
	fl.StringVar(&cfg.Source, "event-source", metering.DefaultSource, "the records' CloudEvents source (OpenMeter deduplicates by source and id)")
	fl.DurationVar(&cfg.Interval, "interval", 30*time.Second, "how often every tenant cluster is looked at in full and the records written")
	fl.DurationVar(&cfg.Settle, "settle", time.Minute, "how long a running VM's time waits before it is recorded (KubeVirt writes a stop seconds after it happens)")
	fl.DurationVar(&cfg.Retention, "retention", 93*24*time.Hour, "how long records are kept in --dir")
	fl.DurationVar(&cfg.TokenDelay, "token-delay", 5*time.Minute, "how long after an hour ends its token counts are read from the gateways")
	fl.BoolVar(&cfg.NoHold, "no-hold", false, "put no finalizer on the VMIs (and take the meter's off): a VMI deleted while the meter is down is recorded up to when it was last seen")
	regFlags.register(fl, "the tenant clusters")
	fl.StringVar(&kubePath, "kubeconfig", "", "kubeconfig file of the host cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fl.StringVar(&kubeCtx, "context", "", "kubeconfig context of the host cluster (default: the current one)")
	fl.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}
