package metering

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 5, 3, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func fact(uid string, gpus int, start, end time.Duration, holding bool) Fact {
	f := Fact{UID: uid, Namespace: "acme", Name: "chat-r0-n0", GPUs: gpus, Holding: holding,
		Labels: Labels{Tenant: "acme", Tier: "h100-dedicated", Job: "chat", Model: "Qwen/Qwen3-32B", NodeType: "metal3.gpu-h100", Replica: "0", VM: "chat-r0-n0"}}
	if start >= 0 {
		f.Start = at(start)
	}
	if end >= 0 {
		f.End, f.Terminal, f.Holding = at(end), true, false
	}
	return f
}

// step is one thing that happens to the meter.
type step struct {
	seen      *Fact
	reconcile []Fact // a full look at acme's cluster
	live      bool
	now       time.Duration
	close     bool
}

func sumGPUSeconds(evs []Event) map[string]int64 {
	out := map[string]int64{}
	for _, e := range evs {
		out[e.Data.VMI] += e.Data.GPUSeconds
	}
	return out
}

func TestMeterRecordsWhatIsProven(t *testing.T) {
	f := func(uid string, gpus int, start, end time.Duration) *Fact {
		x := fact(uid, gpus, start, end, end < 0)
		return &x
	}
	cases := []struct {
		name   string
		since  time.Duration
		settle time.Duration
		steps  []step
		want   map[string]int64 // GPU-seconds per VMI
		hours  int              // records written
		left   int              // VMIs still accounted for (present, or not fully recorded)
	}{
		{
			name: "running across an hour: only whole hours while it runs, then the rest at its end",
			steps: []step{
				{seen: f("a", 2, 15*time.Minute, -1), now: 20 * time.Minute, close: true},
				{seen: f("a", 2, 15*time.Minute, -1), now: time.Hour + 10*time.Second, close: true},
				{seen: f("a", 2, 15*time.Minute, time.Hour+20*time.Minute+10*time.Second), now: time.Hour + 21*time.Minute, close: true},
			},
			want:  map[string]int64{"a": 2 * (45*60 + 20*60 + 10)},
			hours: 2,
			left:  1, // Succeeded, still in its cluster
		},
		{
			name:   "settle: an hour is not recorded until the VMI was seen a minute past it",
			settle: time.Minute,
			steps: []step{
				{seen: f("a", 1, 0, -1), now: time.Hour + 30*time.Second, close: true},
			},
			want: map[string]int64{},
			left: 1,
		},
		{
			name:  "a VM that ran before the meter began is billed from then",
			since: 30 * time.Minute,
			steps: []step{
				{seen: f("a", 8, 0, 40*time.Minute), now: 41 * time.Minute, close: true},
			},
			want:  map[string]int64{"a": 8 * 10 * 60},
			hours: 1,
			left:  1,
		},
		{
			name: "watched going away without a terminal phase: ends when the meter saw it go",
			steps: []step{
				{seen: f("a", 1, 0, -1), now: 5 * time.Minute},
				{reconcile: []Fact{}, live: true, now: 7 * time.Minute, close: true},
			},
			want:  map[string]int64{"a": 7 * 60},
			hours: 1,
		},
		{
			name: "gone while nobody looked: ends when it was last seen",
			steps: []step{
				{seen: f("a", 1, 0, -1), now: 5 * time.Minute},
				{reconcile: []Fact{}, live: false, now: 50 * time.Minute, close: true},
			},
			want:  map[string]int64{"a": 5 * 60},
			hours: 1,
		},
		{
			name: "its own terminal phase wins over when the meter noticed",
			steps: []step{
				{seen: f("a", 4, 0, -1), now: 5 * time.Minute},
				{reconcile: []Fact{*f("a", 4, 0, 6*time.Minute)}, now: 9 * time.Minute},
				{reconcile: []Fact{}, live: true, now: 10 * time.Minute, close: true},
			},
			want:  map[string]int64{"a": 4 * 6 * 60},
			hours: 1,
		},
		{
			name: "a restart is a new VMI: the old one ends, the new one starts, nothing overlaps",
			steps: []step{
				{seen: f("a", 1, 0, -1), now: 10 * time.Minute},
				{reconcile: []Fact{*f("a", 1, 0, 10*time.Minute), *f("b", 1, 11*time.Minute, -1)}, now: 12 * time.Minute},
				{reconcile: []Fact{*f("b", 1, 11*time.Minute, -1)}, live: true, now: 2*time.Hour + time.Minute, close: true},
			},
			want:  map[string]int64{"a": 600, "b": 2*3600 - 11*60},
			hours: 3,
			left:  1,
		},
		{
			name: "never held its GPUs: no record",
			steps: []step{
				{seen: &Fact{UID: "p", GPUs: 1, Labels: Labels{Tenant: "acme"}}, now: 0},
				{reconcile: []Fact{}, live: true, now: time.Hour, close: true},
			},
			want: map[string]int64{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMeter("", at(tc.since), tc.settle)
			var evs []Event
			for _, s := range tc.steps {
				if s.seen != nil {
					m.Seen(*s.seen, at(s.now))
				}
				if s.reconcile != nil {
					m.Reconcile("acme", s.reconcile, at(s.now), s.live)
				}
				if s.close {
					evs = append(evs, m.Close()...)
				}
			}
			assert.Equal(t, tc.want, sumGPUSeconds(evs))
			assert.Len(t, evs, tc.hours)
			for _, e := range evs {
				require.NoError(t, e.Check())
				assert.Equal(t, e.Time.Truncate(time.Hour), e.Data.PeriodEnd.Add(-time.Second).Truncate(time.Hour), "a record lies within one hour")
			}
			assert.Equal(t, tc.left, m.Len(), "every VMI gone and fully recorded is forgotten")
		})
	}
}

// The checkpoint's states, restored into a new meter, carry on where the old one stopped: the
// records of both together are the records of one meter that never stopped.
func TestMeterRestoredCarriesOn(t *testing.T) {
	run := func(restartAt int) []Event {
		m := NewMeter("", t0, 0)
		var evs []Event
		looks := []time.Duration{5 * time.Minute, 70 * time.Minute, 130 * time.Minute, 190 * time.Minute}
		for i, d := range looks {
			if i == restartAt {
				states := m.States()
				m = NewMeter("", t0, 0)
				m.Restore(states)
			}
			present := []Fact{fact("a", 2, 0, -1, true)}
			if d > 3*time.Hour {
				present = []Fact{fact("a", 2, 0, 185*time.Minute, false)}
			}
			m.Reconcile("acme", present, at(d), true)
			evs = append(evs, m.Close()...)
		}
		return evs
	}
	want := run(-1)
	assert.Equal(t, map[string]int64{"a": 2 * 185 * 60}, sumGPUSeconds(want))
	for restart := range 4 {
		assert.Equal(t, want, run(restart), "restart before look %d", restart)
	}
}

func TestEventIDs(t *testing.T) {
	l := Labels{Tenant: "acme", Job: "chat"}
	a := GPUEvent("s", "uid-1", l, 1, t0, at(time.Hour))
	assert.Equal(t, a.ID, GPUEvent("other", "uid-1", Labels{Tenant: "acme"}, 2, t0, at(time.Minute)).ID,
		"the id is the VMI and the period's start: whoever writes the record")
	assert.NotEqual(t, a.ID, GPUEvent("s", "uid-2", l, 1, t0, at(time.Hour)).ID)
	assert.NotEqual(t, a.ID, GPUEvent("s", "uid-1", l, 1, at(time.Hour), at(2*time.Hour)).ID)
	k := TokenEvent("s", Labels{Tenant: "acme", Job: "chat", Key: "0123456789abcdef"}, t0, 1, 2, 3)
	assert.NotEqual(t, k.ID, TokenEvent("s", Labels{Tenant: "acme", Job: "other", Key: "0123456789abcdef"}, t0, 1, 2, 3).ID)
	assert.Len(t, a.ID, 32)
}
