package inputsrepo

import (
	"errors"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// guarded lets snapshots be read while a write fetches: go-git's memory storage is plain maps,
// so every read takes the read lock and every store (a fetch holds the write lock throughout)
// the write lock.
type guarded struct {
	mu *sync.RWMutex
	s  storer.EncodedObjectStorer
}

func (g guarded) NewEncodedObject() plumbing.EncodedObject { return g.s.NewEncodedObject() }

func (g guarded) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.s.SetEncodedObject(o)
}

func (g guarded) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.s.EncodedObject(t, h)
}

// IterEncodedObjects would hand out an iterator over maps a fetch may change: not offered.
func (g guarded) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("inputsrepo: iterating every object is not supported")
}

func (g guarded) HasEncodedObject(h plumbing.Hash) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.s.HasEncodedObject(h)
}

func (g guarded) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.s.EncodedObjectSize(h)
}

func (g guarded) AddAlternate(string) error {
	return errors.New("inputsrepo: alternates are not supported")
}
