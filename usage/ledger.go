package usage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/inferplane/inferplane/internal/fileutil"
)

// A server's per-key usage lives in its memory; the ledger is what outlives a restart. Usage is
// what a platform bills from, so losing it to a rollout is not acceptable, and neither is a
// corrupt file silently replaced by an empty one.

// LedgerVersion is the format of the ledger file this build writes and reads.
const LedgerVersion = 1

// Ledger is every key's hourly usage as an Aggregator keeps it, in the same shape as the usage
// JSON, so a saved ledger reads like a UsageReport.
type Ledger struct {
	Version int        `json:"version"`
	SavedAt time.Time  `json:"savedAt"`
	Keys    []KeyUsage `json:"keys"`
}

// Ledger returns the per-key usage the aggregator holds (every hour kept, revoked keys included).
func (a *Aggregator) Ledger() Ledger {
	return Ledger{Version: LedgerVersion, SavedAt: a.opt.Now().UTC(), Keys: a.Usage(UsageQuery{})}
}

// Recorded counts the entries folded in so far; a saver compares it to skip unchanged saves.
func (a *Aggregator) Recorded() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recorded
}

// Restore adds a ledger's hours to the aggregator (hours past the retention are dropped). The
// Prometheus counters are left alone: they count what this process saw, as counters must.
func (a *Aggregator) Restore(l Ledger) {
	a.mu.Lock()
	defer a.mu.Unlock()
	oldest := a.opt.Now().Add(-a.opt.KeyRetention).Unix() / 3600
	for _, k := range l.Keys {
		ks := a.keys[k.KeyID]
		if ks == nil {
			ks = &keyStats{tenant: k.Tenant, jobs: map[string]struct{}{}, hours: map[int64]*Hour{}}
			a.keys[k.KeyID] = ks
		}
		for _, j := range k.Endpoints {
			ks.jobs[j] = struct{}{}
		}
		for _, s := range k.Hours {
			hr := s.Hour.Unix() / 3600
			if hr < oldest {
				continue
			}
			h := ks.hours[hr]
			if h == nil {
				h = &Hour{}
				ks.hours[hr] = h
			}
			h.add(s.counts())
		}
	}
}

// MergeUsage sums the usage of several servers (each sees the access logs of the Envoys that
// talk to it) into one list: per key and hour, sorted as Usage sorts.
func MergeUsage(lists ...[]KeyUsage) []KeyUsage {
	byKey := map[string]*KeyUsage{}
	hours := map[string]map[int64]*Hour{}
	for _, list := range lists {
		for _, k := range list {
			m := byKey[k.KeyID]
			if m == nil {
				m = &KeyUsage{KeyID: k.KeyID, Tenant: k.Tenant}
				byKey[k.KeyID], hours[k.KeyID] = m, map[int64]*Hour{}
			}
			for _, e := range k.Endpoints {
				if !slices.Contains(m.Endpoints, e) {
					m.Endpoints = append(m.Endpoints, e)
				}
			}
			m.Total.add(k.Total)
			for _, s := range k.Hours {
				hr := s.Hour.Unix() / 3600
				h := hours[k.KeyID][hr]
				if h == nil {
					h = &Hour{}
					hours[k.KeyID][hr] = h
				}
				h.add(s.counts())
			}
		}
	}
	out := make([]KeyUsage, 0, len(byKey))
	for id, m := range byKey {
		slices.Sort(m.Endpoints)
		m.Hours = make([]HourSlot, 0, len(hours[id]))
		for hr, h := range hours[id] {
			m.Hours = append(m.Hours, h.slot(hr))
		}
		slices.SortFunc(m.Hours, func(x, y HourSlot) int { return x.Hour.Compare(y.Hour) })
		out = append(out, *m)
	}
	sortUsage(out)
	return out
}

// LedgerFile keeps a ledger in one JSON file, replaced atomically on every save.
type LedgerFile struct{ Path string }

// Load reads the ledger. A missing file is an empty ledger; anything unreadable is an error
// that names the file, and the file is left as it is.
func (f LedgerFile) Load() (Ledger, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return Ledger{Version: LedgerVersion}, nil
	}
	if err != nil {
		return Ledger{}, fmt.Errorf("usage ledger %s: %w", f.Path, err)
	}
	var l Ledger
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Ledger{}, fmt.Errorf("usage ledger %s: not a ledger this build can read (%v); it is left untouched: move it aside to start without the usage it holds", f.Path, err)
	}
	if l.Version != LedgerVersion {
		return Ledger{}, fmt.Errorf("usage ledger %s: version %d, this build reads version %d; it is left untouched", f.Path, l.Version, LedgerVersion)
	}
	for i, k := range l.Keys {
		if k.KeyID == "" {
			return Ledger{}, fmt.Errorf("usage ledger %s: keys[%d].keyId is empty; it is left untouched", f.Path, i)
		}
	}
	return l, nil
}

// Save writes the ledger (mode 0600: usage is the tenants' business).
func (f LedgerFile) Save(l Ledger) error {
	b, err := json.MarshalIndent(l, "", " ")
	if err != nil {
		return err
	}
	if err := fileutil.WriteAtomic(f.Path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("usage ledger %s: %w", f.Path, err)
	}
	return nil
}

// Keep saves the aggregator's ledger to f every interval while entries arrive, and once more
// when ctx ends (the last save is what a graceful shutdown keeps). A failed save is logged and
// retried at the next tick; the error of the last save is returned.
func Keep(ctx context.Context, a *Aggregator, f LedgerFile, interval time.Duration, log *slog.Logger) error {
	saved := a.Recorded()
	save := func() error {
		n := a.Recorded()
		if n == saved {
			return nil
		}
		if err := f.Save(a.Ledger()); err != nil {
			log.Error("usage ledger not saved; retrying", "error", err, "every", interval)
			return err
		}
		saved = n
		return nil
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return save()
		case <-t.C:
			_ = save()
		}
	}
}
