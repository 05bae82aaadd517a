package limits

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// LimitStatus is one limit with its spend in the current window.
type LimitStatus struct {
	Tenant string `json:"tenant"`
	// KeyID is empty for the tenant's own limits.
	KeyID     string             `json:"keyId,omitempty"`
	Scope     string             `json:"scope"`
	Limit     string             `json:"limit"`
	Value     int64              `json:"value"`
	Mode      v1alpha1.LimitMode `json:"mode"`
	Used      int64              `json:"used"`
	Remaining int64              `json:"remaining"`
	// WindowStart and ResetsAt bound the current window.
	WindowStart time.Time `json:"windowStart"`
	ResetsAt    time.Time `json:"resetsAt"`
}

// StatusReport is what GET /v1/limits answers.
type StatusReport struct {
	GeneratedAt time.Time `json:"generatedAt"`
	// StoreUp is false when the figures are this replica's own (the store is unreachable).
	StoreUp bool          `json:"storeUp"`
	Limits  []LimitStatus `json:"limits"`
}

// KeyLimits names a key with limits of its own.
type KeyLimits struct {
	ID, Tenant string
	Limits     Set
}

// Status reads the current windows' spend of the tenants' limits and of keys' limits from
// the store (this replica's counts added that it has not pushed yet); with the store down,
// the last counts this replica knows.
func (l *Limiter) Status(ctx context.Context, tenants []string, keys []KeyLimits) StatusReport {
	now := l.opt.Now()
	var out []LimitStatus
	var names []string
	// What this replica knows of each counter, to add to the store's value.
	type localView struct{ mine, shared, pushing int64 }
	var local []localView
	add := func(tenant, keyID string, s Set, loc *time.Location) {
		for k := range NumKinds {
			r := s[k]
			if r.Value == 0 {
				continue
			}
			start, end := Window(k, now, loc)
			st := LimitStatus{Tenant: tenant, KeyID: keyID, Scope: ScopeTenant.String(), Limit: k.String(), Value: r.Value,
				Mode: v1alpha1.LimitHard, WindowStart: start.UTC(), ResetsAt: end.UTC()}
			if keyID != "" {
				st.Scope = ScopeKey.String()
			}
			if r.Soft {
				st.Mode = v1alpha1.LimitSoft
			}
			var mine, shared, pushing int64
			l.mu.RLock()
			c := l.counters[ckey{tenant, keyID, k}]
			l.mu.RUnlock()
			if c != nil {
				c.mu.Lock()
				if c.start.Equal(start) {
					// The store's count includes this replica's unspent lease; its own counts
					// not pushed yet are not in it.
					mine, shared, pushing = c.pending-c.lease, c.shared, c.pushing
					st.Used = c.shared + mine
				}
				c.mu.Unlock()
			}
			out = append(out, st)
			names = append(names, counterKey(tenant, keyID, k, start))
			local = append(local, localView{mine: mine, shared: shared, pushing: pushing})
		}
	}
	for _, t := range tenants {
		p := l.tenant(t)
		add(t, "", p.Limits, p.Location)
	}
	for _, k := range keys {
		add(k.Tenant, k.ID, k.Limits, l.tenant(k.Tenant).Location)
	}
	rep := StatusReport{GeneratedAt: now.UTC(), StoreUp: l.opt.Store != nil && l.downSince.Load() == 0, Limits: []LimitStatus{}}
	if rep.StoreUp && len(names) > 0 {
		ctx, cancel := context.WithTimeout(ctx, 4*l.opt.SyncTimeout)
		vals, err := l.opt.Store.Get(ctx, names)
		cancel()
		if err != nil {
			rep.StoreUp = false
		} else {
			for i := range out {
				out[i].Used = observed(local[i].shared, local[i].pushing, vals[i]) + local[i].mine
			}
		}
	}
	for i := range out {
		out[i].Remaining = max(0, out[i].Value-out[i].Used)
	}
	slices.SortFunc(out, func(a, b LimitStatus) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.KeyID, b.KeyID), cmp.Compare(a.Limit, b.Limit))
	})
	rep.Limits = append(rep.Limits, out...)
	return rep
}

// Path is where Handler is mounted on the gateway's admin address.
const Path = "/v1/limits"

// Handler serves GET /v1/limits[?tenant=T][&key=ID]: every limit of the tenant (all tenants
// when absent) and of its keys, with the spend in the current window. tenants lists the
// tenants with limits; keys the keys with limits of their own.
func (l *Limiter) Handler(tenants func() []string, keys func() []KeyLimits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, `{"error":"GET only"}`, http.StatusMethodNotAllowed)
			return
		}
		tenant, key := r.URL.Query().Get("tenant"), r.URL.Query().Get("key")
		var ts []string
		for _, t := range tenants() {
			if (tenant == "" || t == tenant) && key == "" {
				ts = append(ts, t)
			}
		}
		var ks []KeyLimits
		for _, k := range keys() {
			if (tenant == "" || k.Tenant == tenant) && (key == "" || k.ID == key) {
				ks = append(ks, k)
			}
		}
		rep := l.Status(r.Context(), ts, ks)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
}
