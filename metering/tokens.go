package metering

import (
	"context"
	"time"
)

// TokenSource reads what API keys spent, per key, job and hour: the gateways' counts from
// Envoy's access logs.
type TokenSource interface {
	// Tokens are the counts of the hours in [from, to), summed over every gateway replica. It
	// fails when any replica cannot be read: a partial sum, once recorded, would stay.
	Tokens(ctx context.Context, from, to time.Time) ([]TokenCount, error)
}

// TokenCount is one key's use of one job in one hour.
type TokenCount struct {
	Tenant, Key, Job string
	Hour             time.Time
	Requests         uint64
	TokensIn         uint64
	TokensOut        uint64
}

// tokenEvents are the token records of the hours that ended at least TokenDelay ago and are not
// recorded yet, and the hour they now reach. Each carries the job's tier and model as its VMs
// do (or did: the index remembers the labels of jobs no longer running).
func (s *Service) tokenEvents(ctx context.Context, now time.Time) ([]Event, time.Time, error) {
	through := now.Add(-s.cfg.TokenDelay).UTC().Truncate(time.Hour)
	if s.cfg.Tokens == nil || !through.After(s.tokens) {
		return nil, s.tokens, nil
	}
	counts, err := s.cfg.Tokens.Tokens(ctx, s.tokens, through)
	if err != nil {
		return nil, s.tokens, err
	}
	var out []Event
	for _, c := range counts {
		h := c.Hour.UTC().Truncate(time.Hour)
		if h.Before(s.tokens) || !h.Before(through) || c.Tenant == "" || c.Requests+c.TokensIn+c.TokensOut == 0 {
			continue
		}
		l := Labels{Tenant: c.Tenant, Job: c.Job, Key: c.Key}
		if tier, model, ok := s.meter.JobLabels(c.Tenant, c.Job); ok {
			l.Tier, l.Model = tier, model
		} else if tier, model, ok := s.index.JobLabels(c.Tenant, c.Job); ok {
			l.Tier, l.Model = tier, model
		}
		out = append(out, TokenEvent(s.meter.Source, l, h, c.Requests, c.TokensIn, c.TokensOut))
	}
	return out, through, nil
}
