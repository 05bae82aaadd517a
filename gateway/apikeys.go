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
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/gateway/envoyfilters"
	"github.com/inferplane/inferplane/gateway/keycheck"
	"github.com/inferplane/inferplane/usage"
	"github.com/inferplane/inferplane/xds"
)

// APIKeys says where the gateway reads API keys from, where it keeps per-key usage, and how
// Envoy reaches the key check and the access-log service (both served on the xDS server's own
// gRPC port, unless the key check runs in processes of its own: KeyChecks).
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
	// itself: it needs no secret, and reads the key store only for the keys' limits (the
	// tokens of the access logs count against them here).
	KeyChecks []string
	// UsageFile keeps per-key usage across restarts (default: next to the key store file;
	// none with Namespace); "-" keeps it in memory only.
	UsageFile         string
	UsageSaveInterval time.Duration
	// Limits are the rate limits and token budgets the key check enforces.
	Limits Limits
}

// Validate checks what can be checked before anything starts.
func (k APIKeys) Validate() error { return k.check(field.NewPath("apiKeys"), "").ToAggregate() }

// check is Validate as field errors under path; grpcAddress is the xDS server's gRPC address,
// which Envoy reaches the services at unless ServicesAddress says otherwise.
func (k APIKeys) check(path *field.Path, grpcAddress string) field.ErrorList {
	if k.Disabled {
		return nil
	}
	var errs field.ErrorList
	if k.UsageSaveInterval <= 0 {
		errs = append(errs, field.Invalid(path.Child("usageSaveInterval"), k.UsageSaveInterval.String(), "want a positive duration such as 30s"))
	}
	if k.Namespace != "" && k.File != "" {
		errs = append(errs, field.Forbidden(path.Child("namespace"), "a key store file and a key store namespace choose different stores: give one"))
	}
	if len(k.KeyChecks) > 0 && k.SecretFile != "" {
		errs = append(errs, field.Forbidden(path.Child("secretFile"), "with key check processes of their own (keyChecks), the key secret is theirs: this server checks no key"))
	}
	if _, port, err := net.SplitHostPort(grpcAddress); k.ServicesAddress == "" && err == nil && port == "0" {
		errs = append(errs, field.Required(path.Child("servicesAddress"),
			"needed when the gRPC address picks a free port (:0): Envoy must know where to reach the key check"))
	}
	return append(errs, k.Limits.Validate(path.Child("limits"))...)
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
	var hasher *keys.Hasher
	if len(k.KeyChecks) == 0 {
		secret, err := keys.LoadSecret(k.SecretFile)
		if err != nil {
			return finish, err
		}
		if hasher, err = keys.NewHasher(secret); err != nil {
			return finish, err
		}
	}
	idx, usageFile, err := loadKeys(ctx, k, kube, log)
	if err != nil {
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
	var authz *extauthz.Server // nil: the key check runs in processes of its own
	if hasher != nil {
		authz = extauthz.New(&keys.Verifier{Hasher: hasher, Index: idx}, log)
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
	stopLimits, err := wireLimits(ctx, cfg, k.Limits, idx, authz, als, log)
	if err != nil {
		_ = finish()
		return func() error { return nil }, err
	}
	saveUsage := finish
	finish = func() error { stopLimits(); return saveUsage() }
	started := cfg.Started
	cfg.Started = func(r xds.Running) {
		replicas.ctrl.Store(r.Controller)
		if started != nil {
			started(r)
		}
	}
	if authz == nil {
		log.Info("API keys on, checked by the key check processes", "keyChecks", k.KeyChecks, "keys", idx.Len(), "usage", services)
	} else {
		log.Info("API keys on", "keys", idx.Len(), "services", services)
	}
	return finish, nil
}

// loadKeys reads the key store into a new index that follows its changes, and says which
// usage file goes with it ("" for none). With key check processes of their own the index is
// for the keys' limits only: it is filled in the background (the server starts, and serves,
// whether the host API server answers or not), and without any key store it stays empty.
func loadKeys(ctx context.Context, k APIKeys, kube func() (*rest.Config, error), log *slog.Logger) (*keys.Index, string, error) {
	store := keycheck.Store{Namespace: k.Namespace}
	usageFile := k.UsageFile
	if k.Namespace == "" {
		store.File = cmp.Or(k.File, k.DefaultFile)
		if usageFile == "" && store.File != "" {
			usageFile = strings.TrimSuffix(store.File, filepath.Ext(store.File)) + ".usage.json"
		}
	}
	idx := keys.NewIndex()
	if len(k.KeyChecks) > 0 {
		if store.Namespace == "" && store.File == "" {
			log.Warn("no key store: the tokens of the access logs count against the tenants' limits only, not against the keys' own")
			return idx, usageFile, nil
		}
		err := keycheck.Follow(ctx, store, kube, idx, log, func() {
			log.Info("keys read for their limits", "store", store.String(), "keys", idx.Len())
		})
		return idx, usageFile, err
	}
	if err := store.Validate(); err != nil {
		return nil, "", err
	}
	syncer, _, err := store.Syncer(kube, log)
	if err != nil {
		return nil, "", err
	}
	if err := syncer.Sync(ctx, idx); err != nil {
		return nil, "", fmt.Errorf("load API keys: %w", err)
	}
	return idx, usageFile, nil
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
