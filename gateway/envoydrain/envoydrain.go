// Package envoydrain drains an Envoy before it stops, so that a rolling update of the gateway
// loses no request. Envoy stops at once on SIGTERM, cutting every connection; draining is
// started only through its admin interface (POST /drain_listeners?graceful). The Envoy image
// has no HTTP client to call it from a preStop hook, so the gateway's Envoy pods run
// `inferplane gateway envoy-drainer` beside Envoy: on the pod's SIGTERM it starts the drain
// and waits until no request is active, while Envoy's own preStop sleep holds its SIGTERM back
// (gateway/install).
package envoydrain

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// Defaults of Config.
const (
	// DefaultMinWait covers the time a load balancer takes to stop sending new connections
	// to a pod that is going (its endpoint removed): Envoy keeps accepting meanwhile, and
	// asks every client to go elsewhere (Connection: close, HTTP/2 GOAWAY).
	DefaultMinWait = 15 * time.Second
	// DefaultMaxWait stays under the pod's grace period and Envoy's preStop sleep.
	DefaultMaxWait = 40 * time.Second
)

// Config says which Envoy to drain and how long to wait.
type Config struct {
	// Admin is host:port of Envoy's admin interface (127.0.0.1:9901 in its pod).
	Admin string
	// MinWait and MaxWait bound the wait: at least MinWait, then until no request is
	// active, at most MaxWait.
	MinWait, MaxWait time.Duration
	// Poll is how often the active requests are read (default 500ms).
	Poll   time.Duration
	Client *http.Client
	Logger *slog.Logger
}

// Result says how the drain went.
type Result struct {
	// Active is the number of requests still active when the wait ended (0: all done).
	Active int
	Waited time.Duration
}

// Drain starts Envoy's graceful drain and waits as Config says. The listeners keep accepting
// (every response asks its client to reconnect elsewhere) until Envoy's --drain-time-s,
// then close; skip_exit keeps Envoy running after that, so requests in flight finish until
// the pod's SIGTERM.
func Drain(ctx context.Context, cfg Config) (Result, error) {
	hc := cmp.Or(cfg.Client, http.DefaultClient)
	log := cmp.Or(cfg.Logger, slog.Default())
	minWait, maxWait := cmp.Or(cfg.MinWait, DefaultMinWait), cmp.Or(cfg.MaxWait, DefaultMaxWait)
	poll := cmp.Or(cfg.Poll, 500*time.Millisecond)
	start := time.Now()
	base := "http://" + cfg.Admin
	if err := post(ctx, hc, base+"/drain_listeners?graceful&skip_exit"); err != nil {
		return Result{}, fmt.Errorf("start Envoy's drain at %s: %w", cfg.Admin, err)
	}
	log.Info("Envoy draining: clients are asked to reconnect elsewhere", "admin", cfg.Admin, "minWait", minWait, "maxWait", maxWait)
	deadline := start.Add(maxWait)
	active := -1
	for {
		n, err := activeRequests(ctx, hc, base)
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			active = 0 // Envoy is gone: nothing left to drain
		case err != nil:
			log.Warn("reading Envoy's active requests", "error", err)
		default:
			active = n
		}
		now := time.Now()
		if (now.Sub(start) >= minWait && active == 0) || !now.Before(deadline) {
			return Result{Active: max(active, 0), Waited: now.Sub(start)}, nil
		}
		select {
		case <-ctx.Done():
			return Result{Active: max(active, 0), Waited: time.Since(start)}, ctx.Err()
		case <-time.After(poll):
		}
	}
}

func post(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// activeRequests sums downstream_rq_active over Envoy's HTTP connection managers, apart from
// its admin interface's own (which counts this very request).
func activeRequests(ctx context.Context, hc *http.Client, base string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+`/stats?format=json&filter=^http\..*\.downstream_rq_active$`, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("stats: %s", resp.Status)
	}
	var doc struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return 0, fmt.Errorf("stats: %w", err)
	}
	n := 0
	for _, s := range doc.Stats {
		if strings.HasPrefix(s.Name, "http.admin.") {
			continue
		}
		var v int
		if json.Unmarshal(s.Value, &v) == nil {
			n += v
		}
	}
	return n, nil
}
