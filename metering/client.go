package metering

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client reads a meter's admin address (what api serve --meter names).
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

// Usage is the meter's answer for tenant over [from, to), grouped by by.
func (c Client) Usage(ctx context.Context, tenant string, from, to time.Time, by string) (Report, error) {
	q := url.Values{"tenant": {tenant}, "from": {from.UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	if by != "" {
		q.Set("groupBy", by)
	}
	var rep Report
	u := strings.TrimSuffix(c.BaseURL, "/") + UsagePath + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return rep, err
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return rep, fmt.Errorf("the meter at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return rep, fmt.Errorf("the meter at %s: %w", c.BaseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("the meter at %s answered %s: %s", c.BaseURL, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		return rep, fmt.Errorf("the meter at %s: not a usage answer: %w", c.BaseURL, err)
	}
	return rep, nil
}
