package gateway

import (
	"cmp"
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

	"google.golang.org/grpc"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/auth/envoyfilters"
	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/gateway/keycheck"
	"github.com/inferplane/inferplane/usage"
	"github.com/inferplane/inferplane/xds"
)

// APIKeys says where the gateway reads API keys from, where it keeps per-key usage, and how
// Envoy reaches the key check and the access-log service (both served on the xDS server's own
// gRPC port).
type APIKeys struct {
	// Disabled serves without key checks or usage accounting, even for jobs that require a
	// key (local tests only).
	Disabled bool
	// File is the bbolt key store `inferplane keys` writes (default DefaultFile); Namespace
	// reads APIKey objects of that namespace instead. One of the two.
	File        string
	DefaultFile string
	Namespace   string
	// SecretFile holds the key secret; empty: $INFERPLANE_KEYS_SECRET.
	SecretFile string
	// ServicesAddress is host:port at which Envoy reaches this process's gRPC port; empty:
	// 127.0.0.1 and the port of the xDS server's gRPC address (Envoy on the same machine).
	ServicesAddress string
	// KeyChecks are host:port of the key check processes (`inferplane keys serve`, package
	// gateway/keycheck). When set, Envoy's checks go to them and this process checks no key
	// itself: it reads no key store and needs no secret (usage is still counted here).
	KeyChecks []string
	// UsageFile keeps per-key usage across restarts (default: next to the key store file;
	// none with Namespace); "-" keeps it in memory only.
	UsageFile         string
	UsageSaveInterval time.Duration
}

// Validate checks what can be checked before anything starts.
func (k APIKeys) Validate() error {
	if k.Disabled {
		return nil
	}
	if k.UsageSaveInterval <= 0 {
		return fmt.Errorf("usage save interval %s: want a positive duration such as 30s", k.UsageSaveInterval)
	}
	if k.Namespace != "" && k.File != "" {
		return errors.New("a key store file and a key store namespace choose different stores: give one")
	}
	if len(k.KeyChecks) > 0 && (k.Namespace != "" || k.File != "" || k.SecretFile != "") {
		return errors.New("with key check processes of their own, the xDS server reads no key store and no secret: give neither")
	}
	return nil
}

// lateReplicas is the usage view's replica source: the xDS server's controller, which exists
// only once the server has started.
type lateReplicas struct {
	ctrl atomic.Pointer[xds.Controller]
}

func (l *lateReplicas) EachReplicaCount(f func(tenant, job string, ready, total int)) {
	if c := l.ctrl.Load(); c != nil {
		c.EachReplicaCount(f)
	}
}

// wireAPIKeys adds API keys (ext_authz), usage accounting (access logs) and the endpoint health
// view to an xDS server configuration. kube is called only for a Kubernetes key store. The key
// index and the saved usage are loaded before this returns, so the server never starts with an
// empty key set or forgets usage. The returned finish saves the usage one last time: call it
// once the server has stopped.
func wireAPIKeys(ctx context.Context, cfg *xds.Config, k APIKeys, kube func() (*rest.Config, error), log *slog.Logger) (finish func() error, err error) {
	finish = func() error { return nil }
	if k.Disabled {
		log.Warn("API key checks are off: every endpoint is open")
		return finish, nil
	}
	if err := k.Validate(); err != nil {
		return finish, err
	}
	services, err := servicesAddress(k.ServicesAddress, cfg.GRPCAddress)
	if err != nil {
		return finish, err
	}
	filters, err := envoyfilters.New(envoyfilters.Config{Address: services, KeyChecks: k.KeyChecks, MaxRequests: cfg.Resources.MaxRequests})
	if err != nil {
		return finish, fmt.Errorf("services address: %w", err)
	}
	var authz *extauthz.Server
	usageFile, keyCount := k.UsageFile, 0
	if len(k.KeyChecks) == 0 {
		authz, usageFile, err = keyCheck(ctx, k, kube, log)
		if err != nil {
			return finish, err
		}
		keyCount = authz.Verifier.Index.Len()
	}
	replicas := &lateReplicas{}
	agg := usage.NewAggregator(usage.Options{Replicas: replicas})
	finish, err = keepUsage(ctx, agg, usageFile, k.UsageSaveInterval, log)
	if err != nil {
		return func() error { return nil }, err
	}
	als := usage.NewService(agg, usage.HostResolver(cfg.Resources.Domain), log)

	cfg.Filters = filters
	if cfg.Registry == nil {
		cfg.Registry = xds.NewRegistry()
	}
	cfg.GRPCServices = append(cfg.GRPCServices, func(s *grpc.Server) { als.Register(s) })
	if authz != nil {
		cfg.GRPCServices = append(cfg.GRPCServices, func(s *grpc.Server) { authz.Register(s) })
		cfg.Registry.MustRegister(authz.Collectors()...)
	}
	if cfg.HTTPHandlers == nil {
		cfg.HTTPHandlers = map[string]http.Handler{}
	}
	cfg.HTTPHandlers["/v1/"] = usage.Handler(agg)
	cfg.Registry.MustRegister(agg.Collector())
	started := cfg.Started
	cfg.Started = func(r xds.Running) {
		replicas.ctrl.Store(r.Controller)
		if started != nil {
			started(r)
		}
	}
	if authz == nil {
		log.Info("API keys on, checked by the key check processes", "keyChecks", k.KeyChecks, "usage", services)
	} else {
		log.Info("API keys on", "keys", keyCount, "services", services)
	}
	return finish, nil
}

// keyCheck is the key check served in this process: the secret, and the key store read into
// an index that follows its changes. It says which usage file goes with the store ("" for
// none).
func keyCheck(ctx context.Context, k APIKeys, kube func() (*rest.Config, error), log *slog.Logger) (*extauthz.Server, string, error) {
	secret, err := keys.LoadSecret(k.SecretFile)
	if err != nil {
		return nil, "", err
	}
	hasher, err := keys.NewHasher(secret)
	if err != nil {
		return nil, "", err
	}
	store := keycheck.Store{Namespace: k.Namespace}
	usageFile := k.UsageFile
	if k.Namespace == "" {
		store.File = cmp.Or(k.File, k.DefaultFile)
		if usageFile == "" && store.File != "" {
			usageFile = strings.TrimSuffix(store.File, filepath.Ext(store.File)) + ".usage.json"
		}
	}
	if err := store.Validate(); err != nil {
		return nil, "", err
	}
	syncer, _, err := store.Syncer(kube, log)
	if err != nil {
		return nil, "", err
	}
	idx := keys.NewIndex()
	if err := syncer.Sync(ctx, idx); err != nil {
		return nil, "", fmt.Errorf("load API keys: %w", err)
	}
	return extauthz.New(&keys.Verifier{Hasher: hasher, Index: idx}, log), usageFile, nil
}

// servicesAddress is where Envoy reaches the key check and the access-log service.
func servicesAddress(services, grpcAddress string) (string, error) {
	if services != "" {
		return services, nil
	}
	_, port, err := net.SplitHostPort(grpcAddress)
	if err != nil {
		return "", fmt.Errorf("gRPC address %q: %w", grpcAddress, err)
	}
	if port == "0" {
		return "", errors.New("a services address is needed when the gRPC address picks a free port (:0): Envoy must know where to reach the key check")
	}
	return net.JoinHostPort("127.0.0.1", port), nil
}

// keepUsage restores the usage ledger into agg and saves it every interval until the returned
// finish is called (once the server has stopped); without a file, usage lives in memory.
func keepUsage(ctx context.Context, agg *usage.Aggregator, file string, every time.Duration, log *slog.Logger) (finish func() error, err error) {
	if file == "" || file == "-" {
		log.Warn("per-key usage is kept in memory only and is lost on restart: set a usage file to keep it")
		return func() error { return nil }, nil
	}
	ledger := usage.LedgerFile{Path: file}
	unlock, err := ledger.Lock()
	if err != nil {
		return nil, fmt.Errorf("usage file: %w", err)
	}
	l, err := ledger.Load()
	if err != nil {
		unlock()
		return nil, fmt.Errorf("usage file: %w", err)
	}
	agg.Restore(l)
	keepCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	kept := make(chan error, 1)
	go func() { kept <- usage.Keep(keepCtx, agg, ledger, every, log) }()
	log.Info("usage kept in a file", "file", file, "keys", len(l.Keys), "every", every)
	return func() error {
		stop()
		defer unlock()
		return <-kept
	}, nil
}
