// Package limits is what the gateway's key check decides about rate limits and token budgets:
// per API key and per tenant, requests per minute and tokens per minute, day, week and calendar
// month, each hard (429) or soft (a warning header), shared by every gateway replica through
// one Redis.
//
// The check itself reads memory: requests are spent from small leases each replica reserves
// in Redis (one Lua script reserves for every counter of a request at once, atomically, so the
// count is exact however many replicas there are), and tokens, which are known only when a
// response's usage reaches the access log, are added in Redis by the replica that receives the
// log entry and read back by every replica in the background. Near a limit the leases shrink to
// one unit, so each request is a round trip to Redis and the count stays exact to the unit.
// docs/keys.md ("Limits") says what each figure means, the overshoot bound and what happens
// when Redis is down.
package limits

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Kind is one of the limits a key or a tenant can have.
type Kind uint8

const (
	RequestsPerMinute Kind = iota
	TokensPerMinute
	TokensPerDay
	TokensPerWeek
	TokensPerMonth
	NumKinds
)

var kindNames = [NumKinds]string{"requestsPerMinute", "tokensPerMinute", "tokensPerDay", "tokensPerWeek", "tokensPerMonth"}

// short names in Redis keys and metric labels.
var kindShort = [NumKinds]string{"rpm", "tpm", "tpd", "tpw", "tpmo"}

// words say a limit in an error message.
var kindWords = [NumKinds]string{"requests per minute", "tokens per minute", "tokens per day", "tokens per week", "tokens per month"}

// String is the limit's field name in tenant.yaml and the APIKey object.
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Short is the kind's short name (rpm, tpm, tpd, tpw, tpmo): metric labels, Redis keys.
func (k Kind) Short() string { return kindShort[k] }

// Words say the limit in a sentence ("tokens per day").
func (k Kind) Words() string { return kindWords[k] }

// Tokens reports whether the kind counts tokens (else requests).
func (k Kind) Tokens() bool { return k != RequestsPerMinute }

// Budget reports whether the kind is a budget over a day or longer, which OpenAI's API
// reports as insufficient_quota rather than rate_limit_exceeded.
func (k Kind) Budget() bool { return k >= TokensPerDay }

// Rule is one limit: Value 0 means none.
type Rule struct {
	Value int64
	Soft  bool
}

// Set is the limits of one key or one tenant, by kind. It holds no pointers, so that the key
// index can keep one per key without the garbage collector scanning them.
type Set [NumKinds]Rule

// Empty reports whether no limit is set.
func (s Set) Empty() bool { return s == Set{} }

// Or is s with each kind it does not set taken from d: a key's own limits over the default
// limits of its tenant's tier.
func (s Set) Or(d Set) Set {
	for k := range s {
		if s[k].Value == 0 {
			s[k] = d[k]
		}
	}
	return s
}

// FromSpec turns the API's limits into a Set (nil: none).
func FromSpec(r *v1alpha1.RateLimits) Set {
	var s Set
	if r == nil {
		return s
	}
	for k, l := range specFields(r) {
		if *l != nil {
			s[k] = Rule{Value: (*l).Value, Soft: (*l).Mode == v1alpha1.LimitSoft}
		}
	}
	return s
}

// String says the limits in words: "60 requests per minute, 1000 tokens per day (soft)", or
// "none".
func (s Set) String() string {
	var parts []string
	for k := range NumKinds {
		if v := s[k]; v.Value > 0 {
			p := fmt.Sprintf("%d %s", v.Value, k.Words())
			if v.Soft {
				p += " (soft)"
			}
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Spec turns a Set back into the API's form (nil when empty).
func (s Set) Spec() *v1alpha1.RateLimits {
	if s.Empty() {
		return nil
	}
	r := &v1alpha1.RateLimits{}
	for k, l := range specFields(r) {
		if s[k].Value > 0 {
			m := v1alpha1.LimitHard
			if s[k].Soft {
				m = v1alpha1.LimitSoft
			}
			*l = &v1alpha1.Limit{Value: s[k].Value, Mode: m}
		}
	}
	return r
}

func specFields(r *v1alpha1.RateLimits) [NumKinds]**v1alpha1.Limit {
	return [NumKinds]**v1alpha1.Limit{&r.RequestsPerMinute, &r.TokensPerMinute, &r.TokensPerDay, &r.TokensPerWeek, &r.TokensPerMonth}
}

// Excess is a key's limit above its tenant's of the same kind.
type Excess struct {
	Kind        Kind
	Key, Tenant int64
}

// Above lists the key's limits that are higher than its tenant's of the same kind (a kind the
// tenant does not limit bounds nothing). Every request passes the key's limits and the
// tenant's, so a key's own can only narrow the tenant's: one above it promises what the key
// never gets.
func Above(key, tenant Set) []Excess {
	var out []Excess
	for k := range NumKinds {
		if t := tenant[k].Value; t > 0 && key[k].Value > t {
			out = append(out, Excess{Kind: k, Key: key[k].Value, Tenant: t})
		}
	}
	return out
}

// ValidateRateLimits lists what is wrong with r, its fields under path (e.g. spec.limits): each
// limit a positive number, hard or soft.
func ValidateRateLimits(r *v1alpha1.RateLimits, path *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	for k, l := range specFields(r) {
		if *l == nil {
			continue
		}
		at := path.Child(Kind(k).String())
		if (*l).Value < 1 {
			errs = append(errs, field.Invalid(at.Child("value"), (*l).Value, "must be a positive number"))
		}
		if m := (*l).Mode; m != "" && m != v1alpha1.LimitHard && m != v1alpha1.LimitSoft {
			errs = append(errs, field.Invalid(at.Child("mode"), string(m), "must be hard or soft"))
		}
	}
	return errs
}

// Tenant is what the check needs of a tenant: its own limits (all its keys together), the
// time zone its days, weeks and months start in, and what to do when the store is down.
type Tenant struct {
	Limits Set
	// KeyDefaults are the limits of each of the tenant's keys where the key sets none of that
	// kind (its tier's spec.keyLimits).
	KeyDefaults Set
	Location    *time.Location // nil: UTC
	OnStoreDown v1alpha1.StoreDownMode
}

// TenantFromSpec reads a tenant's limits (nil: none, UTC, open).
func TenantFromSpec(t *v1alpha1.TenantLimits) (Tenant, error) {
	out := Tenant{Location: time.UTC, OnStoreDown: v1alpha1.StoreDownOpen}
	if t == nil {
		return out, nil
	}
	out.Limits = FromSpec(&t.RateLimits)
	if t.TimeZone != "" {
		loc, err := time.LoadLocation(t.TimeZone)
		if err != nil {
			return out, fmt.Errorf("timeZone %q: want an IANA time zone such as Europe/Berlin: %w", t.TimeZone, err)
		}
		out.Location = loc
	}
	switch t.OnStoreDown {
	case "", v1alpha1.StoreDownOpen:
	case v1alpha1.StoreDownClosed:
		out.OnStoreDown = v1alpha1.StoreDownClosed
	default:
		return out, fmt.Errorf("onStoreDown %q: want open or closed", t.OnStoreDown)
	}
	return out, nil
}

// ValidateTenantLimits lists what is wrong with a tenant's (or a tier's) limits, its fields
// under path: ValidateRateLimits', a time zone Go knows, open or closed.
func ValidateTenantLimits(t *v1alpha1.TenantLimits, path *field.Path) field.ErrorList {
	if t == nil {
		return nil
	}
	errs := ValidateRateLimits(&t.RateLimits, path)
	if t.TimeZone != "" {
		if _, err := time.LoadLocation(t.TimeZone); err != nil {
			errs = append(errs, field.Invalid(path.Child("timeZone"), t.TimeZone, "must be an IANA time zone such as Europe/Berlin"))
		}
	}
	if m := t.OnStoreDown; m != "" && m != v1alpha1.StoreDownOpen && m != v1alpha1.StoreDownClosed {
		errs = append(errs, field.Invalid(path.Child("onStoreDown"), string(m), "must be open or closed"))
	}
	return errs
}

// Window is the span of kind k that holds t: fixed minutes, and days, weeks from Monday and
// calendar months starting at midnight in loc (nil: UTC). Daylight saving time is respected:
// a day can be 23 or 25 hours long.
func Window(k Kind, t time.Time, loc *time.Location) (start, end time.Time) {
	if k <= TokensPerMinute {
		start = t.Truncate(time.Minute)
		return start, start.Add(time.Minute)
	}
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch k {
	case TokensPerDay:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case TokensPerWeek:
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	default:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
}
