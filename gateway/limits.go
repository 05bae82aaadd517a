package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/gateway/keycheck"
	"github.com/inferplane/inferplane/usage"
	"github.com/inferplane/inferplane/xds"
)

// RedisPasswordEnv may hold the limits store's password (never a flag value).
const RedisPasswordEnv = "INFERPLANE_LIMITS_REDIS_PASSWORD"

// Limits says where the key check's rate limits and token budgets are counted and where the
// tenants' limits are read. Keys carry their own limits in the key store.
type Limits struct {
	// Redis is host:port of the store every gateway replica shares; empty: the counts live in
	// this process only (one replica).
	Redis string
	// TenantsDir is a tenants folder (<tenant>/tenant.yaml, spec.limits); empty: no tenant
	// limits. TenantsInterval is how often it is checked for changes.
	TenantsDir      string
	TenantsInterval time.Duration
	// Grace is how long the last counts are trusted while the store is down, before each
	// tenant's onStoreDown applies.
	Grace time.Duration
	// FlushInterval is how often counted tokens reach the store and shared counts come back.
	FlushInterval time.Duration
	// Timeout bounds a call to Redis on the check path (default 100 ms); past it the replica
	// takes the store for down and decides from the counts it knows.
	Timeout time.Duration
	// MaxStale is how old a replica's view of a shared token count may be at a check before
	// the check reads it from the store (default 2 s).
	MaxStale time.Duration
	// PerKeyMetrics adds a series per key to the limited-requests metric.
	PerKeyMetrics bool
	// Now is the clock of the windows (tests move it across window boundaries; default
	// time.Now).
	Now func() time.Time
}

// wireLimits adds the limiter to the key check (when this process serves it) and the
// access-log service, its metrics and /v1/limits. The returned stop ends its background work
// after a last push of the counts.
func wireLimits(ctx context.Context, cfg *xds.Config, l Limits, idx *keys.Index, authz *extauthz.Server, als *usage.Service, log *slog.Logger) (stop func(), err error) {
	lim, tenants, stop, err := l.start(ctx, idx, log)
	if err != nil {
		return nil, err
	}
	if authz != nil {
		authz.Limits = lim
		l.share(authz, tenants)
	}
	als.Tokens = lim
	cfg.Registry.MustRegister(lim.Collectors(l.PerKeyMetrics)...)
	cfg.HTTPHandlers[limits.Path] = limitsHandler(lim, tenants, idx)
	return stop, nil
}

// KeyCheck is what l adds to a key check process of its own (`keys serve`, gateway/keycheck):
// its checks count and enforce the limits, sharing the counts through l.Redis with the xDS
// servers, which add the tokens of the access logs.
func (l Limits) KeyCheck() func(ctx context.Context, x keycheck.Extension) (stop func(), err error) {
	return func(ctx context.Context, x keycheck.Extension) (func(), error) {
		lim, tenants, stop, err := l.start(ctx, x.Index, x.Logger)
		if err != nil {
			return nil, err
		}
		x.Authz.Limits = lim
		l.share(x.Authz, tenants)
		x.Registry.MustRegister(lim.Collectors(l.PerKeyMetrics)...)
		x.Mux.Handle(limits.Path, limitsHandler(lim, tenants, x.Index))
		if l.Redis == "" {
			x.Logger.Warn("key check: token budgets are counted by the xDS servers from the access logs; " +
				"without a shared Redis they never reach this process, and only request limits apply here")
		}
		return stop, nil
	}
}

// share lets the key check take other tenants' keys on the shared endpoints of provider
// tenants, as the tenants folder says (limits.Sharing): without a folder nothing is shared.
func (l Limits) share(authz *extauthz.Server, tenants *limits.TenantFiles) {
	if l.TenantsDir == "" {
		return
	}
	authz.Verifier.Shared = func(caller, tenant, job string) bool {
		_, ok := tenants.Sharing().SharedCall(caller, tenant, job)
		return ok
	}
}

// start builds the limiter over the key index and runs its background work until the
// returned stop.
func (l Limits) start(ctx context.Context, idx *keys.Index, log *slog.Logger) (*limits.Limiter, *limits.TenantFiles, func(), error) {
	opt := limits.Options{
		Keys:          idx.Limits,
		Now:           l.Now,
		MaxStale:      l.MaxStale,
		SyncTimeout:   l.Timeout,
		Grace:         l.Grace,
		FlushInterval: l.FlushInterval,
		Log:           log,
	}
	if l.Redis != "" {
		st, err := limits.NewRedis(limits.RedisOptions{Addr: l.Redis, Password: os.Getenv(RedisPasswordEnv), IOTimeout: l.Timeout})
		if err != nil {
			return nil, nil, nil, err
		}
		opt.Store = st
	}
	tenants := &limits.TenantFiles{Dir: l.TenantsDir, Interval: l.TenantsInterval, Log: log}
	if l.TenantsDir != "" {
		if err := tenants.Load(); err != nil {
			return nil, nil, nil, fmt.Errorf("tenant limits: %w", err)
		}
		opt.Tenants = tenants.Tenant
	}
	lim := limits.New(opt)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); lim.Run(runCtx) }()
	if l.TenantsDir != "" {
		go tenants.Watch(runCtx.Done())
	}
	if opt.Store == nil {
		log.Warn("rate limits are counted in this process only: with several gateway replicas give them a shared Redis")
	} else {
		log.Info("rate limits shared through Redis", "redis", l.Redis, "tenants", strings.Join(tenants.Names(), ","))
	}
	return lim, tenants, func() { cancel(); <-done }, nil
}

// limitsHandler serves /v1/limits: the tenants' and the limited keys' limits and spend.
func limitsHandler(lim *limits.Limiter, tenants *limits.TenantFiles, idx *keys.Index) http.Handler {
	return lim.Handler(tenants.Names, func() []limits.KeyLimits {
		var out []limits.KeyLimits
		idx.EachLimited(func(id, tenant string, s limits.Set) {
			out = append(out, limits.KeyLimits{ID: id, Tenant: tenant, Limits: s})
		})
		return out
	})
}

// Validate checks the limits' settings, as field errors under path.
func (l Limits) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"grace", l.Grace}, {"flushInterval", l.FlushInterval}, {"tenantsInterval", l.TenantsInterval}, {"timeout", l.Timeout}, {"maxStale", l.MaxStale}} {
		if f.d < 0 {
			errs = append(errs, field.Invalid(path.Child(f.name), f.d.String(), "must not be negative"))
		}
	}
	return errs
}
