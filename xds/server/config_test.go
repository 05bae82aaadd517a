package server

import (
	"context"
	"maps"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsstream "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/xds/resources"
)

// The config cache must answer exactly as go-control-plane's snapshot cache (ADS mode, one
// snapshot per node) did before it: these tests put the same requests to both, with the same
// configuration, and compare what each sends: nothing, or the same version, the same resource
// bytes, and the same record of what the node now has.

type oneNode struct{}

func (oneNode) ID(*corev3.Node) string { return "n" }

// pair is the snapshot cache and the config cache with the same configuration.
type pair struct {
	t    *testing.T
	snap cachev3.SnapshotCache
	ours *configCache
}

func newPair(t *testing.T) *pair {
	return &pair{t: t, snap: cachev3.NewSnapshotCache(true, oneNode{}, nil), ours: newConfigCache()}
}

func (p *pair) publish(set *resources.Set) string {
	cfg, err := encodeConfig(set)
	require.NoError(p.t, err)
	snap, err := cachev3.NewSnapshot(cfg.version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: toResources(set.Listeners),
		resourcev3.RouteType:    toResources(set.Routes),
		resourcev3.ClusterType:  toResources(set.Clusters),
	})
	require.NoError(p.t, err)
	require.NoError(p.t, p.snap.SetSnapshot(context.Background(), "n", snap))
	p.ours.publish(cfg)
	return cfg.version
}

func toResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
}

// sotwAnswer is what a state-of-the-world response says, in comparable form.
type sotwAnswer struct {
	version   string
	resources []string // encoded resources, sorted
	returned  map[string]string
}

func sotwOf(t *testing.T, ch chan cachev3.Response) *sotwAnswer {
	select {
	case r := <-ch:
		d, err := r.GetDiscoveryResponse()
		require.NoError(t, err)
		a := &sotwAnswer{version: d.VersionInfo, returned: r.GetReturnedResources()}
		for _, res := range d.Resources {
			assert.Equal(t, r.GetRequest().GetTypeUrl(), res.TypeUrl)
			a.resources = append(a.resources, string(res.Value))
		}
		slices.Sort(a.resources)
		return a
	default:
		return nil
	}
}

type deltaAnswer struct {
	version   string
	resources map[string]string // name -> version + encoding
	removed   []string
	next      map[string]string
}

func deltaOf(t *testing.T, ch chan cachev3.DeltaResponse) *deltaAnswer {
	select {
	case r := <-ch:
		d, err := r.GetDeltaDiscoveryResponse()
		require.NoError(t, err)
		a := &deltaAnswer{version: d.SystemVersionInfo, resources: map[string]string{}, removed: slices.Sorted(slices.Values(d.RemovedResources)),
			next: r.GetReturnedResources()}
		for _, res := range d.Resources {
			a.resources[res.Name] = res.Version + "|" + string(res.Resource.GetValue())
		}
		return a
	default:
		return nil
	}
}

func TestConfigCacheAnswersLikeTheSnapshotCache(t *testing.T) {
	a := build(t, endpoint("chat", "10.0.0.1:8000"))
	b := build(t, endpoint("chat", "10.0.0.1:8000"), endpoint("embed", "10.0.1.1:8000"))
	all := func(typeURL string, set *resources.Set, version string) map[string]string {
		cfg, err := encodeConfig(set)
		require.NoError(t, err)
		m := map[string]string{}
		for _, n := range cfg.byType[typeURL].names {
			m[n] = version
		}
		return m
	}
	hashes := func(typeURL string, set *resources.Set) map[string]string {
		cfg, err := encodeConfig(set)
		require.NoError(t, err)
		m := map[string]string{}
		for n, e := range cfg.byType[typeURL].res {
			m[n] = e.delta.Version
		}
		return m
	}
	va := newPair(t).publish(a)

	sotw := []struct {
		name     string
		typeURL  string
		names    []string
		version  string
		returned map[string]string
	}{
		{"first cluster request", resourcev3.ClusterType, nil, "", nil},
		{"clusters at the current version", resourcev3.ClusterType, nil, va, all(resourcev3.ClusterType, a, va)},
		{"clusters at the current version, none returned", resourcev3.ClusterType, nil, va, nil},
		{"clusters at another version", resourcev3.ClusterType, nil, "old", all(resourcev3.ClusterType, a, "old")},
		{"first listener request", resourcev3.ListenerType, nil, "", nil},
		{"routes by name", resourcev3.RouteType, []string{resources.RouteConfigName}, "", nil},
		{"routes by name, current", resourcev3.RouteType, []string{resources.RouteConfigName}, va, all(resourcev3.RouteType, a, va)},
		{"routes not naming all", resourcev3.RouteType, []string{"other"}, "", nil},
		{"routes naming more", resourcev3.RouteType, []string{resources.RouteConfigName, "other"}, "", nil},
		{"explicit wildcard", resourcev3.ClusterType, []string{"*"}, va, nil},
	}
	for _, tc := range sotw {
		t.Run("sotw/"+tc.name, func(t *testing.T) {
			p := newPair(t)
			p.publish(a)
			req := &cachev3.Request{Node: &corev3.Node{Id: "n"}, TypeUrl: tc.typeURL, ResourceNames: tc.names, VersionInfo: tc.version}
			sub := xdsstream.NewSotwSubscription(tc.names, true)
			if tc.returned != nil {
				sub.SetReturnedResources(maps.Clone(tc.returned))
			}
			theirs, ours := make(chan cachev3.Response, 1), make(chan cachev3.Response, 1)
			_, err := p.snap.CreateWatch(req, sub, theirs)
			require.NoError(t, err)
			_, err = p.ours.CreateWatch(req, sub, ours)
			require.NoError(t, err)
			want := sotwOf(t, theirs)
			assert.Equal(t, want, sotwOf(t, ours), "at once")
			if want != nil {
				return
			}
			// Both wait; a new configuration answers both (or neither).
			p.publish(b)
			assert.Equal(t, sotwOf(t, theirs), sotwOf(t, ours), "after a publish")
		})
	}

	ha := hashes(resourcev3.ClusterType, a)
	stale := maps.Clone(ha)
	stale["acme/chat"] = "stale"
	stale["acme/gone"] = "v"
	delta := []struct {
		name      string
		typeURL   string
		subscribe []string
		initial   map[string]string
		nonce     string
	}{
		{"first cluster request", resourcev3.ClusterType, nil, nil, ""},
		{"reconnect with the current clusters", resourcev3.ClusterType, nil, ha, ""},
		{"current clusters, later request", resourcev3.ClusterType, nil, ha, "1"},
		{"a stale and a removed cluster", resourcev3.ClusterType, nil, stale, "1"},
		{"routes by name", resourcev3.RouteType, []string{resources.RouteConfigName}, nil, ""},
		{"routes by name, current", resourcev3.RouteType, []string{resources.RouteConfigName}, hashes(resourcev3.RouteType, a), "1"},
		{"a route that is gone", resourcev3.RouteType, []string{"other"}, map[string]string{"other": "v"}, "1"},
		{"a route that never was", resourcev3.RouteType, []string{"other"}, nil, "1"},
	}
	for _, tc := range delta {
		t.Run("delta/"+tc.name, func(t *testing.T) {
			p := newPair(t)
			p.publish(a)
			req := &cachev3.DeltaRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: tc.typeURL, ResourceNamesSubscribe: tc.subscribe,
				ResponseNonce: tc.nonce}
			sub := xdsstream.NewDeltaSubscription(tc.subscribe, nil, maps.Clone(tc.initial), true)
			theirs, ours := make(chan cachev3.DeltaResponse, 1), make(chan cachev3.DeltaResponse, 1)
			_, err := p.snap.CreateDeltaWatch(req, sub, theirs)
			require.NoError(t, err)
			_, err = p.ours.CreateDeltaWatch(req, sub, ours)
			require.NoError(t, err)
			want := deltaOf(t, theirs)
			assert.Equal(t, want, deltaOf(t, ours), "at once")
			if want != nil {
				return
			}
			p.publish(b)
			assert.Equal(t, deltaOf(t, theirs), deltaOf(t, ours), "after a publish")
		})
	}
}

// A cancelled watch is not answered.
func TestConfigCacheCancel(t *testing.T) {
	c := newConfigCache()
	out := make(chan cachev3.Response, 1)
	cancel, err := c.CreateWatch(&cachev3.Request{TypeUrl: resourcev3.ClusterType}, xdsstream.NewSotwSubscription(nil, true), out)
	require.NoError(t, err)
	cancel()
	cfg, err := encodeConfig(build(t, endpoint("chat", "10.0.0.1:8000")))
	require.NoError(t, err)
	c.publish(cfg)
	assert.Nil(t, sotwOf(t, out))

	_, err = c.CreateWatch(&cachev3.Request{TypeUrl: resourcev3.EndpointType}, xdsstream.NewSotwSubscription(nil, true), out)
	assert.ErrorContains(t, err, "unexpected type")
}
