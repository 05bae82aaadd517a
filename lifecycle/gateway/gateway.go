// Package gateway asks the gateway (`inferplane xds serve`) which replicas of a tenant's jobs
// it sends traffic to: GET /v1/health gives each endpoint's status and ready count, and GET
// /debug/endpoints, on the same admin address, names the replicas in rotation.
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

	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/usage"
	"github.com/inferplane/inferplane/xds"
)

// DebugEndpointsPath is the xDS server's per-replica view.
const DebugEndpointsPath = "/debug/endpoints"

// Client asks one gateway.
type Client struct {
	// BaseURL is the xDS server's admin address, e.g. http://127.0.0.1:9090.
	BaseURL string
	// HTTP is the client used; nil means one with a 15 s timeout.
	HTTP *http.Client
}

// Rotations is the gateway's view of a tenant's endpoints by job. An endpoint the gateway
// does not know is absent. A gateway that does not name replicas leaves InRotation nil.
func (c Client) Rotations(ctx context.Context, tenant string) (map[string]*lifecycle.Rotation, error) {
	var health usage.HealthReport
	if err := c.get(ctx, usage.HealthPath, url.Values{"tenant": {tenant}}, &health); err != nil {
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
	var debug struct {
		Endpoints []xds.EndpointStatus `json:"endpoints"`
	}
	if err := c.get(ctx, DebugEndpointsPath, nil, &debug); err != nil {
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

func (c Client) get(ctx context.Context, path string, q url.Values, v any) error {
	u, err := url.Parse(strings.TrimRight(c.BaseURL, "/") + path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("gateway %q: want the xDS server's admin URL, such as http://127.0.0.1:9090", c.BaseURL)
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
		return fmt.Errorf("gateway %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("gateway %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("gateway %s: %s", u.Redacted(), resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("gateway %s: not the expected JSON: %w", u.Redacted(), err)
	}
	return nil
}
