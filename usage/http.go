package usage

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Paths of the JSON handler.
const (
	HealthPath = "/v1/health"
	UsagePath  = "/v1/usage"
)

// Handler serves the aggregator as JSON:
//
//	GET /v1/health[?tenant=T]                                  HealthReport
//	GET /v1/usage[?tenant=T][&key=ID][&since=24h|RFC3339][&until=RFC3339]   UsageReport
//
// It is an operator's view (all tenants): serve it on the server's admin/metrics port.
func Handler(a *Aggregator) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+HealthPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Health(r.URL.Query().Get("tenant")))
	})
	mux.HandleFunc("GET "+UsagePath, func(w http.ResponseWriter, r *http.Request) {
		q, err := parseUsageQuery(r, a.opt.Now())
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, UsageReport{From: q.From, To: q.To, Keys: a.Usage(q)})
	})
	return mux
}

// UsageReport is the usage JSON.
type UsageReport struct {
	From time.Time  `json:"from,omitzero"`
	To   time.Time  `json:"to,omitzero"`
	Keys []KeyUsage `json:"keys"`
}

func parseUsageQuery(r *http.Request, now time.Time) (UsageQuery, error) {
	v := r.URL.Query()
	q := UsageQuery{Tenant: v.Get("tenant"), KeyID: v.Get("key")}
	var err error
	if q.From, err = ParseSince(v.Get("since"), now); err != nil {
		return q, fmt.Errorf("since: %w", err)
	}
	if s := v.Get("until"); s != "" {
		if q.To, err = time.Parse(time.RFC3339, s); err != nil {
			return q, fmt.Errorf("until: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", s)
		}
	}
	return q, nil
}

// ParseSince reads a start time as a duration back from now ("24h", "90m") or an RFC 3339
// time; "" is the zero time (everything kept).
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("duration %q is negative", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("want a duration such as 24h or an RFC 3339 time, got %q", s)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
