package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/inferplane/inferplane/xds/resources"
)

// configCache serves listeners, routes and clusters. Every Envoy node gets the same
// configuration (nothing in it depends on the node), so each resource is encoded once per
// publish and the same bytes go to every node.
//
// Why not go-control-plane's snapshot cache: it builds every response from the resource
// protos and encodes them again for each node, so 100 nodes connecting at once cost 100
// encodings of the whole configuration, all alive together, on top of gRPC's own buffers:
// most of the initial sync's memory peak (docs/xds.md, Figures). This cache answers exactly as the snapshot cache does in ADS mode:
// the same versions (state of the world: the configuration's version; delta: a hash of each
// resource's encoding, as go-control-plane computes it), the same resources, and the same
// rules for when to answer. Large responses wait for their share of a budget of bytes in
// flight (see budget).
type configCache struct {
	types []string // the types it serves, in the order a publish answers them
	parking
	cur   *config // nil until the first publish; guarded by mu
	sotw  map[*configWatch]struct{}
	delta map[*configDeltaWatch]struct{}
}

// config is one published configuration, encoded.
type config struct {
	version string
	byType  map[string]*configType
}

type configType struct {
	names []string // sorted
	res   map[string]*configEntry
}

type configEntry struct {
	any   *anypb.Any
	delta *discoveryv3.Resource // shared by every delta response
}

type configWatch struct {
	req    *cachev3.Request
	sub    cachev3.Subscription
	out    chan cachev3.Response
	ticket *ticket
}

type configDeltaWatch struct {
	req    *cachev3.DeltaRequest
	sub    cachev3.Subscription
	out    chan cachev3.DeltaResponse
	ticket *ticket
}

var _ cachev3.Cache = (*configCache)(nil)

// configTypes are the types the configuration cache serves, in the order go-control-plane's
// snapshot cache answers them on a publish (clusters before listeners before routes).
var configTypes = []string{resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.RouteType}

// allTypes is the order in which resources are hashed into a version (as the configuration's
// version has always been computed: listeners, routes, clusters), then secrets.
var allTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.SecretType}

// newConfigCache returns an empty cache of listeners, routes and clusters; watches wait for the
// first publish.
func newConfigCache() *configCache { return newCache(configTypes...) }

// newSecretCache returns an empty cache of SDS secrets (TLS certificates).
func newSecretCache() *configCache { return newCache(resourcev3.SecretType) }

func newCache(types ...string) *configCache {
	return &configCache{types: types, sotw: map[*configWatch]struct{}{}, delta: map[*configDeltaWatch]struct{}{}}
}

// encodeConfig encodes a resource set's listeners, routes and clusters. Its version hashes
// their deterministic encodings: the same configuration has the same version in every server
// process, so an Envoy that reconnects to another replica of the xDS server is not sent what
// it already has.
func encodeConfig(set *resources.Set) (*config, error) {
	return encodeTypes(map[string][]types.Resource{
		resourcev3.ListenerType: asResources(set.Listeners),
		resourcev3.RouteType:    asResources(set.Routes),
		resourcev3.ClusterType:  asResources(set.Clusters),
	})
}

// encodeSecrets encodes a resource set's SDS secrets, versioned like encodeConfig.
func encodeSecrets(set *resources.Set) (*config, error) {
	return encodeTypes(map[string][]types.Resource{resourcev3.SecretType: asResources(set.Secrets)})
}

func asResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
}

// encodeTypes encodes resources by type, in the order of allTypes.
func encodeTypes(byType map[string][]types.Resource) (*config, error) {
	h := sha256.New()
	cfg := &config{byType: map[string]*configType{}}
	add := func(typeURL string, r types.Resource) error {
		b, err := cachev3.MarshalResource(r) // deterministic
		if err != nil {
			return err
		}
		h.Write([]byte(strconv.Itoa(len(b))))
		h.Write(b)
		ct := cfg.byType[typeURL]
		if ct == nil {
			ct = &configType{res: map[string]*configEntry{}}
			cfg.byType[typeURL] = ct
		}
		name := cachev3.GetResourceName(r)
		if _, dup := ct.res[name]; !dup {
			ct.names = append(ct.names, name)
		}
		a := &anypb.Any{TypeUrl: typeURL, Value: b}
		ct.res[name] = &configEntry{any: a, delta: &discoveryv3.Resource{Name: name, Version: cachev3.HashResource(b), Resource: a}}
		return nil
	}
	for _, t := range allTypes {
		for _, r := range byType[t] {
			if err := add(t, r); err != nil {
				return nil, err
			}
		}
	}
	for _, ct := range cfg.byType {
		slices.Sort(ct.names)
	}
	cfg.version = hex.EncodeToString(h.Sum(nil))[:16]
	return cfg, nil
}

// publish makes cfg the configuration of every node and answers the watches it changes, by
// type in the order clusters, listeners, routes.
func (c *configCache) publish(cfg *config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = cfg
	for _, t := range c.types {
		for w := range c.sotw {
			if w.req.GetTypeUrl() == t {
				c.answerSotw(w)
			}
		}
		for w := range c.delta {
			if w.req.GetTypeUrl() == t {
				c.answerDelta(w)
			}
		}
	}
}

// Version is the current configuration's version ("" before the first publish).
func (c *configCache) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return ""
	}
	return c.cur.version
}

func (c *configCache) checkType(typeURL string) error {
	if !slices.Contains(c.types, typeURL) {
		return errors.New("config cache: unexpected type " + typeURL)
	}
	return nil
}

// CreateWatch implements cachev3.ConfigWatcher for state-of-the-world streams.
func (c *configCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if err := c.checkType(req.GetTypeUrl()); err != nil {
		return nil, err
	}
	w := &configWatch{req: req, sub: sub, out: out}
	return parkWatch(&c.parking, c.sotw, w, &w.ticket, c.answerSotw), nil
}

// answerSotw sends w its response if it has one and the budget allows; otherwise w stays
// parked. mu is held.
func (c *configCache) answerSotw(w *configWatch) {
	answerParked(&c.parking, c.sotw, w, &w.ticket, c.answerSotw, func() (*response, bool) {
		r := c.sotwResponse(w)
		return r, r != nil
	}, func(r *response) { w.out <- r })
}

// sotwResponse is what w must be sent now, or nil. mu is held.
func (c *configCache) sotwResponse(w *configWatch) *response {
	cur := c.cur
	if cur == nil {
		return nil
	}
	ct := cur.byType[w.req.GetTypeUrl()]
	if ct == nil {
		ct = &configType{}
	}
	if w.req.GetVersionInfo() == cur.version {
		// The node has this version: answer only if it subscribes to a resource it was not
		// sent (a new name).
		returned := w.sub.ReturnedResources()
		missing := false
		if w.sub.IsWildcard() {
			for _, name := range ct.names {
				if _, ok := returned[name]; !ok {
					missing = true
					break
				}
			}
		} else {
			for name := range w.sub.SubscribedResources() {
				_, exists := ct.res[name]
				if _, ok := returned[name]; !ok && exists {
					missing = true
					break
				}
			}
		}
		if !missing {
			return nil
		}
	}
	names := ct.names
	if requested := w.req.GetResourceNames(); len(requested) != 0 {
		// ADS: a request that names resources is answered only when it names all of them
		// (until then the response could not be consistent); it waits for a request, or a
		// configuration, that does.
		set := make(map[string]struct{}, len(requested))
		for _, n := range requested {
			set[n] = struct{}{}
		}
		for _, name := range ct.names {
			if _, ok := set[name]; !ok {
				return nil
			}
		}
	}
	r := &response{req: w.req, version: cur.version, returned: make(map[string]string, len(names))}
	r.resources = make([]*anypb.Any, 0, len(names))
	for _, name := range names {
		r.resources = append(r.resources, ct.res[name].any)
		r.returned[name] = cur.version
	}
	return r
}

// CreateDeltaWatch implements cachev3.ConfigWatcher for delta streams.
func (c *configCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	if err := c.checkType(req.GetTypeUrl()); err != nil {
		return nil, err
	}
	w := &configDeltaWatch{req: req, sub: sub, out: out}
	return parkWatch(&c.parking, c.delta, w, &w.ticket, c.answerDelta), nil
}

// answerDelta is answerSotw for delta streams; mu is held.
func (c *configCache) answerDelta(w *configDeltaWatch) {
	answerParked(&c.parking, c.delta, w, &w.ticket, c.answerDelta, func() (*deltaResp, bool) {
		r := c.deltaResponse(w)
		return r, r != nil
	}, func(r *deltaResp) { w.out <- r })
}

// deltaResponse compares the resources' versions with those the node has; nil when there is
// nothing to say. mu is held.
func (c *configCache) deltaResponse(w *configDeltaWatch) *deltaResp {
	cur := c.cur
	if cur == nil {
		return nil
	}
	ct := cur.byType[w.req.GetTypeUrl()]
	if ct == nil {
		ct = &configType{}
	}
	returned := w.sub.ReturnedResources()
	r := &deltaResp{req: w.req, version: cur.version}
	if w.sub.IsWildcard() {
		r.next = make(map[string]string, len(ct.names))
		for _, name := range ct.names {
			e := ct.res[name]
			r.next[name] = e.delta.Version
			if prev, ok := returned[name]; !ok || prev != e.delta.Version {
				r.resources = append(r.resources, e.delta)
			}
		}
		for name := range returned {
			if _, ok := ct.res[name]; !ok {
				r.removed = append(r.removed, name)
			}
		}
	} else {
		subscribed := w.sub.SubscribedResources()
		r.next = make(map[string]string, len(subscribed))
		for name := range subscribed {
			prev, had := returned[name]
			if e, ok := ct.res[name]; ok {
				r.next[name] = e.delta.Version
				if prev != e.delta.Version || !had {
					r.resources = append(r.resources, e.delta)
				}
			} else if had {
				r.removed = append(r.removed, name)
			}
		}
		slices.SortFunc(r.resources, func(a, b *discoveryv3.Resource) int { return strings.Compare(a.Name, b.Name) })
	}
	slices.Sort(r.removed)
	// The first wildcard request is answered even when empty: Envoy waits for it.
	if len(r.resources) == 0 && len(r.removed) == 0 && !(w.sub.IsWildcard() && w.req.GetResponseNonce() == "") {
		return nil
	}
	return r
}

// Fetch is not supported: Envoy uses streams.
func (c *configCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("config cache: fetch is not supported")
}
