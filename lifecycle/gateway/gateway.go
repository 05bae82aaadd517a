// Package gateway is the client of the gateway's admin API (`inferplane xds serve`, its admin
// address): GET /v1/health gives each endpoint's status and ready count, GET /v1/usage the
// requests and tokens per key and hour, and GET /debug/endpoints names the replicas in
// rotation, which tells which replicas of a tenant's jobs get traffic.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/usage"
)

// Client asks one gateway.
type Client struct {
	// BaseURL is the xDS server's admin address, e.g. http://127.0.0.1:9090.
	BaseURL string
	// HTTP is the client used; nil means one with a 15 s timeout.
	HTTP *http.Client
}

// Health is the gateway's health report, of tenant's endpoints ("": every endpoint).
func (c Client) Health(ctx context.Context, tenant string) (usage.HealthReport, error) {
	var rep usage.HealthReport
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	return rep, c.get(ctx, usage.HealthPath, q, &rep)
}

// Usage is the gateway's usage report; q filters it (tenant, key, since).
func (c Client) Usage(ctx context.Context, q url.Values) (usage.UsageReport, error) {
	var rep usage.UsageReport
	return rep, c.get(ctx, usage.UsagePath, q, &rep)
}

// ErrNotServed is a path the gateway does not serve (404).
var ErrNotServed = errors.New("not served by this gateway")

// Limits is the spend against the limits of a tenant ("": every tenant) and its keys, or of
// one key, in the current windows (auth/limits' /v1/limits; the counts are shared by every
// replica). A gateway run without limits has nothing to spend against: an empty report.
func (c Client) Limits(ctx context.Context, tenant, key string) (limits.StatusReport, error) {
	rep, err := c.limits(ctx, tenant, key)
	if errors.Is(err, ErrNotServed) {
		return limits.StatusReport{StoreUp: true}, nil
	}
	return rep, err
}

func (c Client) limits(ctx context.Context, tenant, key string) (limits.StatusReport, error) {
	var rep limits.StatusReport
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	if key != "" {
		q.Set("key", key)
	}
	return rep, c.get(ctx, limits.Path, q, &rep)
}

// Rotations is the gateway's view of a tenant's endpoints by job. An endpoint the gateway
// does not know is absent. A gateway that does not name replicas leaves InRotation nil.
func (c Client) Rotations(ctx context.Context, tenant string) (map[string]*lifecycle.Rotation, error) {
	health, err := c.Health(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := map[string]*lifecycle.Rotation{}
	for _, e := range health.Endpoints {
		if e.Tenant != tenant {
			continue
		}
		r := &lifecycle.Rotation{Known: true, Status: string(e.Status), Reasons: e.Reasons}
		if e.Replicas != nil {
			r.Ready, r.Total = e.Replicas.Ready, e.Replicas.Total
		}
		out[e.Job] = r
	}
	var debug gatewayv1.Debug
	if err := c.get(ctx, gatewayv1.DebugEndpointsPath, nil, &debug); err != nil {
		return out, nil // counts alone still decide (lifecycle.Compute)
	}
	for _, e := range debug.Endpoints {
		t, job, ok := strings.Cut(e.Endpoint, "/")
		if !ok || t != tenant || out[job] == nil {
			continue
		}
		in := map[string]bool{}
		for _, r := range e.Replicas {
			if r.Serving {
				_, name, _ := strings.Cut(r.Name, "/") // namespace/name of the head VMI
				in[name] = true
			}
		}
		out[job].InRotation = in
	}
	return out, nil
}

// ErrBadURL is a BaseURL that is no http(s) URL.
var ErrBadURL = errors.New("want the xDS server's admin URL, such as http://127.0.0.1:9090")

// UnreachableError is a gateway that did not answer at all (as opposed to one that answered
// with an error).
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string { return "gateway " + e.URL + ": " + e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

func (c Client) get(ctx context.Context, path string, q url.Values, v any) error {
	u, err := url.Parse(strings.TrimRight(c.BaseURL, "/") + path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("gateway %q: %w", c.BaseURL, ErrBadURL)
	}
	u.RawQuery = q.Encode()
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &UnreachableError{URL: u.Redacted(), Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("gateway %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("gateway %s: %s: %w", u.Redacted(), resp.Status, ErrNotServed)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("gateway %s: %s: %s", u.Redacted(), resp.Status, e.Error)
		}
		return fmt.Errorf("gateway %s: %s", u.Redacted(), resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("gateway %s: not the expected JSON: %w", u.Redacted(), err)
	}
	return nil
}
