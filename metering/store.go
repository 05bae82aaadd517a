package metering

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/inferplane/inferplane/internal/fileutil"
)

// The store is a folder (a volume of the meter's own):
//
//	checkpoint.json           the meter's state and how far the records go
//	events/2026-05-03.jsonl   the records written that UTC day, CloudEvents JSON lines
//
// Records are appended first, then the checkpoint is replaced (one rename) with the new end of
// the records and the state that produced them. A meter that stops between the two leaves
// records the checkpoint does not cover: the next start cuts them off and the restored meter
// writes them again, with the same ids, so the records never hold an interval twice or lose
// one. One meter writes a store (an flock on .lock).

// CheckpointVersion is the checkpoint format this build reads and writes.
const CheckpointVersion = 1

// Checkpoint is the meter's state at the end of the records.
type Checkpoint struct {
	Version int       `json:"version"`
	SavedAt time.Time `json:"savedAt"`
	// Since is when this store began: no record starts earlier.
	Since time.Time `json:"since"`
	// Segment and Offset are the end of the records: the file last written and its size.
	Segment string     `json:"segment,omitempty"`
	Offset  int64      `json:"offset"`
	VMIs    []VMIState `json:"vmis"`
	// TokensThrough: token records are written for every hour before it.
	TokensThrough time.Time `json:"tokensThrough,omitzero"`
}

// Store keeps the records and the checkpoint in a folder.
type Store struct {
	Dir    string
	unlock func()
	last   Checkpoint
	// beforeCheckpoint, in tests, fails an append between the records and the checkpoint.
	beforeCheckpoint func() error
}

const (
	checkpointFile = "checkpoint.json"
	eventsDir      = "events"
	segmentExt     = ".jsonl"
	segmentLayout  = "2006-01-02"
)

// OpenStore takes the folder for this process, makes the records end where the checkpoint
// says, and returns the checkpoint (a new store's begins at now).
func OpenStore(dir string, now time.Time) (*Store, Checkpoint, error) {
	if err := os.MkdirAll(filepath.Join(dir, eventsDir), 0o700); err != nil {
		return nil, Checkpoint{}, fmt.Errorf("meter store %s: %w", dir, err)
	}
	unlock, err := fileutil.Lock(filepath.Join(dir, ".lock"))
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, Checkpoint{}, fmt.Errorf("meter store %s is in use by another meter: one meter writes a store", dir)
	}
	if err != nil {
		return nil, Checkpoint{}, fmt.Errorf("meter store %s: lock: %w", dir, err)
	}
	s := &Store{Dir: dir, unlock: unlock}
	cp, err := s.recover(now)
	if err != nil {
		unlock()
		return nil, Checkpoint{}, err
	}
	s.last = cp
	return s, cp, nil
}

// Close releases the folder.
func (s *Store) Close() {
	if s.unlock != nil {
		s.unlock()
		s.unlock = nil
	}
}

// recover reads the checkpoint and cuts the records back to it.
func (s *Store) recover(now time.Time) (Checkpoint, error) {
	segs, err := s.segments()
	if err != nil {
		return Checkpoint{}, err
	}
	path := filepath.Join(s.Dir, checkpointFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if len(segs) > 0 {
			return Checkpoint{}, fmt.Errorf("meter store %s has records (%s) but no %s: it is left untouched; restore the checkpoint, or move the folder aside to start a new store", s.Dir, segs[0], checkpointFile)
		}
		return Checkpoint{Version: CheckpointVersion, Since: now.UTC().Truncate(time.Second), VMIs: []VMIState{}}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("meter checkpoint %s: %w", path, err)
	}
	var cp Checkpoint
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil {
		return Checkpoint{}, fmt.Errorf("meter checkpoint %s: not a checkpoint this build can read (%v); the store is left untouched", path, err)
	}
	if cp.Version != CheckpointVersion {
		return Checkpoint{}, fmt.Errorf("meter checkpoint %s: version %d, this build reads version %d; the store is left untouched", path, cp.Version, CheckpointVersion)
	}
	if err := s.cutBack(cp, segs); err != nil {
		return Checkpoint{}, err
	}
	return cp, nil
}

// cutBack removes what was appended after the checkpoint: the end of its segment and any
// later segment.
func (s *Store) cutBack(cp Checkpoint, segs []string) error {
	for _, seg := range segs {
		p := s.segPath(seg)
		switch {
		case seg > cp.Segment:
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("meter store: removing %s, written after the checkpoint: %w", p, err)
			}
		case seg == cp.Segment:
			fi, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("meter store: %w", err)
			}
			if fi.Size() < cp.Offset {
				return fmt.Errorf("meter store: %s has %d bytes, the checkpoint says %d were written: records are missing; the store is left untouched", p, fi.Size(), cp.Offset)
			}
			if fi.Size() > cp.Offset {
				if err := os.Truncate(p, cp.Offset); err != nil {
					return fmt.Errorf("meter store: cutting %s back to the checkpoint: %w", p, err)
				}
			}
		}
	}
	if cp.Segment != "" && cp.Offset > 0 && !slices.Contains(segs, cp.Segment) {
		return fmt.Errorf("meter store: the checkpoint's records %s are missing; the store is left untouched", s.segPath(cp.Segment))
	}
	return nil
}

// segments are the record files' names (their UTC day), oldest first.
func (s *Store) segments() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.Dir, eventsDir))
	if err != nil {
		return nil, fmt.Errorf("meter store %s: %w", s.Dir, err)
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segmentExt)
		if !ok || e.IsDir() {
			continue
		}
		if _, err := time.Parse(segmentLayout, name); err != nil {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

func (s *Store) segPath(seg string) string {
	return filepath.Join(s.Dir, eventsDir, seg+segmentExt)
}

// Append writes events (to the segment of now's UTC day) and then the checkpoint cp, with the
// end of the records set in it. On an error the records may hold events the checkpoint does
// not: the next OpenStore cuts them off.
func (s *Store) Append(events []Event, cp Checkpoint, now time.Time) error {
	cp.Version, cp.SavedAt = CheckpointVersion, now.UTC()
	cp.Segment, cp.Offset = s.last.Segment, s.last.Offset
	if len(events) > 0 {
		seg := now.UTC().Format(segmentLayout)
		size, err := s.appendLines(seg, events)
		if err != nil {
			return err
		}
		cp.Segment, cp.Offset = seg, size
	}
	if s.beforeCheckpoint != nil {
		if err := s.beforeCheckpoint(); err != nil {
			return err
		}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	path := filepath.Join(s.Dir, checkpointFile)
	if err := fileutil.WriteAtomic(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("meter checkpoint %s: %w", path, err)
	}
	s.last = cp
	return nil
}

// appendLines appends events as JSON lines to seg and syncs it; it returns the file's size.
func (s *Store) appendLines(seg string, events []Event) (int64, error) {
	p := s.segPath(seg)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range events {
		if err := enc.Encode(&events[i]); err != nil {
			return 0, err
		}
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("meter records %s: %w", p, err)
	}
	defer f.Close()
	if _, err := f.Write(buf.Bytes()); err != nil {
		return 0, fmt.Errorf("meter records %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("meter records %s: %w", p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Replay calls fn with every record, oldest segment first, in the order written. A line that
// is not a record stops it with the file and line named.
func (s *Store) Replay(fn func(*Event) error) error {
	return s.scan(time.Time{}, func(line []byte, where func() string) error {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("%s: not a CloudEvent: %v", where(), err)
		}
		if err := e.Check(); err != nil {
			return fmt.Errorf("%s: %w", where(), err)
		}
		return fn(&e)
	})
}

// scan reads the lines of every segment of since's day or later (a record is written at or
// after the time it measures, so older segments hold nothing from since on).
func (s *Store) scan(since time.Time, fn func(line []byte, where func() string) error) error {
	segs, err := s.segments()
	if err != nil {
		return err
	}
	first := ""
	if !since.IsZero() {
		first = since.UTC().Format(segmentLayout)
	}
	for _, seg := range segs {
		if seg < first {
			continue
		}
		if err := s.scanSegment(seg, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) scanSegment(seg string, fn func(line []byte, where func() string) error) error {
	p := s.segPath(seg)
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("meter records: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for n := 1; ; n++ {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("%s:%d: a line over 1 MiB is not a record", p, n)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			where := func() string { return fmt.Sprintf("%s:%d", p, n) }
			if ferr := fn(line, where); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("meter records %s: %w", p, err)
		}
	}
}

// Export writes the records whose time is in [from, to) (zero: unbounded), of tenant (all when
// empty), as they are stored: CloudEvents JSON lines.
func (s *Store) Export(w io.Writer, tenant string, from, to time.Time) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	err := s.scan(from, func(line []byte, where func() string) error {
		var head struct {
			Subject string    `json:"subject"`
			Time    time.Time `json:"time"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			return fmt.Errorf("%s: not a CloudEvent: %v", where(), err)
		}
		if (tenant != "" && head.Subject != tenant) || head.Time.Before(from) || (!to.IsZero() && !head.Time.Before(to)) {
			return nil
		}
		_, err := bw.Write(line)
		return err
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// Prune removes the segments of days before keepFrom's (never the one the checkpoint ends in).
func (s *Store) Prune(keepFrom time.Time) (removed []string, err error) {
	segs, err := s.segments()
	if err != nil {
		return nil, err
	}
	first := keepFrom.UTC().Format(segmentLayout)
	for _, seg := range segs {
		if seg >= first || seg == s.last.Segment {
			continue
		}
		if err := os.Remove(s.segPath(seg)); err != nil {
			return removed, fmt.Errorf("meter store: %w", err)
		}
		removed = append(removed, seg)
	}
	return removed, nil
}
