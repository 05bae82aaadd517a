package metering

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

// Config configures a Service.
type Config struct {
	// Dir is the store's folder (a volume of the meter's own).
	Dir string
	// Source is the records' CloudEvents source (default DefaultSource).
	Source string
	// Interval is how often every cluster is looked at in full and the proven time recorded
	// (default 30s); Settle how long a running VM's time waits before it is recorded (default
	// 1m; negative: none); Retention how long records are kept (default 93 days).
	Interval, Settle, Retention time.Duration
	// Registry lists the tenant clusters (clusters.Registry on the host cluster).
	Registry ClusterRegistry
	// NoHold leaves the VMIs without the meter's finalizer: a VMI that goes away while the
	// meter is not running is then recorded up to when the meter last saw it, not to its end.
	NoHold bool
	// Tokens, when set, is where the keys' token counts are read from (the gateways).
	Tokens TokenSource
	// TokenDelay is how long after an hour ends its token counts are read (default 5m: the
	// last access logs of the hour reach the gateways).
	TokenDelay time.Duration
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now and Tick replace the clock and the ticker (tests).
	Now  func() time.Time
	Tick <-chan time.Time
}

// Service is the meter: it watches the clusters, records what the VMs hold and the keys spend,
// and answers usage queries.
type Service struct {
	cfg   Config
	log   *slog.Logger
	store *Store
	index *Index
	watch *Watch

	mu     sync.Mutex // the meter, the checkpoint's fields, looked
	meter  *Meter
	since  time.Time
	tokens time.Time // token records are written for every hour before it
	looked map[string]uint64
	// patched are the VMIs whose finalizer was just patched, by UID and direction: not patched
	// the same way again before their change reaches the cache.
	patched map[string]time.Time
	ready   atomic.Bool
	closed  bool
	// persisted: a checkpoint was written in this run (a finalizer goes only once the end it
	// guarded is written).
	persisted bool
	// releasable are the held VMIs whose end the last checkpoint written holds, by UID.
	releasable map[string]bool

	flushErrors, written prometheus.Counter
	lastSaved            atomic.Int64
}

// New opens the store, rebuilds the index from its records and restores the meter from its
// checkpoint.
func New(cfg Config) (*Service, error) {
	if cfg.Dir == "" {
		return nil, errors.New("meter: no store folder")
	}
	if cfg.Registry == nil {
		return nil, errors.New("meter: no cluster registry")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Interval = cmp.Or(cfg.Interval, 30*time.Second)
	cfg.Settle = cmp.Or(cfg.Settle, time.Minute)
	cfg.Retention = cmp.Or(cfg.Retention, 93*24*time.Hour)
	cfg.TokenDelay = cmp.Or(cfg.TokenDelay, 5*time.Minute)
	log := cmp.Or(cfg.Logger, slog.Default())
	store, cp, err := OpenStore(cfg.Dir, cfg.Now())
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, store: store, index: NewIndex(), watch: NewWatch(cfg.Registry, log),
		since: cp.Since, tokens: cp.TokensThrough, looked: map[string]uint64{}, patched: map[string]time.Time{}, releasable: map[string]bool{},
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "inferplane_meter_flush_errors_total", Help: "Records or checkpoints that could not be written (retried at the next interval)."}),
		written:     prometheus.NewCounter(prometheus.CounterOpts{Name: "inferplane_meter_records_written_total", Help: "Records this process wrote."}),
	}
	if s.tokens.IsZero() {
		s.tokens = cp.Since.Truncate(time.Hour).Add(time.Hour) // the first whole hour metered
	}
	start := time.Now()
	if err := store.Replay(func(e *Event) error { s.index.Add(*e); return nil }); err != nil {
		store.Close()
		return nil, fmt.Errorf("meter store %s: %w", cfg.Dir, err)
	}
	log.Info("meter: records read", "records", s.index.Records(), "took", time.Since(start).Round(time.Millisecond), "vmis", len(cp.VMIs), "since", cp.Since)
	s.meter = NewMeter(cfg.Source, cp.Since, max(cfg.Settle, 0))
	s.meter.Restore(cp.VMIs)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(collector{s}); err != nil {
			store.Close()
			return nil, fmt.Errorf("meter metrics: %w", err)
		}
	}
	return s, nil
}

// Run watches and records until ctx ends, then writes what is proven and the checkpoint one
// last time and releases the store.
func (s *Service) Run(ctx context.Context) error {
	defer s.close()
	werr := make(chan error, 1)
	go func() { werr <- s.watch.Run(ctx) }()
	tick := s.cfg.Tick
	if tick == nil {
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			<-werr
			return s.Flush(context.Background())
		case err := <-werr:
			// The watch ends with ctx (nil) or on its own (an error): either way the meter stops.
			ferr := s.Flush(context.Background())
			return cmp.Or(err, ferr)
		case <-s.watch.Changed():
			s.lookChanged(ctx)
		case <-tick:
			if err := s.Flush(ctx); err != nil {
				s.log.Error("meter: records not written; retrying at the next interval", "error", err)
			}
		}
	}
}

func (s *Service) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.store.Close()
	}
}

// Ready says every tenant cluster the registry lists has been looked at once.
func (s *Service) Ready() bool { return s.ready.Load() }

// lookChanged looks at the tenants whose clusters changed.
func (s *Service) lookChanged(ctx context.Context) {
	tenants, all, removed := s.watch.Changes()
	s.mu.Lock()
	for _, t := range removed {
		s.meter.Forget(t)
		delete(s.looked, t)
	}
	if all {
		listed, _ := s.watch.Listed()
		for _, t := range s.meter.Tenants() {
			if !listed[t] {
				s.meter.Forget(t) // in the checkpoint, no longer in the registry
			}
		}
	}
	s.lookLocked(ctx, tenants)
	if s.endsToWriteLocked() || (!s.persisted && s.ready.Load()) {
		// A held VMI ended: write its end now, so that its finalizer goes at once (a VM
		// restarts only once its old VMI is gone). And once every cluster is read at start:
		// write the checkpoint then, so that the running VMIs are held at once.
		if err := s.commitLocked(ctx); err != nil {
			s.log.Error("meter: records not written; retrying at the next interval", "error", err)
		}
	}
	s.mu.Unlock()
	s.patchHolds(ctx)
}

// endsToWriteLocked says a held VMI's end is known but not in a written checkpoint yet.
func (s *Service) endsToWriteLocked() bool {
	if s.cfg.NoHold {
		return false
	}
	for _, st := range s.meter.Held(true) {
		if !s.releasable[st.UID] {
			return true
		}
	}
	return false
}

// lookLocked looks at each tenant's cluster in full; a tenant not read yet is skipped.
func (s *Service) lookLocked(ctx context.Context, tenants []string) {
	now := s.cfg.Now()
	for _, t := range tenants {
		facts, errs, ok, err := s.watch.Look(ctx, t)
		if err != nil {
			s.log.Error("meter: listing a tenant's cached VMIs", "tenant", t, "error", err)
			continue
		}
		if !ok {
			continue
		}
		prev, seen := s.looked[t]
		s.meter.Reconcile(t, facts, now, seen && prev == errs)
		s.looked[t] = errs
	}
	listed, read := s.watch.Listed()
	all := read
	for t := range listed {
		if _, ok := s.looked[t]; !ok {
			all = false
		}
	}
	s.ready.Store(all)
}

// Flush looks at every cluster, writes the records now proven and the checkpoint, adds the
// records to the index, and then holds the VMIs that hold GPUs and releases those whose end is
// written. On an error nothing is lost: the meter is put back as it was and the same records
// are proven again next time.
func (s *Service) Flush(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("meter: stopped")
	}
	listed, _ := s.watch.Listed()
	tenants := make([]string, 0, len(listed))
	for t := range listed {
		tenants = append(tenants, t)
	}
	s.lookLocked(ctx, tenants)
	err := s.commitLocked(ctx)
	s.mu.Unlock()
	if err == nil {
		s.patchHolds(ctx)
	}
	return err
}

// commitLocked writes the records the meter can prove and the checkpoint.
func (s *Service) commitLocked(ctx context.Context) error {
	now := s.cfg.Now()
	before := s.meter.States()
	events := s.meter.Close()
	tokens, through, terr := s.tokenEvents(ctx, now)
	if terr != nil {
		s.log.Warn("meter: token counts not read; retrying at the next interval", "error", terr)
	}
	events = append(events, tokens...)
	cp := Checkpoint{Since: s.since, VMIs: s.meter.States(), TokensThrough: through}
	if err := s.store.Append(events, cp, now); err != nil {
		s.flushErrors.Inc()
		s.meter = NewMeter(s.cfg.Source, s.since, max(s.cfg.Settle, 0))
		s.meter.Restore(before)
		return err
	}
	s.tokens = through
	s.index.Add(events...)
	s.written.Add(float64(len(events)))
	s.lastSaved.Store(now.Unix())
	s.persisted = true
	clear(s.releasable)
	for _, st := range s.meter.Held(true) {
		s.releasable[st.UID] = true
	}
	if removed, err := s.store.Prune(now.Add(-s.cfg.Retention)); err != nil {
		s.log.Error("meter: old records not removed", "error", err)
	} else if len(removed) > 0 {
		s.log.Info("meter: records past the retention removed", "days", removed, "retention", s.cfg.Retention)
	}
	return nil
}

// patchHolds puts the finalizer on VMIs that hold GPUs and takes it off those whose end the
// last checkpoint holds (with NoHold: off every VMI). A patch that fails is tried again at the
// next look.
func (s *Service) patchHolds(ctx context.Context) {
	type patch struct {
		st   VMIState
		hold bool
	}
	var todo []patch
	s.mu.Lock()
	if !s.persisted {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	add := func(sts []VMIState, hold bool) {
		for _, st := range sts {
			key := fmt.Sprint(st.UID, hold)
			if at, ok := s.patched[key]; ok && now.Sub(at) < 10*time.Second {
				continue
			}
			s.patched[key] = now
			todo = append(todo, patch{st, hold})
		}
	}
	if s.cfg.NoHold {
		add(s.meter.Held(false), false)
	} else {
		add(s.meter.ToHold(), true)
		var ended []VMIState
		for _, st := range s.meter.Held(true) {
			if s.releasable[st.UID] {
				ended = append(ended, st)
			}
		}
		add(ended, false)
	}
	for key, at := range s.patched {
		if now.Sub(at) >= 10*time.Second {
			delete(s.patched, key)
		}
	}
	s.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, p := range todo {
		g.Go(func() error {
			if err := s.watch.SetHold(gctx, p.st, p.hold); err != nil {
				s.mu.Lock()
				delete(s.patched, fmt.Sprint(p.st.UID, p.hold)) // tried again at the next look
				s.mu.Unlock()
				s.log.Warn("meter: finalizer not patched; trying again", "tenant", p.st.Labels.Tenant, "vmi", p.st.Namespace+"/"+p.st.Name, "hold", p.hold, "error", err)
			}
			return nil
		})
	}
	_ = g.Wait()
}

// States are the VMIs the meter accounts for (what /v1/meter/vmis shows).
func (s *Service) States() []VMIState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meter.States()
}

// Report is a usage answer.
type Report struct {
	Tenant  string    `json:"tenant"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	GroupBy string    `json:"groupBy,omitempty"`
	Groups  []Group   `json:"groups"`
	Total   Usage     `json:"total"`
	// OpenGPUSeconds is the part of the GPU time that is not recorded yet (VMs running now,
	// up to Through): it shows in the answer at once, and in the records once proven.
	OpenGPUSeconds uint64    `json:"openGpuSeconds"`
	Through        time.Time `json:"through"`
}

// Usage answers a usage query: the records of the hours in [from, to) and the open time.
func (s *Service) Usage(tenant string, from, to time.Time, by string) Report {
	now := s.cfg.Now().UTC().Truncate(time.Second)
	s.mu.Lock()
	open := s.meter.Open(tenant, now)
	s.mu.Unlock()
	r := Report{Tenant: tenant, From: from.UTC().Truncate(time.Hour), To: hourUp(to), GroupBy: by, Through: now}
	r.Groups = s.index.Query(tenant, from, to, by, open)
	for _, g := range r.Groups {
		r.Total.add(g.Usage)
	}
	for _, e := range open {
		if h := e.Time.Truncate(time.Hour); !h.Before(r.From) && h.Before(r.To) {
			r.OpenGPUSeconds += uint64(e.Data.GPUSeconds)
		}
	}
	return r
}

func hourUp(t time.Time) time.Time {
	h := t.UTC().Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h
}
