package usage

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ledgerEntries are a day's traffic of two keys of two tenants over three hours.
func ledgerEntries(t0 time.Time) []Entry {
	return []Entry{
		{Done: t0, Tenant: "acme", Job: "chat", KeyID: "k-acme", Code: 200, Latency: time.Second, HasUsage: true, TokensIn: 10, TokensOut: 100},
		{Done: t0.Add(time.Minute), Tenant: "acme", Job: "embed", KeyID: "k-acme", Code: 200, Latency: time.Second, HasUsage: true, TokensIn: 5, TokensOut: 0},
		{Done: t0.Add(time.Hour), Tenant: "acme", Job: "chat", KeyID: "k-acme", Code: 500, Latency: time.Second},
		{Done: t0.Add(2 * time.Hour), Tenant: "globex", Job: "stt", KeyID: "k-globex", Code: 200, Latency: time.Second, HasUsage: true, TokensIn: 1, TokensOut: 2},
		{Done: t0.Add(2 * time.Hour), Tenant: "globex", Job: "stt", Code: 401, Denied: true},
	}
}

func TestLedgerSurvivesARestart(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	now := t0.Add(3 * time.Hour)
	clock := func() time.Time { return now }
	before := NewAggregator(Options{Now: clock})
	before.Add(ledgerEntries(t0)...)

	f := LedgerFile{Path: filepath.Join(t.TempDir(), "state", "usage.json")}
	require.NoError(t, f.Save(before.Ledger()))
	info, err := os.Stat(f.Path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "usage is the tenants' business")

	l, err := f.Load()
	require.NoError(t, err)
	after := NewAggregator(Options{Now: clock})
	after.Restore(l)
	assert.Equal(t, before.Usage(UsageQuery{}), after.Usage(UsageQuery{}), "the restarted server reports the same usage")
	assert.Equal(t, before.Usage(UsageQuery{Tenant: "acme", From: t0.Add(time.Hour)}), after.Usage(UsageQuery{Tenant: "acme", From: t0.Add(time.Hour)}))

	// New traffic adds to the restored hours.
	after.Add(Entry{Done: t0.Add(2 * time.Hour), Tenant: "globex", Job: "stt", KeyID: "k-globex", Code: 200, HasUsage: true, TokensIn: 1, TokensOut: 2})
	g := after.Usage(UsageQuery{KeyID: "k-globex"})
	require.Len(t, g, 1)
	assert.Equal(t, Hour{Requests: 2, TokensIn: 2, TokensOut: 4}, g[0].Total)
}

func TestRestoreDropsHoursPastRetention(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	old := NewAggregator(Options{Now: func() time.Time { return t0.Add(3 * time.Hour) }})
	old.Add(ledgerEntries(t0)...)
	agg := NewAggregator(Options{KeyRetention: 2 * time.Hour, Now: func() time.Time { return t0.Add(3 * time.Hour) }})
	agg.Restore(old.Ledger())
	for _, k := range agg.Usage(UsageQuery{}) {
		for _, h := range k.Hours {
			assert.False(t, h.Hour.Before(t0.Add(time.Hour)), "%s keeps hour %s past the retention", k.KeyID, h.Hour)
		}
	}
}

func TestLedgerLoadRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"not JSON", "{usage", "not a ledger this build can read"},
		{"unknown field", `{"version":1,"keys":[],"tokens":3}`, "unknown field"},
		{"another version", `{"version":2,"keys":[]}`, "version 2, this build reads version 1"},
		{"key without id", `{"version":1,"keys":[{"keyId":"","tenant":"acme","endpoints":[],"total":{},"hours":[]}]}`, "keys[0].keyId is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "usage.json")
			require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o600))
			_, err := LedgerFile{Path: path}.Load()
			require.Error(t, err)
			assert.Contains(t, err.Error(), path, "the error names the file")
			assert.Contains(t, err.Error(), tc.want)
			b, _ := os.ReadFile(path)
			assert.Equal(t, tc.content, string(b), "the file is left as it was")
		})
	}
	l, err := LedgerFile{Path: filepath.Join(t.TempDir(), "absent.json")}.Load()
	require.NoError(t, err, "no file yet: a first start")
	assert.Empty(t, l.Keys)
}

func TestKeepSavesChangesAndOnShutdown(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	agg := NewAggregator(Options{Now: func() time.Time { return t0.Add(3 * time.Hour) }})
	f := LedgerFile{Path: filepath.Join(t.TempDir(), "usage.json")}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Keep(ctx, agg, f, 20*time.Millisecond, discardLogger()) }()
	time.Sleep(60 * time.Millisecond)
	_, err := os.Stat(f.Path)
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing recorded: nothing written")

	agg.Add(ledgerEntries(t0)[:1]...)
	require.Eventually(t, func() bool {
		l, err := f.Load()
		return err == nil && len(l.Keys) == 1
	}, 5*time.Second, 10*time.Millisecond, "a change is saved at the next tick")

	agg.Add(ledgerEntries(t0)[3:]...)
	cancel() // the shutdown save: whatever arrived since the last tick
	require.NoError(t, <-done)
	l, err := f.Load()
	require.NoError(t, err)
	assert.Equal(t, agg.Usage(UsageQuery{}), l.Keys)
}

func TestMergeUsageSumsServers(t *testing.T) {
	h := func(hour int) time.Time { return time.Date(2026, 11, 30, hour, 0, 0, 0, time.UTC) }
	a := []KeyUsage{
		{KeyID: "k1", Tenant: "acme", Endpoints: []string{"chat"}, Total: Hour{3, 30, 300},
			Hours: []HourSlot{{h(8), 1, 10, 100}, {h(9), 2, 20, 200}}},
	}
	b := []KeyUsage{
		{KeyID: "k2", Tenant: "acme", Endpoints: []string{"chat"}, Total: Hour{1, 1, 1}, Hours: []HourSlot{{h(9), 1, 1, 1}}},
		{KeyID: "k1", Tenant: "acme", Endpoints: []string{"embed", "chat"}, Total: Hour{4, 4, 0},
			Hours: []HourSlot{{h(7), 1, 1, 0}, {h(9), 3, 3, 0}}},
	}
	got := MergeUsage(a, b)
	want := []KeyUsage{
		{KeyID: "k1", Tenant: "acme", Endpoints: []string{"chat", "embed"}, Total: Hour{7, 34, 300},
			Hours: []HourSlot{{h(7), 1, 1, 0}, {h(8), 1, 10, 100}, {h(9), 5, 23, 200}}},
		{KeyID: "k2", Tenant: "acme", Endpoints: []string{"chat"}, Total: Hour{1, 1, 1}, Hours: []HourSlot{{h(9), 1, 1, 1}}},
	}
	assert.Equal(t, want, got)
	assert.Empty(t, MergeUsage())
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestLedgerLockKeepsASecondServerOut(t *testing.T) {
	f := LedgerFile{Path: filepath.Join(t.TempDir(), "usage.json")}
	unlock, err := f.Lock()
	require.NoError(t, err)
	_, err = f.Lock()
	if runtime.GOOS == "windows" {
		t.Skip("SKIPPED: no flock on windows; Lock is a no-op there")
	}
	require.Error(t, err, "a second holder of the same ledger is refused")
	assert.Contains(t, err.Error(), "in use by another server")
	unlock()
	unlock2, err := f.Lock()
	require.NoError(t, err, "free again once released")
	unlock2()
}
