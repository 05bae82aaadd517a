// Package resources turns the state of inferplane's endpoints (jobs and their healthy replicas)
// into Envoy xDS resources: one listener, one route configuration, one cluster and one load
// assignment per job. It is pure: no network, no clock, no globals; the same input always gives
// the same protos, and every proto it returns passes go-control-plane's validation.
package resources

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/inferplane/inferplane/api/gatewayv1"
)

// Names of the resources every Envoy node gets.
const (
	// ListenerName is the one HTTP listener.
	ListenerName = "inferplane_http"
	// RouteConfigName is the route configuration the listener loads over RDS.
	RouteConfigName = "inferplane_http"
	// CatchAllVirtualHost answers 404 for hosts that name no endpoint.
	CatchAllVirtualHost = "inferplane_unknown_host"
)

// Config holds the settings of the generated resources that are not part of the endpoint
// state. Zero fields take the defaults of DefaultConfig; Domain is required.
type Config struct {
	// Domain is the suffix of every endpoint host name: <job>.<tenant>.<Domain>.
	Domain string

	// ListenerAddress and ListenerPort are where Envoy accepts client traffic (HTTP/1.1 and
	// cleartext HTTP/2 on the same port).
	ListenerAddress string
	ListenerPort    uint32
	// TLSListenerPort is where Envoy terminates TLS for the endpoints a certificate covers
	// (the listener exists only while one does). KeepPlainHTTP serves those endpoints on the
	// plain listener too; by default a plain request to one is redirected to HTTPS.
	TLSListenerPort uint32
	KeepPlainHTTP   bool

	// ConnectTimeout bounds a TCP connect to a replica.
	ConnectTimeout time.Duration
	// StreamIdleTimeout resets a request on which no byte moved either way for this long. The
	// whole-request timeout is off (0) so that long SSE streams and long generations are not
	// cut; this catches the dead ones instead. It must exceed the longest time a model may think
	// before its first byte on a non-streaming request.
	StreamIdleTimeout time.Duration
	// RequestHeadersTimeout bounds how long a client may take to send its request headers
	// (slow-loris protection); it does not apply to the body or the response.
	RequestHeadersTimeout time.Duration

	// Circuit breakers, per job cluster (Envoy's defaults are 1024; LLM requests are long
	// lived, so one busy endpoint reaches that quickly).
	MaxConnections     uint32
	MaxPendingRequests uint32
	MaxRequests        uint32
	MaxRetries         uint32

	// Outlier detection: passive ejection of replicas that fail between two active probes.
	Consecutive5xx            uint32
	ConsecutiveGatewayFailure uint32
	OutlierInterval           time.Duration
	BaseEjectionTime          time.Duration
	MaxEjectionPercent        uint32
}

// DefaultConfig returns the defaults, with the given domain.
func DefaultConfig(domain string) Config {
	return Config{
		Domain:                    domain,
		ListenerAddress:           "0.0.0.0",
		ListenerPort:              8080,
		TLSListenerPort:           8443,
		ConnectTimeout:            3 * time.Second,
		StreamIdleTimeout:         10 * time.Minute,
		RequestHeadersTimeout:     10 * time.Second,
		MaxConnections:            4096,
		MaxPendingRequests:        4096,
		MaxRequests:               4096,
		MaxRetries:                3,
		Consecutive5xx:            5,
		ConsecutiveGatewayFailure: 3,
		OutlierInterval:           5 * time.Second,
		BaseEjectionTime:          30 * time.Second,
		MaxEjectionPercent:        50,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig(c.Domain)
	if c.ListenerAddress == "" {
		c.ListenerAddress = d.ListenerAddress
	}
	setU := func(v *uint32, def uint32) {
		if *v == 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setU(&c.ListenerPort, d.ListenerPort)
	setU(&c.TLSListenerPort, d.TLSListenerPort)
	setD(&c.ConnectTimeout, d.ConnectTimeout)
	setD(&c.StreamIdleTimeout, d.StreamIdleTimeout)
	setD(&c.RequestHeadersTimeout, d.RequestHeadersTimeout)
	setU(&c.MaxConnections, d.MaxConnections)
	setU(&c.MaxPendingRequests, d.MaxPendingRequests)
	setU(&c.MaxRequests, d.MaxRequests)
	setU(&c.MaxRetries, d.MaxRetries)
	setU(&c.Consecutive5xx, d.Consecutive5xx)
	setU(&c.ConsecutiveGatewayFailure, d.ConsecutiveGatewayFailure)
	setD(&c.OutlierInterval, d.OutlierInterval)
	setD(&c.BaseEjectionTime, d.BaseEjectionTime)
	setU(&c.MaxEjectionPercent, d.MaxEjectionPercent)
	return c
}

// Validate checks the settings a user can get wrong.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Domain == "" {
		return fmt.Errorf("domain: required (endpoint host names are <job>.<tenant>.<domain>)")
	}
	if errs := validation.IsDNS1123Subdomain(c.Domain); len(errs) > 0 {
		return fmt.Errorf("domain %q: %s", c.Domain, strings.Join(errs, "; "))
	}
	if c.ListenerPort > 65535 {
		return fmt.Errorf("listener port %d: must be 1-65535", c.ListenerPort)
	}
	if c.TLSListenerPort > 65535 || c.TLSListenerPort == c.ListenerPort {
		return fmt.Errorf("TLS listener port %d: must be 1-65535 and differ from the listener port", c.TLSListenerPort)
	}
	if c.MaxEjectionPercent > 100 {
		return fmt.Errorf("max ejection percent %d: must be 0-100", c.MaxEjectionPercent)
	}
	return nil
}

// Host is the host name clients use for a job's endpoint.
func (c Config) Host(tenant, job string) string { return gatewayv1.Host(tenant, job, c.Domain) }
