package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/bootstrap"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/resources"
)

func newXDSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "xds",
		Short: "Feed Envoy the healthy replicas of every endpoint (ADS server, Envoy bootstrap)",
		Long: `xds runs inferplane's xDS server and prints the Envoy bootstrap that points at it.

The server discovers every job's replicas (KubeVirt VMIs labelled by the generator, or a YAML
file), probes each replica's /health, and serves Envoy over ADS (state of the world and delta):
one listener, a virtual host per endpoint <job>.<tenant>.<domain> that allows only the OpenAI
paths its runtime serves, and a round-robin cluster per job whose endpoints are the replicas
that are up. See docs/xds.md.`,
	}
	cmd.AddCommand(newXDSServeCmd(), newXDSBootstrapCmd())
	return cmd
}

func newXDSServeCmd() *cobra.Command {
	var (
		cfg = xds.Config{
			Resources: resources.DefaultConfig(""),
			Health:    health.DefaultConfig(),
		}
		source        string
		file          string
		fileInterval  time.Duration
		namespaces    []string
		foreignNS     bool
		logLevel      string
		logFormat     string
		listenerPort  uint32
		maxEjectPct   uint32
		maxRequests   uint32
		streamIdle    time.Duration
		connectTimout time.Duration
		apiKeys       apiKeyFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the xDS server",
		Long: `serve runs the ADS server until SIGINT or SIGTERM, then stops gracefully.

Replica sources:
  --source kube   watches KubeVirt VirtualMachineInstances labelled app.kubernetes.io/managed-by=
                  inferplane, inferplane.io/serving=true (kubeconfig: --kubeconfig, $KUBECONFIG,
                  in-cluster, ~/.kube/config): every node that answers requests, each an
                  endpoint of its job. A replica is a candidate when its VMI is Running
                  with an IP; it takes traffic when its Ready condition is true and its probes
                  pass. If the API server is lost, the last known replicas stay.
  --source file   reads a YAML list of endpoints (see docs/xds.md) and reloads it on change; a
                  bad edit is logged and the last good content stays.

Health: every candidate's GET <probe-path> runs each --probe-interval. A replica seen for the
first time is decided by its first probe; afterwards --unhealthy-threshold failures in a row
take it out and --healthy-threshold successes in a row bring it back.

Admin endpoints (--admin-address): /healthz (alive), /readyz (a configuration is published),
/metrics (Prometheus), /debug/endpoints (every endpoint and replica with its state, JSON).

Memory: the process honours Go's GOMEMLIMIT. Its peak comes from a fleet of Envoys syncing at
once; with 10,000 endpoints and 100 Envoys, GOMEMLIMIT=150MiB kept the peak RSS under 180 MiB
at no measured cost in latency (docs/xds.md, Figures).`,
		Example: `  # Local run: replicas from a file, Envoy on this machine
  inferplane xds serve --source file --file endpoints.yaml --domain localhost
  inferplane xds bootstrap --xds-address 127.0.0.1:18000 --node-id envoy-0 > envoy.yaml
  envoy -c envoy.yaml

  # In a cluster: watch the VMIs of every tenant
  inferplane xds serve --domain inference.example.com --grpc-address :18000 --admin-address :9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := xdsLogger(cmd, logLevel, logFormat)
			if err != nil {
				return usageErr(err)
			}
			cfg.Logger = log
			cfg.Resources.ListenerPort = listenerPort
			cfg.Resources.MaxEjectionPercent = maxEjectPct
			cfg.Resources.MaxRequests = maxRequests
			cfg.Resources.MaxPendingRequests = maxRequests
			cfg.Resources.StreamIdleTimeout = streamIdle
			cfg.Resources.ConnectTimeout = connectTimout
			if err := cfg.Resources.Validate(); err != nil {
				return usageErr(fmt.Errorf("--domain/--listener-*: %w", err))
			}
			if err := cfg.Health.Validate(); err != nil {
				return usageErr(fmt.Errorf("--probe-*: %w", err))
			}
			switch source {
			case "file":
				if file == "" {
					return usageErr(errors.New("--source file needs --file"))
				}
				cfg.Source = &discovery.File{Path: file, Interval: fileInterval, Logger: log}
			case "kube":
				if file != "" {
					return usageErr(errors.New("--file is for --source file"))
				}
				rc, err := ctrlconfig.GetConfig()
				if err != nil {
					return fmt.Errorf("kubernetes client configuration: %w", err)
				}
				rc.UserAgent = "inferplane-xds"
				cfg.Source = &discovery.Kube{Config: rc, Namespaces: namespaces, AllowForeignNamespace: foreignNS, Logger: log}
			default:
				return usageErr(fmt.Errorf("--source %q: expected kube or file", source))
			}
			finish, err := wireAPIKeys(cmd.Context(), &cfg, apiKeys, ctrlconfig.GetConfig, log)
			if err != nil {
				return err
			}
			err = xds.Serve(cmd.Context(), cfg)
			return errors.Join(err, finish())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.GRPCAddress, "grpc-address", ":18000", "address of the ADS gRPC server")
	f.StringVar(&cfg.AdminAddress, "admin-address", ":9090", "address of /healthz, /readyz, /metrics and /debug/endpoints")
	f.StringVar(&source, "source", "kube", "where replicas come from: kube (KubeVirt VMIs) or file")
	f.StringVar(&file, "file", "", "YAML file of endpoints (--source file)")
	f.DurationVar(&fileInterval, "file-interval", time.Second, "how often the file is checked for changes")
	f.StringSliceVar(&namespaces, "namespace", nil, "watch only these namespaces (repeatable; default all)")
	f.BoolVar(&foreignNS, "allow-foreign-namespace", false,
		"accept VMIs whose namespace differs from their tenant label (off: such VMIs are skipped)")
	f.StringVar(&cfg.Resources.Domain, "domain", "", "endpoint host names are <job>.<tenant>.<domain> (required)")
	f.StringVar(&cfg.Resources.ListenerAddress, "listener-address", cfg.Resources.ListenerAddress, "address Envoy accepts client traffic on")
	f.Uint32Var(&listenerPort, "listener-port", cfg.Resources.ListenerPort, "port Envoy accepts client traffic on (HTTP/1.1 and HTTP/2)")
	f.DurationVar(&streamIdle, "stream-idle-timeout", cfg.Resources.StreamIdleTimeout,
		"reset a request after this long without a byte either way (there is no overall request timeout, so SSE streams are not cut)")
	f.DurationVar(&connectTimout, "connect-timeout", cfg.Resources.ConnectTimeout, "timeout of Envoy's connections to a replica")
	f.Uint32Var(&maxRequests, "max-requests", cfg.Resources.MaxRequests, "circuit breaker: concurrent and pending requests per endpoint")
	f.Uint32Var(&maxEjectPct, "max-ejection-percent", cfg.Resources.MaxEjectionPercent, "outlier detection: most replicas of an endpoint Envoy may eject (%)")
	f.StringVar(&cfg.Health.Path, "probe-path", cfg.Health.Path, "health path probed on each replica")
	f.DurationVar(&cfg.Health.Interval, "probe-interval", cfg.Health.Interval, "time between two probes of a replica")
	f.DurationVar(&cfg.Health.Timeout, "probe-timeout", cfg.Health.Timeout, "timeout of one probe")
	f.IntVar(&cfg.Health.UnhealthyThreshold, "unhealthy-threshold", cfg.Health.UnhealthyThreshold, "failed probes in a row that take a replica out")
	f.IntVar(&cfg.Health.HealthyThreshold, "healthy-threshold", cfg.Health.HealthyThreshold, "passed probes in a row that bring a replica back")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight RPCs get to finish on shutdown")
	apiKeys.register(f)
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	// controller-runtime's standard --kubeconfig flag.
	if kf := flag.CommandLine.Lookup(ctrlconfig.KubeconfigFlagName); kf != nil {
		f.AddGoFlag(kf)
	}
	_ = cmd.MarkFlagRequired("domain")
	return cmd
}

func newXDSBootstrapCmd() *cobra.Command {
	var (
		opts   bootstrap.Options
		api    string
		output string
	)
	host, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Print an Envoy bootstrap that takes its configuration from the xDS server",
		Long: `bootstrap prints an Envoy bootstrap (YAML, for envoy -c): the node's id and cluster, one
static cluster for the xDS server (HTTP/2 with keepalives), ADS over gRPC for listeners,
clusters, routes and endpoints, an admin interface on loopback and a cap on client connections.
Every Envoy needs its own --node-id (the server keeps a snapshot per node).

The default protocol is delta xDS: in state of the world, every endpoint ACK lists every
cluster the Envoy has, so with thousands of endpoints each replica change costs every Envoy
a large request; see docs/xds.md for the measured difference.`,
		Example: `  inferplane xds bootstrap --xds-address inferplane-xds.inferplane.svc:18000 --node-id "$POD_NAME" > /etc/envoy/envoy.yaml
  envoy -c /etc/envoy/envoy.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch api {
			case "sotw":
			case "delta":
				opts.Delta = true
			default:
				return usageErr(fmt.Errorf("--api %q: expected sotw or delta", api))
			}
			y, err := bootstrap.YAML(opts)
			if err != nil {
				return usageErr(err)
			}
			if output == "" || output == "-" {
				_, err = cmd.OutOrStdout().Write(y)
				return err
			}
			return os.WriteFile(output, y, 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.XDSAddress, "xds-address", "127.0.0.1:18000", "the xDS server's gRPC address (host:port; a name is resolved by DNS)")
	f.StringVar(&opts.NodeID, "node-id", host, "this Envoy's node id, unique per Envoy (default: the host name)")
	f.StringVar(&opts.NodeCluster, "node-cluster", "inferplane-gateway", "the Envoy fleet's name")
	f.StringVar(&opts.AdminAddress, "admin-address", "127.0.0.1:9901", "Envoy's admin interface (IP:port; keep it on loopback)")
	f.Int64Var(&opts.MaxConnections, "max-connections", 50000, "cap on client connections across all listeners")
	f.StringVar(&api, "api", "delta", "xDS protocol: delta (incremental: a replica's change costs the same whatever the number of endpoints) or sotw (state of the world)")
	f.StringVarP(&output, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

// xdsLogger builds the process's logger on stderr.
func xdsLogger(cmd *cobra.Command, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: expected debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: expected text or json", format)
}

// xdsUsageErr marks bad flags or input: exit status 2.
