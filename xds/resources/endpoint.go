package resources

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/inferplane/inferplane/api/gatewayv1"
)

// Endpoint is one job's endpoint and the replicas that may take its traffic now.
type Endpoint struct {
	EndpointInfo
	// Replicas are the ready replicas (their head node); the others are left out, not marked.
	Replicas []Replica
}

// Replica is one ready replica: the serving address of its head node.
type Replica struct {
	// Name names the replica in Envoy's stats and admin pages (the head VMI's name).
	Name    string
	Address string
	Port    uint32
}

// ClusterName is the name of a job's cluster and of its load assignment. Tenant and job names
// are DNS labels, so the "/" keeps every pair distinct.
func ClusterName(tenant, job string) string { return tenant + "/" + job }

// Key is the same as ClusterName, for the endpoint.
func (e EndpointInfo) Key() string { return ClusterName(e.Tenant, e.Job) }

// Validate checks an endpoint's identity and replicas: names must be DNS labels (they form the
// host name), the runtime must be known, every replica needs an IP address and a port.
func (e Endpoint) Validate() error {
	if err := e.EndpointInfo.Validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, r := range e.Replicas {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("endpoint %s: replicas[%d]: %w", e.Key(), i, err)
		}
		addr := netip.AddrPortFrom(netip.MustParseAddr(r.Address), uint16(r.Port)).String()
		if seen[addr] {
			return fmt.Errorf("endpoint %s: replicas[%d]: address %s listed twice", e.Key(), i, addr)
		}
		seen[addr] = true
	}
	return nil
}

// Validate checks the identity of an endpoint.
func (e EndpointInfo) Validate() error {
	for _, f := range []struct{ field, value string }{{"tenant", e.Tenant}, {"job", e.Job}} {
		if errs := validation.IsDNS1123Label(f.value); len(errs) > 0 {
			return fmt.Errorf("%s %q: %s", f.field, f.value, strings.Join(errs, "; "))
		}
	}
	if _, ok := gatewayv1.RuntimePaths(e.Runtime); !ok {
		return fmt.Errorf("endpoint %s: runtime %q: expected one of %s", e.Key(), e.Runtime,
			strings.Join(gatewayv1.Runtimes(), ", "))
	}
	return nil
}

// Validate checks one replica's address.
func (r Replica) Validate() error {
	if _, err := netip.ParseAddr(r.Address); err != nil {
		return fmt.Errorf("address %q: expected an IP address", r.Address)
	}
	if r.Port == 0 || r.Port > 65535 {
		return fmt.Errorf("port %d: expected 1-65535", r.Port)
	}
	return nil
}
