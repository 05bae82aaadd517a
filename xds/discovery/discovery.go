// Package discovery finds the replicas of inferplane's jobs: from the KubeVirt VMIs the
// generator's VirtualMachines create (Kube), or from a YAML file for local runs (File). A
// source reports the whole picture every time it changes; deciding what Envoy gets is the
// caller's job.
package discovery

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/warning"
)

// Source reports the replicas it knows, in full, every time that changes.
type Source interface {
	// Run sends an Update on updates after its first complete read and after every change,
	// until ctx ends. It returns an error when it cannot start; once started it keeps the last
	// good state through outages (a lost API server, a bad file) and only reports them.
	Run(ctx context.Context, updates chan<- Update) error
}

// Describer is a source that can say how it is doing beyond its problems (e.g. the state of
// each tenant cluster it watches); Describe's result is shown as JSON on /debug/endpoints.
type Describer interface {
	Describe() any
}

// Update is everything a source knows at one moment.
type Update struct {
	// Replicas are the serving nodes of every replica of every job, ready or not: the head,
	// or every node of a replica started with vLLM's data-parallel launcher.
	Replicas []Replica
	// Problems are objects or entries the source skipped or read with a default, and why.
	Problems []warning.Warning
}

// Replica is a serving node of one replica of a job (label inferplane.io/serving): a node
// that answers requests, and one endpoint address of the job.
type Replica struct {
	Tenant        string `json:"tenant"`
	Job           string `json:"job"`
	Runtime       string `json:"runtime"`
	RequireAPIKey bool   `json:"requireAPIKey"`
	// Index is the replica's number within its job ("0", "1", ...).
	Index string `json:"index,omitempty"`

	// Namespace and Name identify the head VMI (file source: the entry's name).
	Namespace string `json:"namespace"`
	Name      string `json:"name"`

	// Running says the VM runs (VMI phase Running); Address is its serving IP, empty until
	// KubeVirt reports one; Port is the model server's port.
	Running bool   `json:"running"`
	Address string `json:"address,omitempty"`
	Port    uint32 `json:"port,omitempty"`
	// Service names the node's Service of type LoadBalancer (in Namespace) whose ingress IP
	// is Address, in address mode loadbalancer.
	Service string `json:"service,omitempty"`
	// Ready is the VMI's Ready condition (KubeVirt's own readiness probes, when the VM defines
	// them). The file source sets it to true.
	Ready bool `json:"ready"`
}

// Key identifies a replica across updates.
func (r Replica) Key() string { return r.Namespace + "/" + r.Name }

// JobKey identifies the replica's job (the same as the job's cluster name in Envoy).
func (r Replica) JobKey() string { return r.Tenant + "/" + r.Job }

// Candidate says whether the replica can be probed: running, with an address to probe.
func (r Replica) Candidate() bool { return r.Running && r.Address != "" && r.Port != 0 }

// HostPort is the serving address as ip:port ([ip]:port for IPv6); "" without an address.
func (r Replica) HostPort() string {
	ip, err := netip.ParseAddr(r.Address)
	if err != nil {
		return ""
	}
	return netip.AddrPortFrom(ip, uint16(r.Port)).String()
}

// HealthURL is the model server's health endpoint.
func (r Replica) HealthURL(path string) string { return "http://" + r.HostPort() + path }

// DefaultServingPort is used when a VMI carries no serving-port annotation: the port both
// runtimes listen on in the guest.
const DefaultServingPort = v1alpha1.ServingPort

func parsePort(s string) (uint32, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("%q: expected a port number 1-65535", s)
	}
	return uint32(p), nil
}

// ReadyNoter is a source that has something to add to /readyz while it serves (e.g. tenant
// clusters whose last known replicas are served stale); "" when nothing.
type ReadyNoter interface {
	ReadyNote() string
}
