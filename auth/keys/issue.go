package keys

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// Request asks for a key: whose it is, what it may call, until when.
type Request struct {
	Tenant string
	// Endpoint limits the key to one job of the tenant; empty allows every endpoint.
	Endpoint string
	// Name is a label for people ("ci pipeline").
	Name string
	// ExpiresAt is zero for a key that never expires.
	ExpiresAt time.Time
	// Limits are the key's own rate limits and token budgets (nil: its tenant's only).
	Limits *v1alpha1.RateLimits
}

// Paths of a request's fields, for its errors.
var (
	tenantPath   = field.NewPath("tenant")
	endpointPath = field.NewPath("endpoint")
)

// Check says what is wrong with the request on its own: a tenant name (a DNS label), an
// endpoint that is a job name, an expiry after now.
func (r Request) Check(now time.Time) field.ErrorList {
	var errs field.ErrorList
	if msgs := validation.IsDNS1123Label(r.Tenant); len(msgs) > 0 {
		errs = append(errs, field.Invalid(tenantPath, r.Tenant, "must be a tenant name (a DNS label): "+strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(r.Endpoint); r.Endpoint != "" && len(msgs) > 0 {
		errs = append(errs, field.Invalid(endpointPath, r.Endpoint, "must be a job name: "+strings.Join(msgs, "; ")))
	}
	if !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(now) {
		errs = append(errs, field.Invalid(field.NewPath("expiresAt"), r.ExpiresAt.Format(time.RFC3339), "must be in the future"))
	}
	return errs
}

// CheckScope holds the request to what exists: known maps each tenant to its jobs (from the
// inputs, or a running gateway's endpoints; where says which, for the message). A name that
// matches nothing is refused with the closest known names.
func (r Request) CheckScope(known map[string][]string, where string) field.ErrorList {
	jobs, ok := known[r.Tenant]
	if !ok {
		tenants := slices.Sorted(maps.Keys(known))
		return field.ErrorList{fielderr.NotFound(tenantPath, r.Tenant,
			fmt.Sprintf("no such tenant in %s (known: %s)", where, fielderr.List(tenants)), tenants)}
	}
	if r.Endpoint != "" && !slices.Contains(jobs, r.Endpoint) {
		return field.ErrorList{fielderr.NotFound(endpointPath, r.Endpoint,
			fmt.Sprintf("tenant %s has no such job in %s (known: %s)", r.Tenant, where, fielderr.List(jobs)), jobs)}
	}
	return nil
}

// Issue makes a key for req, keeps its record (the key's hash under h, never the key) in
// store, and returns the key, to be shown once, with its record. now is the creation time.
func Issue(ctx context.Context, store Store, h *Hasher, req Request, now time.Time) (key string, rec Record, err error) {
	if errs := req.Check(now); len(errs) > 0 {
		return "", Record{}, errs.ToAggregate()
	}
	key, id, err := Generate(nil)
	if err != nil {
		return "", Record{}, err
	}
	rec = Record{ID: id, Tenant: req.Tenant, Endpoint: req.Endpoint, Name: req.Name, Hash: h.Hex(key),
		CreatedAt: now.UTC().Truncate(time.Second), ExpiresAt: req.ExpiresAt, Limits: req.Limits}
	if err := store.Create(ctx, rec); err != nil {
		return "", Record{}, err
	}
	return key, rec, nil
}

// ParseExpiry reads an expiry: "" (never), a duration from now (720h, or days: 30d), a date
// (2027-01-31) or an RFC 3339 time, which must be after now.
func ParseExpiry(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	var t time.Time
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return t, fmt.Errorf("%q: want a number of days such as 30d", s)
		}
		t = now.Add(time.Duration(n) * 24 * time.Hour)
	} else if d, err := time.ParseDuration(s); err == nil {
		t = now.Add(d)
	} else if d, err := time.Parse("2006-01-02", s); err == nil {
		t = d
	} else if d, err := time.Parse(time.RFC3339, s); err == nil {
		t = d
	} else {
		return t, fmt.Errorf("%q: want a duration (720h, 30d), a date (2027-01-31) or an RFC 3339 time", s)
	}
	if !t.After(now) {
		return t, fmt.Errorf("%q is not in the future", s)
	}
	return t.UTC().Truncate(time.Second), nil
}
