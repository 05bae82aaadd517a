package adstest

import (
	"strconv"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// LinearStore is go-control-plane's LinearCache shaped as the endpoint store the xDS server
// publishes to (server.Options.Endpoints): the baseline its own EndpointCache is measured
// against, and proof that the server works on another cache.
type LinearStore struct{ *cachev3.LinearCache }

// NewLinearStore is an empty LinearCache of load assignments. The version prefix makes its
// versions distinct from another process's, as a server's must be.
func NewLinearStore() LinearStore {
	return LinearStore{cachev3.NewLinearCache(resourcev3.EndpointType,
		cachev3.WithVersionPrefix(strconv.FormatInt(time.Now().UnixNano(), 36)+"-"))}
}

// Update replaces and removes load assignments by cluster name.
func (l LinearStore) Update(update map[string]*endpointv3.ClusterLoadAssignment, remove []string) error {
	res := make(map[string]types.Resource, len(update))
	for name, cla := range update {
		res[name] = cla
	}
	return l.UpdateResources(res, remove)
}

// Get returns every load assignment by cluster name.
func (l LinearStore) Get() map[string]*endpointv3.ClusterLoadAssignment {
	out := map[string]*endpointv3.ClusterLoadAssignment{}
	for name, r := range l.GetResources() {
		out[name] = r.(*endpointv3.ClusterLoadAssignment)
	}
	return out
}
