package keys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/internal/fielderr"
	berrors "go.etcd.io/bbolt/errors"
)

// FileStore is the embedded default store: one bbolt file. Each operation opens the file and
// closes it again, because bbolt locks the whole file while it is open; so the CLI can write
// while an auth server runs, and the server picks changes up by watching the file.
type FileStore struct {
	Path string
	// LockTimeout is how long to wait for another process's lock (default 5 s).
	LockTimeout time.Duration
}

var bucketKeys = []byte("keys")

// NewFileStore returns a store on path (created on first write, mode 0600).
func NewFileStore(path string) *FileStore { return &FileStore{Path: path} }

func (s *FileStore) open(readOnly bool) (*bolt.DB, error) {
	t := s.LockTimeout
	if t == 0 {
		t = 5 * time.Second
	}
	if !readOnly {
		if err := os.MkdirAll(filepath.Dir(s.Path), 0o700); err != nil {
			return nil, fmt.Errorf("key store %s: %w", s.Path, err)
		}
	}
	db, err := bolt.Open(s.Path, 0o600, &bolt.Options{Timeout: t, ReadOnly: readOnly})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("key store %s: still locked by another process after %s", s.Path, t)
	case err != nil:
		return nil, fmt.Errorf("key store %s: %w", s.Path, err)
	}
	return db, nil
}

// view runs fn in a read transaction; a store file that does not exist yet reads as empty.
func (s *FileStore) view(fn func(b *bolt.Bucket) error) error {
	if _, err := os.Stat(s.Path); errors.Is(err, fs.ErrNotExist) {
		return fn(nil)
	}
	db, err := s.open(true)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(bucketKeys)) })
}

func (s *FileStore) update(fn func(b *bolt.Bucket) error) error {
	db, err := s.open(false)
	if err != nil {
		return err
	}
	// Update commits (and fsyncs) before Close; a failed fn rolls back and writes nothing.
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketKeys)
		if err != nil {
			return err
		}
		return fn(b)
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("key store %s: %w", s.Path, cerr)
	}
	return err
}

func (s *FileStore) decode(id, v []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(v, &r); err != nil {
		return Record{}, fmt.Errorf("key store %s: record %s: %w", s.Path, id, err)
	}
	return r, nil
}

// Create stores a new record.
func (s *FileStore) Create(_ context.Context, r Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.update(func(b *bolt.Bucket) error {
		if b.Get([]byte(r.ID)) != nil {
			return fmt.Errorf("%s: %w", r.ID, ErrExists)
		}
		return b.Put([]byte(r.ID), v)
	})
}

// CreateBatch stores many new records in one transaction (an import, or a benchmark's
// 100,000 keys): all of them or, on the first bad or duplicate record, none.
func (s *FileStore) CreateBatch(_ context.Context, recs []Record) error {
	// In id order: bbolt appends to its pages instead of shifting them on every insert.
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	vals := make([][]byte, len(recs))
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
		v, err := json.Marshal(recs[i])
		if err != nil {
			return err
		}
		vals[i] = v
	}
	return s.update(func(b *bolt.Bucket) error {
		for i, r := range recs {
			if b.Get([]byte(r.ID)) != nil {
				return fmt.Errorf("record %d: %s: %w", i, r.ID, ErrExists)
			}
			if err := b.Put([]byte(r.ID), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Get returns one record.
func (s *FileStore) Get(_ context.Context, id string) (Record, error) {
	var r Record
	err := s.view(func(b *bolt.Bucket) error {
		var v []byte
		if b != nil {
			v = b.Get([]byte(id))
		}
		if v == nil {
			return fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		var err error
		r, err = s.decode([]byte(id), v)
		return err
	})
	return r, err
}

// List returns every record, ordered by id.
func (s *FileStore) List(_ context.Context) ([]Record, error) {
	var out []Record
	err := s.view(func(b *bolt.Bucket) error {
		if b == nil {
			return nil
		}
		out = make([]Record, 0, b.Stats().KeyN)
		return b.ForEach(func(k, v []byte) error {
			r, err := s.decode(k, v)
			if err == nil {
				out = append(out, r)
			}
			return err
		})
	})
	return out, err
}

// Revoke marks a record revoked; the record stays.
func (s *FileStore) Revoke(_ context.Context, id string, at time.Time) (Record, error) {
	if _, err := os.Stat(s.Path); errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("%s: %w (store %s does not exist)", id, ErrNotFound, s.Path)
	}
	var r Record
	err := s.update(func(b *bolt.Bucket) error {
		v := b.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		var err error
		if r, err = s.decode([]byte(id), v); err != nil {
			return err
		}
		if !r.RevokedAt.IsZero() {
			return nil
		}
		r.RevokedAt = at.UTC()
		nv, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return b.Put([]byte(id), nv)
	})
	return r, err
}

// SetLimits replaces a record's limits.
func (s *FileStore) SetLimits(_ context.Context, id string, l *v1alpha1.RateLimits) (Record, error) {
	if err := fielderr.Err(limits.ValidateRateLimits(l, field.NewPath("limits"))); err != nil {
		return Record{}, err
	}
	if _, err := os.Stat(s.Path); errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("%s: %w (store %s does not exist)", id, ErrNotFound, s.Path)
	}
	var r Record
	err := s.update(func(b *bolt.Bucket) error {
		v := b.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		var err error
		if r, err = s.decode([]byte(id), v); err != nil {
			return err
		}
		r.Limits = l
		nv, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return b.Put([]byte(id), nv)
	})
	return r, err
}

// FileSyncer reloads a FileStore into an Index whenever the file changes.
type FileSyncer struct {
	Store *FileStore
	// Interval between checks of the file (default 200 ms, so revocations land within 1 s).
	Interval time.Duration
	Log      *slog.Logger
}

// fileStamp is what tells that the file changed without opening it.
type fileStamp struct {
	info os.FileInfo // nil when the file does not exist
}

func stamp(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{info: st}
}

func (a fileStamp) mod() time.Time {
	if a.info == nil {
		return time.Time{}
	}
	return a.info.ModTime()
}

// same reports whether both stamps are of the same file (not replaced by a rename) with the
// same size and modification time.
func (a fileStamp) same(b fileStamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// racyWindow covers coarse file-system timestamps: a write in the same clock tick as a load
// can leave the modification time unchanged, so a file modified this close to the start of
// the last load is loaded again (git's "racy clean" rule).
const racyWindow = 50 * time.Millisecond

// Sync loads the file into idx and keeps reloading it when it changes until ctx ends.
func (f *FileSyncer) Sync(ctx context.Context, idx *Index) error {
	interval := f.Interval
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	log := f.Log
	if log == nil {
		log = slog.Default()
	}
	last, loadStart, err := f.load(idx)
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur := stamp(f.Store.Path)
			if cur.same(last) && loadStart.Sub(cur.mod()) > racyWindow {
				continue
			}
			st, start, err := f.load(idx)
			if err != nil {
				// Keep serving the last good index; the next tick tries again.
				log.Error("reload API keys", "store", f.Store.Path, "err", err)
				continue
			}
			last, loadStart = st, start
		}
	}()
	return nil
}

func (f *FileSyncer) load(idx *Index) (fileStamp, time.Time, error) {
	start := time.Now()
	st := stamp(f.Store.Path)
	recs, err := f.Store.List(context.Background())
	if err != nil {
		return fileStamp{}, start, err
	}
	idx.Replace(recs)
	return st, start, nil
}
