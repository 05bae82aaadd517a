package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/auth/extauthz"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
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

// wireLimits adds the limiter to the key check and the access-log service, its metrics and
// /v1/limits. The returned stop ends its background work after a last push of the counts.
func wireLimits(ctx context.Context, cfg *xds.Config, l Limits, idx *keys.Index, authz *extauthz.Server, als *usage.Service, log *slog.Logger) (stop func(), err error) {
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
			return nil, err
		}
		opt.Store = st
	}
	tenants := &limits.TenantFiles{Dir: l.TenantsDir, Interval: l.TenantsInterval, Log: log}
	if l.TenantsDir != "" {
		if err := tenants.Load(); err != nil {
			return nil, fmt.Errorf("tenant limits: %w", err)
		}
		opt.Tenants = tenants.Tenant
	}
	lim := limits.New(opt)
	authz.Limits = lim
	als.Tokens = lim
	cfg.Registry.MustRegister(lim.Collectors(l.PerKeyMetrics)...)
	cfg.HTTPHandlers[limits.Path] = lim.Handler(tenants.Names, func() []limits.KeyLimits {
		var out []limits.KeyLimits
		idx.EachLimited(func(id, tenant string, s limits.Set) {
			out = append(out, limits.KeyLimits{ID: id, Tenant: tenant, Limits: s})
		})
		return out
	})
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
	return func() { cancel(); <-done }, nil
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
