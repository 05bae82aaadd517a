package server

import (
	"context"
	"errors"
	"hash/maphash"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// EndpointCache serves ClusterLoadAssignments to every node, like go-control-plane's
// LinearCache, but with a cost per change that does not grow with the number of clusters a
// node watches.
//
// Why not LinearCache: Envoy's state-of-the-world EDS request names every cluster, and every
// ACK is a new request. LinearCache compares every named resource on each watch, indexes the
// watch under every name and removes it from every name again, so one replica's change costs
// several map operations per cluster per node (docs/xds.md, Figures, has what that costs).
// This cache:
//
//   - keeps a log of changes with a sequence number, and puts the sequence and a fingerprint
//     of the subscribed names in the state-of-the-world version it sends. An ACK that carries
//     our version and the same fingerprint needs only the changes logged since that sequence:
//     no per-name comparison. Any other request (first, reconnect, new subscription) takes the
//     full comparison, and remembers recent subscription sets so a node that adds one cluster
//     is sent one load assignment, not all of them;
//   - parks waiting watches in one set and, on a change, checks only whether each watch
//     subscribes to the changed names;
//   - marshals each load assignment once per change, for all nodes.
//
// Delta (incremental) watches compare per-resource versions as the protocol intends; they also
// benefit from the parked-watch set and the shared encoding.
type EndpointCache struct {
	prefix string // distinguishes this process's versions from another's
	seed   maphash.Seed

	parking // mu guards what follows
	seq     uint64
	res     map[string]*entry
	log     []change                // ascending by seq
	trimmed uint64                  // changes up to this sequence are no longer in the log
	sotw    map[*sotwWatch]struct{} // parked until answered (see parking)
	delta   map[*deltaWatch]struct{}
	sets    map[string]map[string]struct{} // recent subscription sets by fingerprint
	setFIFO []string
	logMax  int // changes kept in the log (tests lower it)

	// fps remembers the fingerprints of recent requests' name lists by the lists' first
	// element: nameTable gives every request with the same names the same slice.
	fpMu   sync.Mutex
	fps    map[*string]fpEntry
	fpFIFO []*string
}

type fpEntry struct {
	names []string // keeps the list (and so the key) alive
	fp    string
}

type entry struct {
	version string
	any     *anypb.Any
	delta   *discoveryv3.Resource // shared by every delta response
	msg     *endpointv3.ClusterLoadAssignment
}

type change struct {
	seq  uint64
	name string
}

type sotwWatch struct {
	req    *cachev3.Request
	sub    cachev3.Subscription
	fp     string
	resp   chan cachev3.Response
	ticket *ticket
}

type deltaWatch struct {
	req    *cachev3.DeltaRequest
	sub    cachev3.Subscription
	fp     string
	resp   chan cachev3.DeltaResponse
	ticket *ticket
}

// maxSets is how many distinct subscription sets are remembered (Envoys of one fleet usually
// share one).
const maxSets = 16

var _ cachev3.Cache = (*EndpointCache)(nil)

// NewEndpointCache returns an empty cache.
func NewEndpointCache() *EndpointCache {
	return &EndpointCache{
		prefix: strconv.FormatInt(time.Now().UnixNano(), 36),
		seed:   maphash.MakeSeed(),
		res:    map[string]*entry{},
		sotw:   map[*sotwWatch]struct{}{},
		delta:  map[*deltaWatch]struct{}{},
		sets:   map[string]map[string]struct{}{},
		logMax: 1 << 16,
	}
}

// Update sets and removes load assignments, and answers the watches that wait for them.
func (c *EndpointCache) Update(update map[string]*endpointv3.ClusterLoadAssignment, remove []string) error {
	entries := make(map[string]*entry, len(update))
	for name, cla := range update {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
		if err != nil {
			return err
		}
		entries[name] = &entry{any: &anypb.Any{TypeUrl: resourcev3.EndpointType, Value: b}, msg: cla}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	version := c.prefix + ":" + strconv.FormatUint(c.seq, 10)
	changed := make([]string, 0, len(entries)+len(remove))
	for name, e := range entries {
		e.version = version
		e.delta = &discoveryv3.Resource{Name: name, Version: version, Resource: e.any}
		c.res[name] = e
		changed = append(changed, name)
	}
	for _, name := range remove {
		if _, ok := c.res[name]; ok {
			delete(c.res, name)
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	for _, name := range changed {
		c.log = append(c.log, change{seq: c.seq, name: name})
	}
	if len(c.log) > 2*c.logMax {
		cut := len(c.log) - c.logMax
		c.trimmed = c.log[cut-1].seq
		for cut < len(c.log) && c.log[cut].seq == c.trimmed {
			cut++ // keep whole sequences together
		}
		c.log = slices.Clone(c.log[cut:])
	}
	c.notify(changed)
	return nil
}

// Get returns the current load assignments by cluster name.
func (c *EndpointCache) Get() map[string]*endpointv3.ClusterLoadAssignment {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*endpointv3.ClusterLoadAssignment, len(c.res))
	for name, e := range c.res {
		out[name] = e.msg
	}
	return out
}

// notify answers again the parked watches that subscribe to a changed name; each works out
// what it needs from its own version (what changed since), so a watch waiting for its share
// of the budget is answered from the latest state when it gets it. mu is held.
func (c *EndpointCache) notify(changed []string) {
	for w := range c.sotw {
		if subscribesTo(w.sub, changed, func(name string) bool { _, ok := c.res[name]; return ok }) {
			c.answerSotw(w) // state of the world EDS cannot say "removed": only present names count
		}
	}
	for w := range c.delta {
		if subscribesTo(w.sub, changed, func(string) bool { return true }) {
			c.answerDelta(w)
		}
	}
}

// subscribesTo says whether sub covers one of the names that count.
func subscribesTo(sub cachev3.Subscription, names []string, counts func(string) bool) bool {
	subscribed := sub.SubscribedResources()
	for _, name := range names {
		if !counts(name) {
			continue
		}
		if _, ok := subscribed[name]; ok || sub.IsWildcard() {
			return true
		}
	}
	return false
}

// fingerprint identifies a set of names, whatever their order.
func (c *EndpointCache) fingerprint(names map[string]struct{}) string {
	var x uint64
	for n := range names {
		x ^= maphash.String(c.seed, n)
	}
	return strconv.FormatUint(x, 36) + "." + strconv.Itoa(len(names))
}

// requestFingerprint is the fingerprint of a state-of-the-world subscription, which is the
// set of the request's names: remembered for long lists of names that come again as the same
// slice.
func (c *EndpointCache) requestFingerprint(names []string, subscribed map[string]struct{}) string {
	if len(names) < 64 {
		return c.fingerprint(subscribed)
	}
	key := &names[0]
	c.fpMu.Lock()
	if e, ok := c.fps[key]; ok && len(e.names) == len(names) {
		c.fpMu.Unlock()
		return e.fp
	}
	c.fpMu.Unlock()
	fp := c.fingerprint(subscribed)
	c.fpMu.Lock()
	defer c.fpMu.Unlock()
	if c.fps == nil {
		c.fps = map[*string]fpEntry{}
	}
	if _, ok := c.fps[key]; !ok {
		c.fpFIFO = append(c.fpFIFO, key)
		if len(c.fpFIFO) > 64 {
			delete(c.fps, c.fpFIFO[0])
			c.fpFIFO = c.fpFIFO[1:]
		}
	}
	c.fps[key] = fpEntry{names: names, fp: fp}
	return fp
}

// parseVersion reads a version this process sent: its sequence and fingerprint.
func (c *EndpointCache) parseVersion(v string) (seq uint64, fp string, ok bool) {
	prefix, rest, ok1 := strings.Cut(v, ":")
	s, fp, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || prefix != c.prefix {
		return 0, "", false
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, fp, err == nil
}

// changedSince lists the names changed after seq; mu is held.
func (c *EndpointCache) changedSince(seq uint64) []string {
	i := sort.Search(len(c.log), func(i int) bool { return c.log[i].seq > seq })
	var out []string
	for _, ch := range c.log[i:] {
		out = append(out, ch.name)
	}
	return out
}

// rememberSet keeps a copy of a subscription set under its fingerprint; mu is held.
func (c *EndpointCache) rememberSet(fp string, names map[string]struct{}) {
	if _, ok := c.sets[fp]; ok {
		return
	}
	c.sets[fp] = maps.Clone(names)
	c.setFIFO = append(c.setFIFO, fp)
	if len(c.setFIFO) > maxSets {
		delete(c.sets, c.setFIFO[0])
		c.setFIFO = c.setFIFO[1:]
	}
}

// plan lists what a client must be sent: the subscribed resources changed since seq (when it
// is known to have had every subscribed resource as of seq, under fingerprint knownFP), plus
// the subscribed ones it cannot have. removed lists subscribed resources deleted since seq.
// full says the client's knowledge is unknown: everything subscribed is sent. mu is held.
func (c *EndpointCache) plan(subscribed map[string]struct{}, wildcard bool, fp string, seq uint64, knownFP string, known bool) (send, removed []string, full bool) {
	add := func(name string) {
		if _, ok := subscribed[name]; !ok && !wildcard {
			return
		}
		if _, ok := c.res[name]; ok {
			send = append(send, name)
		} else {
			removed = append(removed, name)
		}
	}
	set := c.sets[knownFP]
	switch {
	case known && seq >= c.trimmed && knownFP == fp:
		// An ACK: only what changed since.
		for _, name := range c.changedSince(seq) {
			add(name)
		}
	case known && seq >= c.trimmed && set != nil && !wildcard:
		// The subscription changed: what changed since, and the names it did not have.
		for _, name := range c.changedSince(seq) {
			add(name)
		}
		for name := range subscribed {
			if _, had := set[name]; !had {
				if _, ok := c.res[name]; ok {
					send = append(send, name)
				}
			}
		}
	default:
		full = true
		if wildcard {
			for name := range c.res {
				send = append(send, name)
			}
			break
		}
		for name := range subscribed {
			if _, ok := c.res[name]; ok {
				send = append(send, name)
			}
		}
	}
	if !wildcard {
		c.rememberSet(fp, subscribed)
	}
	return dedupe(send), dedupe(removed), full
}

// CreateWatch implements cachev3.ConfigWatcher for state-of-the-world streams.
func (c *EndpointCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if req.GetTypeUrl() != resourcev3.EndpointType {
		return nil, errors.New("endpoint cache: unexpected type " + req.GetTypeUrl())
	}
	w := &sotwWatch{req: req, sub: sub, fp: "*", resp: out}
	if !sub.IsWildcard() {
		w.fp = c.requestFingerprint(req.GetResourceNames(), sub.SubscribedResources())
	}
	return parkWatch(&c.parking, c.sotw, w, &w.ticket, c.answerSotw), nil
}

// answerSotw sends w what it needs now, or leaves it parked until a change it subscribes to.
// A request that is not an ACK of ours is answered even when empty. mu is held.
func (c *EndpointCache) answerSotw(w *sotwWatch) {
	answerParked(&c.parking, c.sotw, w, &w.ticket, c.answerSotw, func() (*response, bool) {
		seq, knownFP, ours := c.parseVersion(w.req.GetVersionInfo())
		send, _, _ := c.plan(w.sub.SubscribedResources(), w.sub.IsWildcard(), w.fp, seq, knownFP, ours)
		if len(send) == 0 && ours {
			return nil, false
		}
		return c.sotwResponse(w.req, w.fp, send), true
	}, func(r *response) { w.resp <- r })
}

// knownKey is the entry of a delta subscription's returned-resources map in which this cache
// notes what the client has: "<seq>:<fingerprint>" (every subscribed resource as of seq). It
// cannot collide with a cluster name.
const knownKey = "\x00inferplane:known"

// CreateDeltaWatch implements cachev3.ConfigWatcher for delta streams.
func (c *EndpointCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	if req.GetTypeUrl() != resourcev3.EndpointType {
		return nil, errors.New("endpoint cache: unexpected type " + req.GetTypeUrl())
	}
	w := &deltaWatch{req: req, sub: sub, fp: "*", resp: out}
	if !sub.IsWildcard() {
		w.fp = c.fingerprint(sub.SubscribedResources())
	}
	return parkWatch(&c.parking, c.delta, w, &w.ticket, c.answerDelta), nil
}

// answerDelta sends w what it needs now, or leaves it parked. mu is held.
func (c *EndpointCache) answerDelta(w *deltaWatch) {
	answerParked(&c.parking, c.delta, w, &w.ticket, c.answerDelta, func() (*deltaResp, bool) {
		r := c.deltaResponse(w)
		return r, r != nil
	}, func(r *deltaResp) { w.resp <- r })
}

// deltaResponse is what w must be sent now, or nil. mu is held.
func (c *EndpointCache) deltaResponse(w *deltaWatch) *deltaResp {
	subscribed := w.sub.SubscribedResources()
	returned := w.sub.ReturnedResources()
	seq, knownFP, known := c.parseVersion(c.prefix + ":" + returned[knownKey])
	if w.sub.IsWildcard() || !known {
		// Per-resource comparison: the first request (with the versions Envoy already has,
		// after a reconnect) and wildcard subscriptions.
		var names []string
		if w.sub.IsWildcard() {
			for name := range c.res {
				names = append(names, name)
			}
		} else {
			for name := range subscribed {
				names = append(names, name)
			}
		}
		for name := range returned {
			if name != knownKey {
				names = append(names, name) // to report the removed ones
			}
		}
		// A first wildcard request is answered even when empty: Envoy waits for it.
		first := w.sub.IsWildcard() && w.req.GetResponseNonce() == ""
		return c.deltaFull(w.req, returned, dedupe(names), w.fp, first)
	}
	send, removed, full := c.plan(subscribed, false, w.fp, seq, knownFP, true)
	if full {
		// What the client has is unknown after all: compare versions.
		return c.deltaFull(w.req, returned, send, w.fp, false)
	}
	return c.deltaIncrement(w.req, w.fp, send, removed)
}

// Fetch is not supported: Envoy uses streams.
func (c *EndpointCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("endpoint cache: fetch is not supported")
}

func dedupe(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}

// sotwResponse answers with the named resources; mu is held.
func (c *EndpointCache) sotwResponse(req *cachev3.Request, fp string, names []string) *response {
	r := &response{req: req, version: c.prefix + ":" + strconv.FormatUint(c.seq, 10) + ":" + fp,
		returned: make(map[string]string, len(names))}
	for _, name := range names {
		e := c.res[name]
		r.resources = append(r.resources, e.any)
		r.returned[name] = e.version
	}
	return r
}

// deltaFull compares the client's per-resource versions with the cache for the named
// resources; nil when there is nothing to say. mu is held.
func (c *EndpointCache) deltaFull(req *cachev3.DeltaRequest, returned map[string]string, names []string, fp string, evenIfEmpty bool) *deltaResp {
	r := &deltaResp{req: req, version: c.prefix + ":" + strconv.FormatUint(c.seq, 10)}
	for _, name := range names {
		known, has := returned[name]
		switch e, ok := c.res[name]; {
		case ok && (!has || known != e.version):
			r.resources = append(r.resources, e.delta)
		case !ok && has:
			r.removed = append(r.removed, name)
		}
	}
	if len(r.resources) == 0 && len(r.removed) == 0 && !evenIfEmpty {
		return nil
	}
	r.next = c.knownMap(fp)
	return r
}

// deltaIncrement sends the given resources and removals to a client whose knowledge this
// cache tracks; nil when there is nothing to say. mu is held.
func (c *EndpointCache) deltaIncrement(req *cachev3.DeltaRequest, fp string, send, removed []string) *deltaResp {
	if len(send)+len(removed) == 0 {
		return nil
	}
	r := &deltaResp{req: req, version: c.prefix + ":" + strconv.FormatUint(c.seq, 10), removed: removed, next: c.knownMap(fp)}
	for _, name := range send {
		r.resources = append(r.resources, c.res[name].delta)
	}
	return r
}

// knownMap is the returned-resources map of a delta response: after it, the client has every
// subscribed resource as of the current sequence. (Wildcard subscriptions keep no such note:
// they are always compared in full.) mu is held.
func (c *EndpointCache) knownMap(fp string) map[string]string {
	if fp == "*" {
		m := make(map[string]string, len(c.res))
		for name, e := range c.res {
			m[name] = e.version
		}
		return m
	}
	return map[string]string{knownKey: strconv.FormatUint(c.seq, 10) + ":" + fp}
}

// response is a state-of-the-world answer.
type response struct {
	req       *cachev3.Request
	version   string
	resources []*anypb.Any
	returned  map[string]string
}

func (r *response) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	// A new message each time: the server sets its nonce. The resources are shared.
	return &discoveryv3.DiscoveryResponse{VersionInfo: r.version, Resources: r.resources, TypeUrl: r.req.GetTypeUrl()}, nil
}

// size is the response's resources' encoded size.
func (r *response) size() int64 {
	var n int64
	for _, a := range r.resources {
		n += int64(len(a.GetValue()))
	}
	return n
}
func (r *response) GetRequest() *discoveryv3.DiscoveryRequest { return r.req }
func (r *response) GetVersion() (string, error)               { return r.version, nil }
func (r *response) GetResponseVersion() string                { return r.version }
func (r *response) GetReturnedResources() map[string]string   { return r.returned }
func (r *response) GetContext() context.Context               { return context.Background() }

// deltaResp is an incremental answer.
type deltaResp struct {
	req       *cachev3.DeltaRequest
	version   string
	resources []*discoveryv3.Resource
	removed   []string
	next      map[string]string
}

func (r *deltaResp) GetDeltaDiscoveryResponse() (*discoveryv3.DeltaDiscoveryResponse, error) {
	return &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: r.version, Resources: r.resources,
		RemovedResources: r.removed, TypeUrl: r.req.GetTypeUrl()}, nil
}

// size is the response's resources' encoded size.
func (r *deltaResp) size() int64 {
	var n int64
	for _, res := range r.resources {
		n += int64(len(res.GetResource().GetValue()) + len(res.GetName()) + len(res.GetVersion()))
	}
	return n
}
func (r *deltaResp) GetDeltaRequest() *discoveryv3.DeltaDiscoveryRequest { return r.req }
func (r *deltaResp) GetSystemVersion() (string, error)                   { return r.version, nil }
func (r *deltaResp) GetResponseVersion() string                          { return r.version }
func (r *deltaResp) GetNextVersionMap() map[string]string                { return r.next }
func (r *deltaResp) GetReturnedResources() map[string]string             { return r.next }
func (r *deltaResp) GetContext() context.Context                         { return context.Background() }
