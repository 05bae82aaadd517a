package keys

import (
	"crypto/hmac"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/inferplane/inferplane/auth/limits"
)

// Index is the in-memory view of a store that the auth check reads: one map lookup per
// request, no I/O. A Syncer keeps it current.
//
// It holds only what the check needs, in pointer-free slots (tenant and endpoint names are
// interned in a small table), so the garbage collector never scans it: with 100,000 keys a
// pointer-rich map would be walked on every GC cycle of a busy server.
type Index struct {
	mu    sync.RWMutex
	byID  map[uint64]slot
	names []string          // interned tenant and endpoint names; 0 is ""
	nameN map[string]uint32 // name -> position in names
	// lims holds the limits of the keys that have their own (pointer-free, like byID).
	lims map[uint64]limits.Set
}

type slot struct {
	hash             [32]byte
	hashOK           bool // the stored hash decoded; a record with a corrupt one never matches
	tenant, endpoint uint32
	created          int64 // Unix nanoseconds; 0 = unset
	expires, revoked int64
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{byID: map[uint64]slot{}, names: []string{""}, nameN: map[string]uint32{"": 0}, lims: map[uint64]limits.Set{}}
}

func idNum(id string) (uint64, bool) {
	if !ValidID(id) {
		return 0, false
	}
	n, err := strconv.ParseUint(id, 16, 64)
	return n, err == nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// intern returns the position of s in x.names; callers hold the write lock.
func (x *Index) intern(s string) uint32 {
	if i, ok := x.nameN[s]; ok {
		return i
	}
	x.names = append(x.names, s)
	x.nameN[s] = uint32(len(x.names) - 1)
	return uint32(len(x.names) - 1)
}

func (x *Index) toSlot(r Record) slot {
	s := slot{tenant: x.intern(r.Tenant), endpoint: x.intern(r.Endpoint),
		created: nanos(r.CreatedAt), expires: nanos(r.ExpiresAt), revoked: nanos(r.RevokedAt)}
	if b, err := hex.DecodeString(r.Hash); err == nil && len(b) == len(s.hash) {
		copy(s.hash[:], b)
		s.hashOK = true
	}
	return s
}

// recordNoLimits is the record of slot s without its hash and limits (the check's hot path:
// no allocation beyond the id string).
func (x *Index) recordNoLimits(id uint64, s slot) Record {
	return Record{
		ID: idString(id), Tenant: x.names[s.tenant], Endpoint: x.names[s.endpoint],
		CreatedAt: fromNanos(s.created), ExpiresAt: fromNanos(s.expires), RevokedAt: fromNanos(s.revoked),
	}
}

func (x *Index) record(id uint64, s slot, withHash bool) Record {
	r := Record{
		ID: idString(id), Tenant: x.names[s.tenant], Endpoint: x.names[s.endpoint],
		CreatedAt: fromNanos(s.created), ExpiresAt: fromNanos(s.expires), RevokedAt: fromNanos(s.revoked),
	}
	if withHash && s.hashOK {
		r.Hash = hex.EncodeToString(s.hash[:])
	}
	if l, ok := x.lims[id]; ok {
		r.Limits = l.Spec()
	}
	return r
}

// Limits returns a key's tenant and its own limits (ok false for an unknown id).
func (x *Index) Limits(id string) (tenant string, l limits.Set, ok bool) {
	n, ok := idNum(id)
	if !ok {
		return "", l, false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	s, ok := x.byID[n]
	if !ok {
		return "", l, false
	}
	return x.names[s.tenant], x.lims[n], true
}

// EachLimited calls f for every key that has limits of its own (under the read lock: f must
// not call the index).
func (x *Index) EachLimited(f func(id, tenant string, l limits.Set)) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for n, l := range x.lims {
		f(idString(n), x.names[x.byID[n].tenant], l)
	}
}

func idString(id uint64) string {
	var b [idBytes]byte
	binary.BigEndian.PutUint64(b[:], id)
	return hex.EncodeToString(b[:])
}

// Replace swaps the whole content for recs (records with a malformed id are skipped: no key
// can carry one).
func (x *Index) Replace(recs []Record) {
	n := &Index{byID: make(map[uint64]slot, len(recs)), names: []string{""}, nameN: map[string]uint32{"": 0}, lims: map[uint64]limits.Set{}}
	for _, r := range recs {
		if id, ok := idNum(r.ID); ok {
			n.byID[id] = n.toSlot(r)
			if s := limits.FromSpec(r.Limits); !s.Empty() {
				n.lims[id] = s
			}
		}
	}
	x.mu.Lock()
	x.byID, x.names, x.nameN, x.lims = n.byID, n.names, n.nameN, n.lims
	x.mu.Unlock()
}

// Upsert adds or replaces one record.
func (x *Index) Upsert(r Record) {
	id, ok := idNum(r.ID)
	if !ok {
		return
	}
	x.mu.Lock()
	x.byID[id] = x.toSlot(r)
	if s := limits.FromSpec(r.Limits); !s.Empty() {
		x.lims[id] = s
	} else {
		delete(x.lims, id)
	}
	x.mu.Unlock()
}

// Delete drops a record (a key object deleted outright rather than revoked).
func (x *Index) Delete(id string) {
	if n, ok := idNum(id); ok {
		x.mu.Lock()
		delete(x.byID, n)
		delete(x.lims, n)
		x.mu.Unlock()
	}
}

// Len is the number of records.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byID)
}

// Get returns the record with id, as the index keeps it (without the display name).
func (x *Index) Get(id string) (Record, bool) {
	n, ok := idNum(id)
	if !ok {
		return Record{}, false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	s, ok := x.byID[n]
	if !ok {
		return Record{}, false
	}
	return x.record(n, s, true), true
}

// Code is the HTTP status of a decision.
type Code int

const (
	Allowed         Code = 200
	Unauthenticated Code = 401
	Forbidden       Code = 403
)

// Decision is the outcome of checking a key against an endpoint. Reason never contains the
// key; it is safe to log and to show the caller. Detail adds what only the operator may read
// (the log): a caller is not told whose key it holds.
type Decision struct {
	Code   Code
	Reason string
	Detail string
	// Key is the matched record as the index keeps it (zero when the key is missing or
	// unknown), without its limits, which are in Limits.
	Key    Record
	Limits limits.Set
	// Shared is a call with another tenant's key to a shared endpoint of a provider tenant
	// (the shared serving tier): Key.Tenant is the caller, charged for it.
	Shared bool
}

// Verifier decides whether a key may call an endpoint.
type Verifier struct {
	Hasher *Hasher
	Index  *Index
	// Shared, when set, says whether a key of tenant caller may call the endpoint job of
	// tenant: a shared endpoint of a provider tenant whose model caller's catalogue offers
	// (limits.Sharing.SharedCall). Nil: every endpoint takes only its own tenant's keys.
	Shared func(caller, tenant, job string) bool
}

// Verify checks key (as the client sent it, "" when absent) against the tenant and job of
// the endpoint called. Unknown ids still cost one HMAC, so timing tells nothing about which
// ids exist; the stored hash is compared in constant time.
func (v *Verifier) Verify(key, tenant, job string, now time.Time) Decision {
	if key == "" {
		return Decision{Code: Unauthenticated, Reason: "missing API key: send Authorization: Bearer <key> or X-API-Key: <key>"}
	}
	id, err := parseIDNum(key)
	if err != nil {
		return Decision{Code: Unauthenticated, Reason: "invalid API key"}
	}
	sum := v.Hasher.Sum(key)
	x := v.Index
	x.mu.RLock()
	s, found := x.byID[id]
	var r Record
	var lim limits.Set
	if found {
		r = x.recordNoLimits(id, s)
		lim = x.lims[id]
	}
	x.mu.RUnlock()
	if !found || !s.hashOK || !hmac.Equal(sum[:], s.hash[:]) {
		return Decision{Code: Unauthenticated, Reason: "invalid API key"}
	}
	switch r.Status(now) {
	case StatusRevoked:
		return Decision{Code: Forbidden, Reason: "API key " + r.ID + " is revoked", Key: r}
	case StatusExpired:
		return Decision{Code: Forbidden, Reason: "API key " + r.ID + " expired at " + r.ExpiresAt.Format(time.RFC3339), Key: r}
	}
	notAllowed := "API key " + r.ID + " is not allowed on this endpoint"
	if r.Tenant != tenant {
		// A key limited to one endpoint of its own tenant stays there; any other key of a
		// tenant whose catalogue offers a shared endpoint's model may call it.
		if r.Endpoint == "" && v.Shared != nil && v.Shared(r.Tenant, tenant, job) {
			return Decision{Code: Allowed, Reason: "ok", Key: r, Limits: lim, Shared: true}
		}
		return Decision{Code: Forbidden, Reason: notAllowed, Detail: "the key is another tenant's", Key: r}
	}
	if r.Endpoint != "" && r.Endpoint != job {
		return Decision{Code: Forbidden, Reason: notAllowed, Detail: "the key is for another endpoint of its tenant", Key: r}
	}
	return Decision{Code: Allowed, Reason: "ok", Key: r, Limits: lim}
}
