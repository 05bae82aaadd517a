package metering

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gpuEvents(uid string, hours int) []Event {
	var out []Event
	for h := range hours {
		out = append(out, GPUEvent(DefaultSource, uid, Labels{Tenant: "acme", Job: "chat"}, 1, at(time.Duration(h)*time.Hour), at(time.Duration(h+1)*time.Hour)))
	}
	return out
}

func replayed(t *testing.T, s *Store) []Event {
	t.Helper()
	var out []Event
	require.NoError(t, s.Replay(func(e *Event) error { out = append(out, *e); return nil }))
	return out
}

// A meter that stops after writing records but before its checkpoint leaves records the
// checkpoint does not cover: the next start cuts them off (they are written again, with the
// same ids, by the restored meter), on the same day and across a day's end.
func TestStoreCutsBackToTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s, cp, err := OpenStore(dir, t0)
	require.NoError(t, err)
	assert.Equal(t, t0, cp.Since)
	evs := gpuEvents("a", 3)
	require.NoError(t, s.Append(evs[:2], Checkpoint{Since: cp.Since}, at(2*time.Hour)))

	s.beforeCheckpoint = func() error { return errors.New("killed") }
	require.Error(t, s.Append(evs[2:], Checkpoint{Since: cp.Since}, at(3*time.Hour)))
	require.Error(t, s.Append(evs[2:], Checkpoint{Since: cp.Since}, at(24*time.Hour)), "the next day's segment too")
	assert.Len(t, replayed(t, s), 4, "written, not covered")
	s.Close()

	s, cp, err = OpenStore(dir, at(25*time.Hour))
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, t0, cp.Since, "a store keeps its beginning")
	assert.Equal(t, evs[:2], replayed(t, s))
	segs, err := s.segments()
	require.NoError(t, err)
	assert.Equal(t, []string{"2026-05-03"}, segs, "the segment written after the checkpoint is gone")
	require.NoError(t, s.Append(evs[2:], cp, at(25*time.Hour)))
	assert.Equal(t, evs, replayed(t, s))
}

func TestStoreRefusesWhatItCannotTrust(t *testing.T) {
	t.Run("one meter a store", func(t *testing.T) {
		dir := t.TempDir()
		s, _, err := OpenStore(dir, t0)
		require.NoError(t, err)
		defer s.Close()
		_, _, err = OpenStore(dir, t0)
		require.ErrorContains(t, err, "in use by another meter")
	})
	t.Run("records without a checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		s, _, err := OpenStore(dir, t0)
		require.NoError(t, err)
		require.NoError(t, s.Append(gpuEvents("a", 1), Checkpoint{}, t0))
		s.Close()
		require.NoError(t, os.Remove(filepath.Join(dir, checkpointFile)))
		_, _, err = OpenStore(dir, t0)
		require.ErrorContains(t, err, "has records (2026-05-03) but no checkpoint.json: it is left untouched")
		assert.FileExists(t, filepath.Join(dir, "events", "2026-05-03.jsonl"))
	})
	t.Run("records shorter than the checkpoint says", func(t *testing.T) {
		dir := t.TempDir()
		s, _, err := OpenStore(dir, t0)
		require.NoError(t, err)
		require.NoError(t, s.Append(gpuEvents("a", 2), Checkpoint{}, t0))
		s.Close()
		require.NoError(t, os.Truncate(filepath.Join(dir, "events", "2026-05-03.jsonl"), 10))
		_, _, err = OpenStore(dir, t0)
		require.ErrorContains(t, err, "records are missing; the store is left untouched")
	})
	t.Run("a checkpoint of another version", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "events"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, checkpointFile), []byte(`{"version":9,"since":"2026-05-03T10:00:00Z","vmis":[]}`), 0o600))
		_, _, err := OpenStore(dir, t0)
		require.ErrorContains(t, err, "version 9, this build reads version 1")
	})
	t.Run("a line that is not a record", func(t *testing.T) {
		dir := t.TempDir()
		s, _, err := OpenStore(dir, t0)
		require.NoError(t, err)
		defer s.Close()
		bad := GPUEvent(DefaultSource, "a", Labels{}, 1, t0, at(time.Hour))
		b, _ := json.Marshal(bad)
		require.NoError(t, os.WriteFile(s.segPath("2026-05-03"), append([]byte("{}\n"), b...), 0o600))
		err = s.Replay(func(*Event) error { return nil })
		require.ErrorContains(t, err, "2026-05-03.jsonl:1: specversion is \"\"")
		require.NoError(t, os.WriteFile(s.segPath("2026-05-03"), append(b, '\n'), 0o600))
		err = s.Replay(func(*Event) error { return nil })
		require.ErrorContains(t, err, "2026-05-03.jsonl:1: data.tenant is empty")
	})
}

func TestStoreExport(t *testing.T) {
	s, _, err := OpenStore(t.TempDir(), t0)
	require.NoError(t, err)
	defer s.Close()
	evs := gpuEvents("a", 30)
	other := GPUEvent(DefaultSource, "b", Labels{Tenant: "globex"}, 1, at(2*time.Hour), at(3*time.Hour))
	require.NoError(t, s.Append(evs[:20], Checkpoint{}, at(10*time.Hour))) // 20:00, the first day
	require.NoError(t, s.Append(append(evs[20:], other), Checkpoint{}, at(30*time.Hour)))
	var buf bytes.Buffer
	require.NoError(t, s.Export(&buf, "acme", at(10*time.Hour), at(25*time.Hour)))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 15)
	var first Event
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	assert.Equal(t, evs[10], first)

	buf.Reset()
	require.NoError(t, s.Export(&buf, "", time.Time{}, time.Time{}))
	assert.Equal(t, 31, strings.Count(buf.String(), "\n"))

	removed, err := s.Prune(at(24 * time.Hour))
	require.NoError(t, err)
	assert.Equal(t, []string{"2026-05-03"}, removed)
	assert.Len(t, replayed(t, s), 11)
}
