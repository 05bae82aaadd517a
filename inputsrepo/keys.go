package inputsrepo

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TrailerRequest is the commit trailer that records a write's idempotency key (hashed) and,
// after a space, the hash of the request it came with, when the caller gave one.
const TrailerRequest = "Inferplane-Request"

// maxScan bounds every walk back through the history.
const maxScan = 10000

// hashKey is what the trailer records: the key's text (which may carry a caller's id) never
// reaches git, and every recorded key has the same shape.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Trailers reads the trailers of a commit message: the "Key: value" lines of its last
// paragraph (the first value of each key).
func Trailers(msg string) map[string]string {
	paras := strings.Split(strings.TrimSpace(msg), "\n\n")
	if len(paras) < 2 {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(paras[len(paras)-1], "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil // not a trailer paragraph
		}
		if _, seen := out[k]; !seen {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// keyIndex maps the idempotency keys recorded in the branch's recent history to their
// commits. It is only a cache of what git holds: rebuilt from the history on start, extended
// by the commits each fetch brings, and rebuilt when the branch was rewritten.
type keyIndex struct {
	mu      sync.Mutex
	head    plumbing.Hash
	commits map[string]keyed
}

type keyed struct {
	commit  plumbing.Hash
	when    time.Time
	request string // the request's hash, "" when none was recorded
}

func newKeyIndex() *keyIndex { return &keyIndex{commits: map[string]keyed{}} }

// update indexes the commits from head back to the last indexed head; when that is not found
// (the first fetch, a rewritten branch) the history back to since (and at most maxScan
// commits) is indexed afresh.
// Each new commit's writer (TrailerWriter) is told to writer.
func (k *keyIndex) update(head *object.Commit, since time.Time, writer func(id string, at time.Time)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if head.Hash == k.head {
		return nil
	}
	found := map[string]keyed{}
	reached := false
	c := head
	for n := 0; c != nil && n < maxScan; n++ {
		if c.Hash == k.head {
			reached = true
			break
		}
		when := c.Committer.When
		if when.Before(since) {
			break
		}
		trailers := Trailers(c.Message)
		writer(trailers[TrailerWriter], when)
		if v := trailers[TrailerRequest]; v != "" {
			key, request, _ := strings.Cut(v, " ")
			found[key] = keyed{commit: c.Hash, when: when, request: request} // walking back: the oldest wins
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		var err error
		if c, err = c.Parent(0); err != nil {
			return err
		}
	}
	if !reached {
		k.commits = map[string]keyed{}
	}
	for key, v := range k.commits {
		if v.when.Before(since) {
			delete(k.commits, key)
		}
	}
	for key, v := range found {
		if _, older := k.commits[key]; !older {
			k.commits[key] = v
		}
	}
	k.head = head.Hash
	return nil
}

// find returns what recorded key, unless it is older than since.
func (k *keyIndex) find(key string, since time.Time) (keyed, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.commits[key]
	if !ok || v.when.Before(since) {
		return keyed{}, false
	}
	return v, true
}
