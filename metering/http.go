package metering

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/inferplane/inferplane/usage"
)

// Paths the meter serves on its admin address (an operator's view: every tenant).
const (
	UsagePath  = "/v1/meter/usage"
	EventsPath = "/v1/meter/events"
	VMIsPath   = "/v1/meter/vmis"
)

// Handler serves the meter:
//
//	GET /v1/meter/usage?tenant=T[&from=30d|RFC3339][&to=RFC3339][&groupBy=job|model|key|day|nodeType|tier]   Report
//	GET /v1/meter/events[?tenant=T][&from=...][&to=...]   the records, CloudEvents JSON lines
//	GET /v1/meter/vmis[?tenant=T]                         the VMIs accounted for
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+UsagePath, func(w http.ResponseWriter, r *http.Request) {
		q, err := ParseQuery(r.URL.Query().Get, s.cfg.Now())
		if err == nil && q.Tenant == "" {
			err = fmt.Errorf("tenant: required")
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, s.Usage(q.Tenant, q.From, q.To, q.GroupBy))
	})
	mux.HandleFunc("GET "+EventsPath, func(w http.ResponseWriter, r *http.Request) {
		q, err := ParseQuery(r.URL.Query().Get, s.cfg.Now())
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if r.URL.Query().Get("from") == "" {
			q.From = time.Time{}
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		// Flushed as it goes: a month's records are a stream, each write bounded on its own.
		if err := s.store.Export(flushWriter{w}, q.Tenant, q.From, q.To); err != nil {
			s.log.Error("meter: export", "error", err)
		}
	})
	mux.HandleFunc("GET "+VMIsPath, func(w http.ResponseWriter, r *http.Request) {
		tenant := r.URL.Query().Get("tenant")
		out := []VMIState{}
		for _, st := range s.States() {
			if tenant == "" || st.Labels.Tenant == tenant {
				out = append(out, st)
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
	return mux
}

// Query is a usage query's parameters.
type Query struct {
	Tenant   string
	From, To time.Time
	GroupBy  string
}

// ParseQuery reads tenant, from (a duration back from now or an RFC 3339 time; default 30
// days), to (RFC 3339; default now) and groupBy, naming the parameter that is wrong.
func ParseQuery(get func(string) string, now time.Time) (Query, error) {
	q := Query{Tenant: get("tenant"), GroupBy: get("groupBy"), To: now}
	from := get("from")
	if from == "" {
		from = "720h"
	}
	var err error
	if q.From, err = usage.ParseSince(from, now); err != nil {
		return q, fmt.Errorf("from: %w", err)
	}
	if s := get("to"); s != "" {
		if q.To, err = time.Parse(time.RFC3339, s); err != nil {
			return q, fmt.Errorf("to: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", s)
		}
	}
	if !q.To.After(q.From) {
		return q, fmt.Errorf("to: %s is not after from %s", q.To.Format(time.RFC3339), q.From.Format(time.RFC3339))
	}
	if q.GroupBy != "" && !slices.Contains(GroupBys, q.GroupBy) {
		return q, fmt.Errorf("groupBy: %q is not one of %s", q.GroupBy, strings.Join(GroupBys, ", "))
	}
	return q, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// flushWriter flushes every write (the store's export writes 64 KiB at a time).
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = http.NewResponseController(f.w).Flush()
	}
	return n, err
}
