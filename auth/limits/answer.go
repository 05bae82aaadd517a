package limits

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names, in the form OpenAI's API uses.
const (
	HeaderLimitRequests     = "x-ratelimit-limit-requests"
	HeaderLimitTokens       = "x-ratelimit-limit-tokens"
	HeaderRemainingRequests = "x-ratelimit-remaining-requests"
	HeaderRemainingTokens   = "x-ratelimit-remaining-tokens"
	HeaderResetRequests     = "x-ratelimit-reset-requests"
	HeaderResetTokens       = "x-ratelimit-reset-tokens"
	// HeaderWarning carries soft limits past their value and a store that is down.
	HeaderWarning = "x-inferplane-ratelimit-warning"
	// HeaderRetryAfter is the standard header of a 429 or 503: whole seconds.
	HeaderRetryAfter = "retry-after"
)

// Header is one response header.
type Header struct{ Name, Value string }

// ResetString says how long until t in OpenAI's form: "1s", "6m0s", "20ms" (Go's duration
// form, rounded up to the second past one second, to the millisecond below).
func ResetString(now, t time.Time) string {
	d := t.Sub(now)
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
	default:
		return ((d + time.Second - 1) / time.Second * time.Second).String()
	}
}

// Headers are the x-ratelimit-* headers of a decision (and the warning when there is one).
func (r Result) Headers() []Header {
	var out []Header
	if r.HasRequests {
		h := r.Requests
		out = append(out,
			Header{HeaderLimitRequests, strconv.FormatInt(h.Rule.Value, 10)},
			Header{HeaderRemainingRequests, strconv.FormatInt(h.Remaining(), 10)},
			Header{HeaderResetRequests, ResetString(r.Now, h.Reset)})
	}
	if r.HasTokens {
		h := r.Tokens
		out = append(out,
			Header{HeaderLimitTokens, strconv.FormatInt(h.Rule.Value, 10)},
			Header{HeaderRemainingTokens, strconv.FormatInt(h.Remaining(), 10)},
			Header{HeaderResetTokens, ResetString(r.Now, h.Reset)})
	}
	if w := r.Warning(); w != "" {
		out = append(out, Header{HeaderWarning, w})
	}
	return out
}

// Warning says which soft limits are past their value and whether the store is down ("" when
// neither).
func (r Result) Warning() string {
	var parts []string
	for _, h := range r.Over {
		parts = append(parts, fmt.Sprintf("soft limit %s of the %s exceeded: %d of %d, resets in %s",
			h.Kind, h.Scope, h.Used, h.Rule.Value, ResetString(r.Now, h.Reset)))
	}
	if r.StoreDown {
		parts = append(parts, "limits store unreachable since "+r.StoreDownSince.UTC().Format(time.RFC3339)+
			": this gateway replica enforces the counts it knows")
	}
	return strings.Join(parts, "; ")
}

// RetryAfter is the whole seconds until the refusing limit resets (at least 1).
func (r Result) RetryAfter() int64 {
	if r.StoreClosed {
		return 5
	}
	d := r.Denied.Reset.Sub(r.Now)
	return max(1, int64((d+time.Second-1)/time.Second))
}

// errorBody is the OpenAI API's error shape.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// Body is the OpenAI-style error JSON of a refusal: which limit, whose, and when it resets.
// OpenAI clients read code rate_limit_exceeded (or insufficient_quota for a budget) and
// retry after Retry-After.
func (r Result) Body(keyID string) []byte {
	var b errorBody
	if r.StoreClosed {
		b.Error.Type, b.Error.Code = "server_error", "rate_limit_store_unavailable"
		b.Error.Message = "The rate limit store is unavailable and this tenant's limits fail closed; try again shortly."
	} else {
		d := r.Denied
		whose := "the tenant"
		if d.Scope == ScopeKey {
			whose = "API key " + keyID
		}
		b.Error.Type, b.Error.Code = "requests", "rate_limit_exceeded"
		if d.Kind.Tokens() {
			b.Error.Type = "tokens"
		}
		if d.Kind.Budget() {
			b.Error.Code = "insufficient_quota"
		}
		b.Error.Message = fmt.Sprintf("Rate limit reached for %s (%s) of %s: limit %d, used %d. It resets at %s; try again in %s.",
			d.Kind.Words(), d.Kind, whose, d.Rule.Value, d.Used, d.Reset.UTC().Format(time.RFC3339), ResetString(r.Now, d.Reset))
	}
	out, _ := json.Marshal(b)
	return append(out, '\n')
}
