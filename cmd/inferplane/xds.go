package main

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/gateway"
	"github.com/inferplane/inferplane/internal/kubeconfig"
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
		Example: `  inferplane xds serve --source clusters --domain inference.example.com
  inferplane xds bootstrap --xds-address 127.0.0.1:18000 --node-id envoy-0 --file envoy.yaml`,
	}
	cmd.AddCommand(newXDSServeCmd(), newXDSBootstrapCmd())
	return cmd
}

// xdsServeFlags are `xds serve`'s flags, turned into a gateway.Config by config.
type xdsServeFlags struct {
	cfg          gateway.Config
	logLevel     string
	logFormat    string
	listenerPort uint32
	maxEjectPct  uint32
	maxRequests  uint32
	streamIdle   time.Duration
	connect      time.Duration
	kubeconfig   string
	kubeCtx      string
	registry     registryFlags
	tlsSelector  string
	httpRedirect bool
}

func newXDSServeCmd() *cobra.Command {
	f := &xdsServeFlags{cfg: gateway.Config{XDS: xds.Config{
		Resources: resources.DefaultConfig(""),
		Health:    health.DefaultConfig(),
	}}}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the xDS server",
		Long: `serve runs the ADS server until SIGINT or SIGTERM, then stops gracefully.

Replica sources:
  --source kube      watches KubeVirt VirtualMachineInstances labelled app.kubernetes.io/
                     managed-by=inferplane, inferplane.io/serving=true (every node that answers
                     requests, each an endpoint of its job) in one cluster (--kubeconfig,
                     --context, $KUBECONFIG, in-cluster, ~/.kube/config).
  --source clusters  watches the VMIs of every tenant cluster: each tenant's own namespace in
                     the cluster its Argo CD cluster Secret (in --argocd-namespace) or its
                     vCluster kubeconfig Secret (vc-<name> in a --vcluster-namespace) names.
                     The Secrets are read from the cluster of --kubeconfig; a cluster is watched
                     from the moment its Secret appears, again when its credentials change, and
                     withdrawn when the Secret goes. One cluster failing keeps its last replicas
                     and holds up no other; it is retried until it answers, and its replicas
                     join within seconds. With --last-known-good-file its last replicas also
                     outlive a restart of this server (served stale, at most
                     --last-known-good-max-age).
  --source file      reads a YAML list of endpoints (--endpoints-file; see docs/xds.md) and reloads it on change;
                     a bad edit is reported and the last good content stays.

A replica is a candidate when its VMI is Running with an address; it takes traffic when its
Ready condition is true and its probes pass. If an API server is lost, its last known replicas
stay.

Health: every candidate's GET <probe-path> starts every --probe-interval. A replica seen for
the first time is decided by its first probe; afterwards --unhealthy-threshold failures in a row
take it out and --healthy-threshold successes in a row bring it back.

Admin endpoints (--admin-address): /healthz (alive), /readyz (a configuration is published;
its text names tenant clusters whose replicas are served stale), /metrics (Prometheus),
/debug/endpoints (every endpoint and replica with its state, JSON), and the usage and health
that keys usage and health read.

Listening: both servers listen on 127.0.0.1 only unless told otherwise, since the admin
address shows every endpoint and every key's usage and the gRPC address answers key checks.
Exposing them is a deliberate choice of --grpc-address and --admin-address: :18000 and :9090
listen on every interface (what the gateway's install manifests pass, so that Envoy, the
kubelet's probes and Prometheus reach the pod), an IP address on that one address.

Memory: the process honours Go's GOMEMLIMIT; docs/xds.md says how to size it.`,
		Example: `  # Local run: replicas from a file, Envoy on this machine
  inferplane xds serve --source file --endpoints-file endpoints.yaml --domain localhost
  inferplane xds bootstrap --xds-address 127.0.0.1:18000 --node-id envoy-0 --file envoy.yaml
  envoy -c envoy.yaml

  # In the host cluster: the VMIs of every tenant cluster Argo CD knows
  inferplane xds serve --source clusters --domain inference.example.com --keys-namespace inferplane-system

  # The install manifests of the whole gateway
  inferplane gateway manifests --domain inference.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config(cmd)
			if err != nil {
				return usageErr(err)
			}
			return gateway.Run(cmd.Context(), cfg)
		},
	}
	f.register(cmd.Flags())
	_ = cmd.MarkFlagRequired("domain")
	return cmd
}

func (f *xdsServeFlags) register(fs *pflag.FlagSet) {
	x, r, h, s := &f.cfg.XDS, &f.cfg.XDS.Resources, &f.cfg.XDS.Health, &f.cfg.Source
	fs.StringVar(&x.GRPCAddress, "grpc-address", "127.0.0.1:18000",
		"address of the ADS gRPC server, the key check and the access-log service (loopback only by default; :18000 listens on every interface)")
	fs.StringVar(&x.AdminAddress, "admin-address", "127.0.0.1:9090",
		"address of /healthz, /readyz, /metrics, /debug and the usage API (loopback only by default; :9090 listens on every interface)")
	fs.StringVar(&s.Kind, "source", gateway.SourceKube, "where replicas come from: "+strings.Join(gateway.Sources, ", "))
	fs.StringVar(&s.File, "endpoints-file", "", "YAML file of endpoints (--source file)")
	deprecatedAlias(fs, "file", "endpoints-file")
	fs.DurationVar(&s.FileInterval, "file-interval", time.Second, "how often the file is checked for changes")
	fs.StringSliceVar(&s.Namespaces, "watch-namespace", nil, "watch only these namespaces (--source kube; repeatable; default all)")
	deprecatedAlias(fs, "namespace", "watch-namespace")
	fs.BoolVar(&s.AllowForeignNamespace, "allow-foreign-namespace", false,
		"accept VMIs whose namespace differs from their tenant label (--source kube; off: such VMIs are skipped)")
	f.registry.register(fs, "--source clusters")
	fs.DurationVar(&s.ClusterSyncTimeout, "cluster-sync-timeout", 10*time.Second,
		"how long the first configuration waits for every tenant cluster to be read (--source clusters)")
	fs.DurationVar(&s.ClusterCheckInterval, "cluster-check-interval", discovery.DefaultCheckInterval,
		"how often each tenant cluster's API server is checked while it answers; a failing one is retried from 0.5s, doubling to 4s (--source clusters)")
	fs.DurationVar(&s.ClusterCheckTimeout, "cluster-check-timeout", discovery.DefaultCheckTimeout,
		"how long one check of a tenant cluster waits for an answer: a hung API server is noticed within the interval plus this (--source clusters)")
	fs.StringVar(&s.LastKnownGood, "last-known-good-file", "",
		"file that keeps each tenant cluster's last replica set across restarts, served (still probed, reported stale) while the cluster cannot be read (--source clusters; put it on the server's own volume)")
	fs.DurationVar(&s.LastKnownGoodMaxAge, "last-known-good-max-age", discovery.DefaultMaxStaleAge,
		"how long a tenant cluster's last replicas are served after the cluster last answered; older ones are withheld (--source clusters)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&f.kubeCtx, "context", "", "kubeconfig context (default: the current one)")
	addDomainFlag(fs, &r.Domain, true)
	fs.StringVar(&r.ListenerAddress, "listener-address", r.ListenerAddress, "address Envoy accepts client traffic on")
	fs.Uint32Var(&f.listenerPort, "listener-port", r.ListenerPort, "port Envoy accepts client traffic on (HTTP/1.1 and HTTP/2)")
	fs.StringSliceVar(&f.cfg.TLS.Namespaces, "tls-secret-namespace", nil,
		"terminate TLS with the kubernetes.io/tls Secrets of this namespace (repeatable; none: plain HTTP only)")
	fs.StringVar(&f.tlsSelector, "tls-secret-selector", "", "label selector of the TLS Secrets to read")
	fs.Uint32Var(&r.TLSListenerPort, "tls-listener-port", r.TLSListenerPort, "port Envoy terminates TLS on, for the endpoints a certificate covers")
	fs.BoolVar(&f.httpRedirect, "http-redirect", true, "answer plain HTTP to an endpoint served on TLS with a redirect to HTTPS (false: serve it on both)")
	fs.DurationVar(&f.streamIdle, "stream-idle-timeout", r.StreamIdleTimeout,
		"reset a request after this long without a byte either way (there is no overall request timeout, so SSE streams are not cut)")
	fs.DurationVar(&f.connect, "connect-timeout", r.ConnectTimeout, "timeout of Envoy's connections to a replica")
	fs.Uint32Var(&f.maxRequests, "max-requests", r.MaxRequests, "circuit breaker: concurrent and pending requests per endpoint")
	fs.Uint32Var(&f.maxEjectPct, "max-ejection-percent", r.MaxEjectionPercent, "outlier detection: most replicas of an endpoint Envoy may eject (%)")
	fs.StringVar(&h.Path, "probe-path", h.Path, "health path probed on each replica")
	fs.DurationVar(&h.Interval, "probe-interval", h.Interval, "time between the starts of two probes of a replica")
	fs.DurationVar(&h.Timeout, "probe-timeout", h.Timeout, "timeout of one probe")
	fs.IntVar(&h.UnhealthyThreshold, "unhealthy-threshold", h.UnhealthyThreshold, "failed probes in a row that take a replica out")
	fs.IntVar(&h.HealthyThreshold, "healthy-threshold", h.HealthyThreshold, "passed probes in a row that bring a replica back")
	fs.DurationVar(&x.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight RPCs may take to finish after SIGINT or SIGTERM")
	registerAPIKeyFlags(fs, &f.cfg.APIKeys)
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
}

// registerAPIKeyFlags are the flags of the key store, the usage ledger and where Envoy reaches
// the key check.
func registerAPIKeyFlags(fs *pflag.FlagSet, k *gateway.APIKeys) {
	fs.StringVar(&k.File, "keys-file", "", "API key store file (bbolt) that the keys commands write; default $"+envKeysFile+" or "+defaultKeysFile())
	fs.StringVar(&k.Namespace, "keys-namespace", "", "read API keys from APIKey objects in this Kubernetes namespace instead of a file")
	fs.StringVar(&k.SecretFile, "secret-file", "", secretFileUsage)
	fs.StringVar(&k.ServicesAddress, "services-address", "",
		"host:port at which Envoy reaches this server's gRPC port for key checks and access logs (default 127.0.0.1:<--grpc-address port>)")
	fs.StringSliceVar(&k.KeyChecks, "key-check-address", nil,
		"host:port of the key check processes (inferplane keys serve; repeatable; a name stands for every address it resolves to, e.g. a headless Service): Envoy's checks go there, and this server needs no secret (it reads the key store for the keys' limits only)")
	fs.StringVar(&k.UsageFile, "usage-file", "",
		"file that keeps per-key usage across restarts (saved every --usage-save-interval and on shutdown); default next to --keys-file; with --keys-namespace give one on a volume of its own per server replica; - keeps usage in memory only")
	fs.DurationVar(&k.UsageSaveInterval, "usage-save-interval", 30*time.Second, "how often changed usage is saved to --usage-file")
	fs.BoolVar(&k.Disabled, "insecure-no-api-keys", false,
		"serve without API key checks or usage accounting, even for jobs that require a key (local tests only)")
	registerLimitFlags(fs, &k.Limits)
}

// registerLimitFlags are the flags of the rate limits and token budgets (docs/keys.md, Limits).
func registerLimitFlags(fs *pflag.FlagSet, l *gateway.Limits) {
	fs.StringVar(&l.Redis, "limits-redis", "",
		"host:port of the Redis every gateway replica shares for rate limits and token budgets (password: $"+gateway.RedisPasswordEnv+"); default: counted in this process only")
	fs.StringVar(&l.TenantsDir, "limits-tenants", "", limitsTenantsUsage+"; or the flat folder gateway manifests mounts (<tenant>.yaml, tier.<tier>.yaml); reloaded on change")
	fs.DurationVar(&l.TenantsInterval, "limits-tenants-interval", 10*time.Second, "how often --limits-tenants is checked for changes")
	fs.DurationVar(&l.Grace, "limits-grace", 30*time.Second,
		"how long the last counts are enforced while Redis is unreachable, before each tenant's onStoreDown (open or closed) applies")
	fs.DurationVar(&l.FlushInterval, "limits-flush-interval", 100*time.Millisecond, "how often counted tokens reach Redis and the shared counts are read back")
	fs.DurationVar(&l.Timeout, "limits-timeout", 100*time.Millisecond, "bound of a call to Redis on the key check's path; past it the replica decides from the counts it knows")
	fs.DurationVar(&l.MaxStale, "limits-max-stale", 2*time.Second, "how old a replica's view of a key's shared token count may be before a check reads it from Redis")
	fs.BoolVar(&l.PerKeyMetrics, "limits-per-key-metrics", false, "add a key_id label to the limited-requests metric (one series per limited key)")
}

// config checks the flags and turns them into the gateway's configuration; every error names
// the flag.
func (f *xdsServeFlags) config(cmd *cobra.Command) (gateway.Config, error) {
	cfg := f.cfg
	log, err := xdsLogger(cmd, f.logLevel, f.logFormat)
	if err != nil {
		return cfg, err
	}
	cfg.XDS.Logger = log
	r := &cfg.XDS.Resources
	r.ListenerPort, r.MaxEjectionPercent = f.listenerPort, f.maxEjectPct
	r.MaxRequests, r.MaxPendingRequests = f.maxRequests, f.maxRequests
	r.StreamIdleTimeout, r.ConnectTimeout = f.streamIdle, f.connect
	r.KeepPlainHTTP = !f.httpRedirect
	if f.tlsSelector != "" {
		sel, err := labels.Parse(f.tlsSelector)
		if err != nil {
			return cfg, fmt.Errorf("--tls-secret-selector %q: %w", f.tlsSelector, err)
		}
		cfg.TLS.Selector = sel
	}
	path, kubeCtx := f.kubeconfig, f.kubeCtx
	cfg.Kube = func() (*rest.Config, error) { return kubeconfig.Load(path, kubeCtx) }
	cfg.APIKeys.DefaultFile = defaultKeysFile()
	cfg.APIKeys.SecretFile = secretFile(cfg.APIKeys.SecretFile)
	if cfg.Source.Clusters, err = f.registry.options(); err != nil {
		return cfg, err
	}
	if errs := cfg.Check(); len(errs) > 0 {
		return cfg, flagErrors(errs, gatewayFlags, "")
	}
	return cfg, nil
}

// limitsFlags name the flag of each setting of gateway.Limits.Validate under prefix.
func limitsFlags(prefix string) map[string]string {
	return map[string]string{prefix + "grace": "--limits-grace", prefix + "flushInterval": "--limits-flush-interval",
		prefix + "tenantsInterval": "--limits-tenants-interval", prefix + "timeout": "--limits-timeout",
		prefix + "maxStale": "--limits-max-stale"}
}

// gatewayFlags name the flag of each setting of gateway.Config.Check.
var gatewayFlags = func() map[string]string {
	m := limitsFlags("apiKeys.limits.")
	maps.Copy(m, map[string]string{
		"xds.resources": "--domain/--listener-*", "xds.health": "--probe-*",
		"source.kind": "--source", "source.file": "--endpoints-file", "source.namespaces": "--watch-namespace/--allow-foreign-namespace",
		"source.clusters":            "--argocd-namespace/--vcluster-namespace",
		"source.lastKnownGood":       "--last-known-good-file",
		"source.lastKnownGoodMaxAge": "--last-known-good-max-age",
		"source.clusterCheckTimeout": "--cluster-check-timeout",
		"apiKeys.usageSaveInterval":  "--usage-save-interval",
		"apiKeys.namespace":          "--keys-namespace",
		"apiKeys.servicesAddress":    "--services-address",
		"apiKeys.secretFile":         "--secret-file",
	})
	return m
}()

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
Every Envoy needs its own --node-id (the server counts connected nodes by it). Envoy's own
--service-node flag overrides it, so one bootstrap in a ConfigMap serves every pod of a
Deployment (envoy -c envoy.yaml --service-node "$POD_NAME").

The default protocol is delta xDS: in state of the world, every endpoint ACK lists every
cluster the Envoy has, so with thousands of endpoints each replica change costs every Envoy
a large request; see docs/xds.md for the measured difference.`,
		Example: `  inferplane xds bootstrap --xds-address inferplane-xds.inferplane.svc:18000 --node-id "$POD_NAME" --file /etc/envoy/envoy.yaml
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
			return writeOut(cmd, output, y, 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.XDSAddress, "xds-address", "127.0.0.1:18000", "the xDS server's gRPC address (host:port; a name is resolved by DNS)")
	f.StringVar(&opts.NodeID, "node-id", host, "this Envoy's node id, unique per Envoy")
	f.StringVar(&opts.NodeCluster, "node-cluster", "inferplane-gateway", "the Envoy fleet's name")
	f.StringVar(&opts.AdminAddress, "envoy-admin-address", "127.0.0.1:9901", "Envoy's admin interface (IP:port; keep it on loopback)")
	deprecatedAlias(f, "admin-address", "envoy-admin-address")
	f.Int64Var(&opts.MaxConnections, "max-connections", 50000, "cap on client connections across all listeners")
	f.StringVar(&api, "api", "delta", "xDS protocol: delta (incremental: a replica's change costs the same whatever the number of endpoints) or sotw (state of the world)")
	addFileFlag(cmd, &output)
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

// limitsTenantsUsage is --limits-tenants' meaning wherever it is a flag (xds serve reads the
// folder, gateway manifests mounts it from ConfigMaps for the xDS servers).
const limitsTenantsUsage = "tenants folder whose <tenant>/tenant.yaml spec.limits cap each tenant's keys together (and whose provider tenants' endpoints take the keys of tenants whose catalogue offers their model)"
