// Package usage turns Envoy's gRPC access logs into per-endpoint health (request count,
// success rate, latency p50/p99, status) and per-key hourly usage (requests, tokens in and
// out), served as JSON over HTTP and as Prometheus metrics.
//
// Data flows one way: the access log service (als.go) converts each log entry to an Entry
// (this file), the Aggregator folds entries into windows and hourly buckets, and Health /
// Usage read snapshots of those, classifying each endpoint with Classify (a pure function
// of the figures and the replica probes).
package usage

import (
	"net"
	"strings"
	"time"
)

// Entry is one request as the aggregator needs it.
type Entry struct {
	// Done is when the response ended (start time plus duration).
	Done        time.Time
	Tenant, Job string
	// KeyID is the API key that passed the check; empty for keyless endpoints.
	KeyID string
	// Caller is the key's tenant on a call to a shared endpoint of a provider tenant (the
	// shared serving tier); empty on any other call, whose key is the endpoint's tenant's.
	Caller string
	// Code is the HTTP status sent downstream; 0 when none was (a reset).
	Code int
	// Denied is a request the key check refused: not the endpoint's fault, so it counts
	// apart from the endpoint's requests.
	Denied bool
	// Latency is start to last byte sent downstream; TTFB start to first upstream byte
	// (time to first token for a stream), 0 when unknown.
	Latency, TTFB time.Duration
	// HasUsage is set when the response carried an OpenAI usage object.
	HasUsage            bool
	TokensIn, TokensOut int64
	// Estimated: no usage arrived, TokensOut is the stream's data events (one token each).
	Estimated bool
}

// Payer is the tenant the request's key and tokens are counted for: the caller of a shared
// endpoint, else the endpoint's tenant.
func (e *Entry) Payer() string {
	if e.Caller != "" {
		return e.Caller
	}
	return e.Tenant
}

// Failed reports whether the request counts against the endpoint's success rate: a 5xx or
// no response at all. 4xx answers are the caller's mistakes.
func (e *Entry) Failed() bool { return e.Code == 0 || e.Code >= 500 }

// Resolver maps a request's :authority to its endpoint, for requests that did not pass the
// key check (keyless endpoints, refused requests) and so carry no tenant and job metadata.
type Resolver func(authority string) (tenant, job string, ok bool)

// HostResolver parses "<job>.<tenant>.<domain>[:port]", the endpoint host names of the
// workload contract. The tenant is a namespace name (no dots), so the job is everything
// before the last label ahead of the domain.
func HostResolver(domain string) Resolver {
	suffix := "." + strings.Trim(strings.ToLower(domain), ".")
	return func(authority string) (string, string, bool) {
		host := strings.ToLower(authority)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(host, ".")
		rest, ok := strings.CutSuffix(host, suffix)
		if !ok {
			return "", "", false
		}
		i := strings.LastIndexByte(rest, '.')
		if i <= 0 || i == len(rest)-1 {
			return "", "", false
		}
		return rest[i+1:], rest[:i], true
	}
}
