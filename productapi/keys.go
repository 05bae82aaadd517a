package productapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

type createKeyInput struct {
	TenantParam
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"A retry with the same key, to the same replica within 10 minutes, gets the first answer"`
	Body           apiv1.KeyCreate
}

type createKeyOutput struct {
	Status int
	Body   apiv1.KeyCreated
}

func (s *Server) keyStore() (keys.Store, error) {
	if s.opts.Keys == nil || s.opts.Hasher == nil {
		return nil, newProblem(http.StatusServiceUnavailable, "API keys are not available: "+s.opts.NoKeysReason)
	}
	return s.opts.Keys, nil
}

func (s *Server) createKey(ctx context.Context, in *createKeyInput) (*createKeyOutput, error) {
	v, t, err := s.authorize(ctx, in.Tenant, access.WriteKeys)
	if err != nil {
		return nil, err
	}
	store, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	id := identity(ctx)
	idem := ""
	if in.IdempotencyKey != "" {
		idem = strings.Join([]string{id.Issuer, id.Subject, in.Tenant, in.IdempotencyKey}, "\x00")
		if prev, ok := s.keyIdem.get(idem); ok {
			if prev.request != requestText(in.Body) {
				return nil, newProblem(http.StatusUnprocessableEntity, "the Idempotency-Key was used for another request: send a new key with a new request")
			}
			return &createKeyOutput{Status: http.StatusCreated, Body: prev.answer}, nil
		}
	}
	now := s.opts.Now()
	req := keys.Request{Tenant: in.Tenant, Endpoint: in.Body.Endpoint, Name: in.Body.Name, Limits: in.Body.Limits}
	if errs := s.keyLimitProblems(ctx, in.Tenant, t, in.Body.Limits); len(errs) > 0 {
		return nil, fieldProblems(errs)
	}
	if in.Body.Expires != "" {
		if req.ExpiresAt, err = keys.ParseExpiry(in.Body.Expires, now); err != nil {
			return nil, fieldProblems(field.ErrorList{field.Invalid(field.NewPath("expires"), in.Body.Expires, err.Error())})
		}
	}
	if errs := req.Check(now); len(errs) > 0 {
		return nil, fieldProblems(errs)
	}
	if in.Body.Endpoint != "" {
		tp, err := s.plannedTenant(ctx, v, in.Tenant)
		if err != nil {
			return nil, err
		}
		var jobs []string
		for _, jp := range tp.Jobs {
			jobs = append(jobs, jp.Job.Name)
		}
		if errs := req.CheckScope(map[string][]string{in.Tenant: jobs}, "the inputs"); len(errs) > 0 {
			return nil, fieldProblems(errs)
		}
	}
	key, rec, err := keys.Issue(ctx, store, s.opts.Hasher, req, now)
	if err != nil {
		return nil, s.internal("storing the key", err)
	}
	s.log.Info("API key created", "tenant", in.Tenant, "key_id", rec.ID, "endpoint", rec.Endpoint, "by", id.Subject)
	out := apiv1.KeyCreated{Key: keyView(rec, now), APIKey: key}
	if idem != "" {
		s.keyIdem.put(idem, idemAnswer{request: requestText(in.Body), answer: out})
	}
	return &createKeyOutput{Status: http.StatusCreated, Body: out}, nil
}

// requestText is a request body as the Idempotency-Key compares it: its JSON (fmt would print
// the limits' pointers, so a retry would never match).
func requestText(b apiv1.KeyCreate) string {
	j, _ := json.Marshal(b)
	return string(j)
}

func keyView(r keys.Record, now time.Time) apiv1.Key {
	return apiv1.Key{ID: r.ID, Tenant: r.Tenant, Endpoint: r.Endpoint, Name: r.Name, Status: string(r.Status(now)),
		CreatedAt: r.CreatedAt.UTC(), ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt), Limits: r.Limits}
}

func (s *Server) listKeys(ctx context.Context, in *TenantParam) (*body[apiv1.KeyList], error) {
	if _, _, err := s.authorize(ctx, in.Tenant, access.Read); err != nil {
		return nil, err
	}
	store, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	recs, err := store.List(ctx)
	if err != nil {
		return nil, s.internal("listing keys", err)
	}
	now := s.opts.Now()
	out := apiv1.KeyList{Tenant: in.Tenant, Items: []apiv1.Key{}}
	for _, r := range recs {
		if r.Tenant == in.Tenant {
			out.Items = append(out.Items, keyView(r, now))
		}
	}
	slices.SortFunc(out.Items, func(a, b apiv1.Key) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return &body[apiv1.KeyList]{Body: out}, nil
}

type KeyParams struct {
	TenantParam
	ID string `path:"id" doc:"The key's id (16 hex digits)" pattern:"^[0-9a-f]{16}$"`
}

func (s *Server) revokeKey(ctx context.Context, in *KeyParams) (*body[apiv1.Key], error) {
	if _, _, err := s.authorize(ctx, in.Tenant, access.WriteKeys); err != nil {
		return nil, err
	}
	store, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	if _, err := s.tenantKey(ctx, store, in.Tenant, in.ID); err != nil {
		return nil, err
	}
	now := s.opts.Now()
	rec, err := store.Revoke(ctx, in.ID, now)
	if err != nil {
		return nil, s.internal("revoking the key", err)
	}
	s.log.Info("API key revoked", "tenant", in.Tenant, "key_id", in.ID, "by", identity(ctx).Subject)
	return &body[apiv1.Key]{Body: keyView(rec, now)}, nil
}

// keyLimitProblems checks a key's own limits: each a positive number, hard or soft, and, unless
// the caller is an operator, at most the tenant's of the same kind (tenant.yaml spec.limits).
// The tenant's limits apply to every key whatever its own, and nothing here changes them.
func (s *Server) keyLimitProblems(ctx context.Context, tenant string, t *v1alpha1.Tenant, l *v1alpha1.RateLimits) field.ErrorList {
	errs := limits.ValidateRateLimits(l, field.NewPath("limits"))
	if len(errs) > 0 || t.Spec.Limits == nil || s.opts.Policy.IsOperator(identity(ctx)) {
		return errs
	}
	for _, e := range limits.Above(limits.FromSpec(l), limits.FromSpec(&t.Spec.Limits.RateLimits)) {
		errs = append(errs, field.Invalid(field.NewPath("limits", e.Kind.String(), "value"), e.Key, fmt.Sprintf(
			"must be at most %d, the tenant's own %s (spec.limits.%s of tenants/%s/tenant.yaml), which applies to every key of %s", e.Tenant, e.Kind.Words(), e.Kind, tenant, tenant)))
	}
	return errs
}

type keyLimitsInput struct {
	KeyParams
	Body apiv1.KeyLimits
}

// setKeyLimits replaces a key's own limits, checked as a create checks them; a key of another
// tenant is not found, as one that does not exist; a revoked key is not changed.
func (s *Server) setKeyLimits(ctx context.Context, in *keyLimitsInput) (*body[apiv1.Key], error) {
	_, t, err := s.authorize(ctx, in.Tenant, access.WriteKeys)
	if err != nil {
		return nil, err
	}
	store, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	if errs := s.keyLimitProblems(ctx, in.Tenant, t, in.Body.Limits); len(errs) > 0 {
		return nil, fieldProblems(errs)
	}
	rec, err := s.tenantKey(ctx, store, in.Tenant, in.ID)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	if rec.Status(now) == keys.StatusRevoked {
		return nil, newProblem(http.StatusConflict, fmt.Sprintf("key %s is revoked: its limits no longer matter, and revocation is final", in.ID))
	}
	if rec, err = store.SetLimits(ctx, in.ID, limits.FromSpec(in.Body.Limits).Spec()); err != nil {
		return nil, s.internal("setting the key's limits", err)
	}
	s.log.Info("API key limits set", "tenant", in.Tenant, "key_id", in.ID, "limits", limits.FromSpec(rec.Limits), "by", identity(ctx).Subject)
	return &body[apiv1.Key]{Body: keyView(rec, now)}, nil
}

// tenantKey reads a key of the tenant: one of another tenant is "not found", as one that does
// not exist.
func (s *Server) tenantKey(ctx context.Context, store keys.Store, tenant, id string) (keys.Record, error) {
	notFound := newProblem(http.StatusNotFound, fmt.Sprintf("tenant %s has no key %s", tenant, id))
	rec, err := store.Get(ctx, id)
	switch {
	case errors.Is(err, keys.ErrNotFound):
		return rec, notFound
	case err != nil:
		return rec, s.internal("reading the key", err)
	case rec.Tenant != tenant:
		return rec, notFound
	}
	return rec, nil
}

// idemCache remembers the answers of POSTs that are not git writes (key creation) for a while,
// in this replica: the key itself is never stored anywhere else, so a retry can only get it
// back from here.
type idemCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]idemEntry
}

type idemAnswer struct {
	request string
	answer  apiv1.KeyCreated
}

type idemEntry struct {
	idemAnswer
	at time.Time
}

func newIdemCache(ttl time.Duration) *idemCache {
	return &idemCache{ttl: ttl, m: map[string]idemEntry{}}
}

func (c *idemCache) get(k string) (idemAnswer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Since(e.at) > c.ttl {
		return idemAnswer{}, false
	}
	return e.idemAnswer, true
}

func (c *idemCache) put(k string, a idemAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, e := range c.m {
		if time.Since(e.at) > c.ttl {
			delete(c.m, key)
		}
	}
	c.m[k] = idemEntry{idemAnswer: a, at: time.Now()}
}
