package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/inferplane/inferplane/internal/fileutil"
)

// KnownSet is the last replica set read from one tenant cluster: what a gateway that restarts
// while the cluster's API server is down serves, still probed, until the cluster answers.
type KnownSet struct {
	Tenant string `json:"tenant"`
	// Server is the cluster's API server; a set is used only for the same server (a tenant
	// moved to another cluster has other replicas).
	Server string `json:"server"`
	// ConfirmedAt is the last moment the cluster was known to answer with this set: the age
	// of a stale set is counted from it.
	ConfirmedAt time.Time `json:"confirmedAt"`
	Replicas    []Replica `json:"replicas"`
}

// KnownGoodStore keeps the known sets across restarts.
type KnownGoodStore interface {
	// Load returns the saved sets; none saved yet is no error.
	Load() ([]KnownSet, error)
	Save([]KnownSet) error
	// String names the store in messages.
	String() string
}

// KnownGoodFile keeps the known sets in a JSON file, replaced whole on every save (written
// to a temporary file and renamed, so a crash never leaves half a file). It lives on the
// gateway's own volume, not in the host cluster: it must be readable exactly when an API
// server is not.
type KnownGoodFile struct {
	Path string
}

const knownGoodVersion = 1

type knownGoodDoc struct {
	Version  int        `json:"version"`
	Clusters []KnownSet `json:"clusters"`
}

func (f KnownGoodFile) String() string { return f.Path }

// Load implements KnownGoodStore. A file of another version, or one that does not decode,
// is an error naming the file (the caller starts without it).
func (f KnownGoodFile) Load() ([]KnownSet, error) {
	data, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc knownGoodDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	if doc.Version != knownGoodVersion {
		return nil, fmt.Errorf("%s: version %d, expected %d", f.Path, doc.Version, knownGoodVersion)
	}
	for i, k := range doc.Clusters {
		if k.Tenant == "" || k.Server == "" || k.ConfirmedAt.IsZero() {
			return nil, fmt.Errorf("%s: clusters[%d]: tenant, server and confirmedAt are required", f.Path, i)
		}
		for j, r := range k.Replicas {
			if r.Tenant != k.Tenant {
				return nil, fmt.Errorf("%s: clusters[%d].replicas[%d]: tenant %q in the set of tenant %q", f.Path, i, j, r.Tenant, k.Tenant)
			}
		}
	}
	return doc.Clusters, nil
}

// Save implements KnownGoodStore (mode 0600: it names every replica's address).
func (f KnownGoodFile) Save(sets []KnownSet) error {
	doc := knownGoodDoc{Version: knownGoodVersion, Clusters: sets}
	if doc.Clusters == nil {
		doc.Clusters = []KnownSet{}
	}
	data, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return fileutil.WriteAtomic(f.Path, append(data, '\n'), 0o600)
}

// knownSaver writes the known sets in the background, latest first, and only when they
// changed: a replica set or server differs, or a confirmation moved on by more than refresh
// (so that the age of a set after a restart is right within refresh, without rewriting the
// file at every check).
type knownSaver struct {
	store   KnownGoodStore
	refresh time.Duration
	next    chan []KnownSet
	last    []KnownSet
	onErr   func(error)
}

func newKnownSaver(store KnownGoodStore, refresh time.Duration, onErr func(error)) *knownSaver {
	return &knownSaver{store: store, refresh: refresh, next: make(chan []KnownSet, 1), onErr: onErr}
}

// offer hands the latest sets to the saver, replacing any not written yet.
func (k *knownSaver) offer(sets []KnownSet) {
	for {
		select {
		case k.next <- sets:
			return
		default:
		}
		select {
		case <-k.next:
		default:
		}
	}
}

// run writes offered sets until done is closed; the last offered one is written before it
// returns.
func (k *knownSaver) run(done <-chan struct{}) {
	for {
		select {
		case sets := <-k.next:
			k.save(sets)
		case <-done:
			select {
			case sets := <-k.next:
				k.save(sets)
			default:
			}
			return
		}
	}
}

func (k *knownSaver) save(sets []KnownSet) {
	if k.last != nil && !k.changed(sets) {
		return
	}
	if err := k.store.Save(sets); err != nil {
		k.onErr(fmt.Errorf("save last known good replicas to %s: %w", k.store, err))
		return
	}
	k.onErr(nil)
	k.last = sets
}

func (k *knownSaver) changed(sets []KnownSet) bool {
	if len(sets) != len(k.last) {
		return true
	}
	for i, s := range sets {
		l := k.last[i]
		if s.Tenant != l.Tenant || s.Server != l.Server || s.ConfirmedAt.Sub(l.ConfirmedAt) >= k.refresh ||
			!slices.EqualFunc(s.Replicas, l.Replicas, func(a, b Replica) bool { return a == b }) {
			return true
		}
	}
	return false
}

// age says how long ago a set was confirmed, for messages ("3m20s").
func age(since, now time.Time) string {
	return max(now.Sub(since), 0).Round(time.Second).String()
}
