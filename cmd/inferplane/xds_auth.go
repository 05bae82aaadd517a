package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/auth/envoyfilters"
	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/usage"
	"github.com/inferplane/inferplane/xds"
)

// apiKeyFlags choose where `xds serve` reads API keys from and how Envoy reaches the key check
// and the access-log service, both served on the xDS server's own gRPC port.
type apiKeyFlags struct {
	file       string
	namespace  string
	secretFile string
	services   string
	disabled   bool
	usageFile  string
	usageEvery time.Duration
}

func (f *apiKeyFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "keys-file", "", "API key store file (bbolt), as `inferplane keys` writes it; default $"+envKeysFile+" or "+defaultKeysFile())
	fs.StringVar(&f.namespace, "keys-namespace", "", "read API keys from APIKey objects in this Kubernetes namespace instead of a file")
	fs.StringVar(&f.secretFile, "secret-file", "", "file holding the API key secret (default $"+keys.SecretEnv+")")
	fs.StringVar(&f.services, "services-address", "",
		"host:port at which Envoy reaches this server's gRPC port for key checks and access logs (default 127.0.0.1:<--grpc-address port>)")
	fs.StringVar(&f.usageFile, "usage-file", "",
		"file that keeps per-key usage across restarts (saved every --usage-save-interval and on shutdown); default next to --keys-file; with --keys-namespace give one on a volume of its own per server replica; - keeps usage in memory only")
	fs.DurationVar(&f.usageEvery, "usage-save-interval", 30*time.Second, "how often changed usage is saved to --usage-file")
	fs.BoolVar(&f.disabled, "insecure-no-api-keys", false,
		"serve without API key checks or usage accounting, even for jobs that require a key (local tests only)")
}

// replicaCounts feeds the xDS server's replica view into the endpoint health status; the
// controller exists only once the server has started.
type replicaCounts struct {
	ctrl atomic.Pointer[xds.Controller]
}

func (r *replicaCounts) Replicas() []usage.ReplicaCount {
	c := r.ctrl.Load()
	if c == nil {
		return nil
	}
	counts := c.ReplicaCounts()
	out := make([]usage.ReplicaCount, 0, len(counts))
	for _, e := range counts {
		out = append(out, usage.ReplicaCount{Tenant: e.Tenant, Job: e.Job, Ready: e.Serving, Total: e.Total})
	}
	return out
}

// wireAPIKeys adds API keys (ext_authz), usage accounting (access logs) and the endpoint health
// view to an xDS server configuration. kube is called only for a Kubernetes key store. The key
// index and the saved usage are loaded before this returns, so the server never starts with an
// empty key set or forgets usage. The returned finish saves the usage one last time: call it
// once the server has stopped.
func wireAPIKeys(ctx context.Context, cfg *xds.Config, f apiKeyFlags, kube func() (*rest.Config, error), log *slog.Logger) (finish func() error, err error) {
	finish = func() error { return nil }
	if f.disabled {
		log.Warn("API key checks are off (--insecure-no-api-keys): every endpoint is open")
		return finish, nil
	}
	if f.usageEvery <= 0 {
		return finish, usageErr(fmt.Errorf("--usage-save-interval %s: want a positive duration such as 30s", f.usageEvery))
	}
	secret, err := keys.LoadSecret(f.secretFile)
	if err != nil {
		return finish, err
	}
	hasher, err := keys.NewHasher(secret)
	if err != nil {
		return finish, err
	}
	var syncer keys.Syncer
	usageFile := f.usageFile
	switch {
	case f.namespace != "" && f.file != "":
		return finish, errors.New("--keys-file and --keys-namespace choose different key stores: pass one")
	case f.namespace != "":
		rc, err := kube()
		if err != nil {
			return finish, fmt.Errorf("kubernetes client configuration for --keys-namespace: %w", err)
		}
		syncer = &keys.KubeSyncer{Config: rc, Namespace: f.namespace}
	default:
		path := f.file
		if path == "" {
			path = defaultKeysFile()
		}
		syncer = &keys.FileSyncer{Store: keys.NewFileStore(path), Log: log}
		if usageFile == "" {
			usageFile = strings.TrimSuffix(path, filepath.Ext(path)) + ".usage.json"
		}
	}
	idx := keys.NewIndex()
	if err := syncer.Sync(ctx, idx); err != nil {
		return finish, fmt.Errorf("load API keys: %w", err)
	}

	services := f.services
	if services == "" {
		_, port, err := net.SplitHostPort(cfg.GRPCAddress)
		if err != nil {
			return finish, fmt.Errorf("--grpc-address %q: %w", cfg.GRPCAddress, err)
		}
		if port == "0" {
			return finish, errors.New("--services-address is needed when --grpc-address picks a free port (:0): Envoy must know where to reach the key check")
		}
		services = net.JoinHostPort("127.0.0.1", port)
	}
	filters, err := envoyfilters.New(envoyfilters.Config{Address: services})
	if err != nil {
		return finish, fmt.Errorf("--services-address: %w", err)
	}

	authz := extauthz.New(&keys.Verifier{Hasher: hasher, Index: idx}, log)
	counts := &replicaCounts{}
	agg := usage.NewAggregator(usage.Options{Replicas: counts})
	if usageFile != "" && usageFile != "-" {
		ledger := usage.LedgerFile{Path: usageFile}
		unlock, err := ledger.Lock()
		if err != nil {
			return finish, fmt.Errorf("--usage-file: %w", err)
		}
		l, err := ledger.Load()
		if err != nil {
			unlock()
			return finish, fmt.Errorf("--usage-file: %w", err)
		}
		agg.Restore(l)
		keepCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		kept := make(chan error, 1)
		go func() { kept <- usage.Keep(keepCtx, agg, ledger, f.usageEvery, log) }()
		finish = func() error {
			stop()
			defer unlock()
			return <-kept
		}
		log.Info("usage kept in a file", "file", usageFile, "keys", len(l.Keys), "every", f.usageEvery)
	} else {
		log.Warn("per-key usage is kept in memory only and is lost on restart: set --usage-file to keep it")
	}
	als := usage.NewService(agg, usage.HostResolver(cfg.Resources.Domain), log)

	cfg.Filters = filters
	cfg.GRPCServices = append(cfg.GRPCServices, func(s *grpc.Server) { authz.Register(s) }, func(s *grpc.Server) { als.Register(s) })
	if cfg.HTTPHandlers == nil {
		cfg.HTTPHandlers = map[string]http.Handler{}
	}
	cfg.HTTPHandlers["/v1/"] = usage.Handler(agg)
	if cfg.Registry == nil {
		cfg.Registry = xds.NewRegistry()
	}
	cfg.Registry.MustRegister(authz.Collectors()...)
	cfg.Registry.MustRegister(agg.Collector())
	started := cfg.Started
	cfg.Started = func(r xds.Running) {
		counts.ctrl.Store(r.Controller)
		if started != nil {
			started(r)
		}
	}
	log.Info("API keys on", "keys", idx.Len(), "services", services)
	return finish, nil
}
