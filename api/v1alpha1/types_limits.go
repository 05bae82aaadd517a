package v1alpha1

// LimitMode says what happens when a limit is reached.
// +kubebuilder:validation:Enum=hard;soft
type LimitMode string

const (
	// LimitHard refuses requests past the limit (429 with Retry-After). The default.
	LimitHard LimitMode = "hard"
	// LimitSoft lets requests through past the limit with a warning header.
	LimitSoft LimitMode = "soft"
)

// Limit is one rate limit or budget.
type Limit struct {
	// Value is the number of requests or tokens allowed in the limit's window.
	// +kubebuilder:validation:Minimum=1
	Value int64 `json:"value"`
	// Mode is hard (the default) or soft.
	// +optional
	Mode LimitMode `json:"mode,omitempty"`
}

// RateLimits are the limits of an API key, or of all a tenant's keys together, enforced by the
// gateway's key check and shared by every gateway replica. Tokens are prompt plus completion
// tokens as the responses' usage reports them. Minutes are fixed UTC minutes; days, weeks
// (from Monday) and calendar months start at midnight in the tenant's time zone.
type RateLimits struct {
	// +optional
	RequestsPerMinute *Limit `json:"requestsPerMinute,omitempty"`
	// +optional
	TokensPerMinute *Limit `json:"tokensPerMinute,omitempty"`
	// +optional
	TokensPerDay *Limit `json:"tokensPerDay,omitempty"`
	// +optional
	TokensPerWeek *Limit `json:"tokensPerWeek,omitempty"`
	// +optional
	TokensPerMonth *Limit `json:"tokensPerMonth,omitempty"`
}

// StoreDownMode says what the gateway does once its shared limit store has been unreachable
// for longer than its grace period.
// +kubebuilder:validation:Enum=open;closed
type StoreDownMode string

const (
	// StoreDownOpen keeps serving, each gateway replica enforcing the limits on the requests
	// and tokens it counted itself (so at most replicas times each limit), with a warning
	// header on every answer. The default.
	StoreDownOpen StoreDownMode = "open"
	// StoreDownClosed refuses the tenant's requests (503) until the store is back.
	StoreDownClosed StoreDownMode = "closed"
)

// TenantLimits caps all of a tenant's keys together, and says how the tenant's windows and
// the store's failures are handled for its keys' own limits too.
type TenantLimits struct {
	RateLimits `json:",inline"`
	// TimeZone is the IANA time zone (Europe/Berlin) in which the tenant's days, weeks and
	// months start; default UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// OnStoreDown is open (the default) or closed.
	// +optional
	OnStoreDown StoreDownMode `json:"onStoreDown,omitempty"`
}

// Over is t with each limit, time zone and store-down mode it does not set taken from base:
// a tenant's own limits over its tier's. Either may be nil; the result is a new object (nil
// when both are).
func (t *TenantLimits) Over(base *TenantLimits) *TenantLimits {
	switch {
	case t == nil && base == nil:
		return nil
	case t == nil:
		return base.DeepCopy()
	case base == nil:
		return t.DeepCopy()
	}
	out := base.DeepCopy()
	own := t.DeepCopy()
	for _, f := range []struct{ dst, src **Limit }{
		{&out.RequestsPerMinute, &own.RequestsPerMinute}, {&out.TokensPerMinute, &own.TokensPerMinute},
		{&out.TokensPerDay, &own.TokensPerDay}, {&out.TokensPerWeek, &own.TokensPerWeek}, {&out.TokensPerMonth, &own.TokensPerMonth},
	} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	if own.TimeZone != "" {
		out.TimeZone = own.TimeZone
	}
	if own.OnStoreDown != "" {
		out.OnStoreDown = own.OnStoreDown
	}
	return out
}
