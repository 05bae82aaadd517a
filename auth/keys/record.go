package keys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// Status is a key's state. Only active keys are accepted.
type Status string

const (
	StatusActive  Status = "active"
	StatusRevoked Status = "revoked"
	StatusExpired Status = "expired"
)

// Record is what a store keeps about a key: never the key, only its HMAC.
type Record struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Endpoint is the job the key is limited to; empty allows every endpoint of the tenant.
	Endpoint string `json:"endpoint,omitempty"`
	Name     string `json:"name,omitempty"`
	// Hash is the lowercase hex HMAC-SHA256 of the key.
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"createdAt"`
	// ExpiresAt is zero when the key never expires.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// RevokedAt is zero while the key is not revoked.
	RevokedAt time.Time `json:"revokedAt,omitzero"`
	// Limits are the key's own rate limits and token budgets (nil: only its tenant's).
	Limits *v1alpha1.RateLimits `json:"limits,omitempty"`
}

// Status is the key's state at now.
func (r Record) Status(now time.Time) Status {
	switch {
	case !r.RevokedAt.IsZero():
		return StatusRevoked
	case !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt):
		return StatusExpired
	default:
		return StatusActive
	}
}

// Validate checks a record before it is stored.
func (r *Record) Validate() error {
	switch {
	case !ValidID(r.ID):
		return fmt.Errorf("key id %q: want 16 lowercase hex digits", r.ID)
	case r.Tenant == "":
		return errors.New("tenant: required")
	case len(r.Hash) != 64:
		return fmt.Errorf("hash: want 64 hex digits, got %d characters", len(r.Hash))
	case r.CreatedAt.IsZero():
		return errors.New("createdAt: required")
	case !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(r.CreatedAt):
		return fmt.Errorf("expiresAt %s is not after the creation time %s",
			r.ExpiresAt.Format(time.RFC3339), r.CreatedAt.Format(time.RFC3339))
	}
	return fielderr.Err(limits.ValidateRateLimits(r.Limits, field.NewPath("limits")))
}

// Errors the stores return (wrapped with the id).
var (
	ErrNotFound = errors.New("no such key")
	ErrExists   = errors.New("key id already exists")
)

// Store keeps key records. Revoke is a soft delete: the record stays, so usage recorded
// against its id keeps its owner.
type Store interface {
	Create(ctx context.Context, r Record) error
	Get(ctx context.Context, id string) (Record, error)
	List(ctx context.Context) ([]Record, error)
	// Revoke marks the key revoked at `at`; revoking a revoked key changes nothing and
	// returns its record.
	Revoke(ctx context.Context, id string, at time.Time) (Record, error)
	// SetLimits replaces the key's limits (nil: none of its own) and returns the record.
	SetLimits(ctx context.Context, id string, l *v1alpha1.RateLimits) (Record, error)
}

// Syncer keeps an Index current with a store: what every auth server replica runs.
type Syncer interface {
	// Sync fills idx with every record, returns once it has (or could not), and keeps idx
	// current in the background until ctx ends.
	Sync(ctx context.Context, idx *Index) error
}
