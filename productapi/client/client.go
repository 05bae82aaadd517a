// Package client is the typed Go client of the product API (/api/v1), over the same types the
// server's handlers take and return (productapi/apiv1): what the CLI and the tests use.
//
//	c := client.New("https://api.example.com", client.StaticToken(idToken))
//	jobs, err := c.ListJobs(ctx, "acme")
//
// An error answer is a *Error carrying the server's RFC 9457 problem (status, detail, and each
// refused field with generate's words).
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// TokenSource gives the bearer token of each request (an OIDC ID token); the CLI's refreshes
// it when it expires.
type TokenSource func(ctx context.Context) (string, error)

// StaticToken is a TokenSource of one token.
func StaticToken(tok string) TokenSource {
	return func(context.Context) (string, error) { return tok, nil }
}

// Client calls one product API server.
type Client struct {
	// BaseURL is the server's URL, without /api/v1.
	BaseURL string
	Token   TokenSource
	// HTTP is the client used; nil: one with a 60 s timeout (a write renders and pushes).
	HTTP *http.Client
	// Inspect, when set, sees every answer before it is decoded (the tests check each against
	// the OpenAPI document).
	Inspect func(req *http.Request, resp *http.Response, body []byte)
	// Retries is how often a 503 with Retry-After is retried (the server says so only when
	// nothing was written: another replica kept pushing first, or the inputs were not fetched
	// yet); 0 means 3, negative none.
	Retries int
}

// New is a client of the server at baseURL.
func New(baseURL string, token TokenSource) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token}
}

// Error is an error answer.
type Error struct {
	// Status is the HTTP status; Problem the server's problem details (Status and Title at
	// least, even when the body was not one).
	Status  int
	Problem apiv1.Problem
	// Challenge is the WWW-Authenticate header of a 401.
	Challenge string
	// RetryAfter is the Retry-After header of a 503 ("" none).
	RetryAfter string
}

func (e *Error) Error() string { return e.Problem.Error() }

// IsStatus says whether err is an answer with that status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// WriteOptions are the options of a POST.
type WriteOptions struct {
	// IdempotencyKey makes a retried request act once (a job create writes one commit).
	IdempotencyKey string
}

func tenantPath(tenant string, parts ...string) string {
	p := "/api/v1/tenants/" + url.PathEscape(tenant)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// Me is who the caller is and its tenants.
func (c *Client) Me(ctx context.Context) (apiv1.Me, error) {
	var out apiv1.Me
	return out, c.do(ctx, http.MethodGet, "/api/v1/me", nil, nil, "", &out)
}

// ListJobs lists a tenant's jobs with their stages.
func (c *Client) ListJobs(ctx context.Context, tenant string) (apiv1.JobList, error) {
	var out apiv1.JobList
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "jobs"), nil, nil, "", &out)
}

// GetJob is one job in detail.
func (c *Client) GetJob(ctx context.Context, tenant, job string) (apiv1.JobDetail, error) {
	var out apiv1.JobDetail
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "jobs", job), nil, nil, "", &out)
}

// CreateJob creates a job.
func (c *Client) CreateJob(ctx context.Context, tenant string, job apiv1.JobCreate, o WriteOptions) (apiv1.JobWritten, error) {
	var out apiv1.JobWritten
	return out, c.do(ctx, http.MethodPost, tenantPath(tenant, "jobs"), nil, job, o.IdempotencyKey, &out)
}

// SetReplicas changes a job's replicas.
func (c *Client) SetReplicas(ctx context.Context, tenant, job string, replicas int32) (apiv1.JobWritten, error) {
	var out apiv1.JobWritten
	return out, c.do(ctx, http.MethodPut, tenantPath(tenant, "jobs", job, "replicas"), nil, apiv1.ReplicasChange{Replicas: replicas}, "", &out)
}

// RestartJob restarts one replica (replica >= 0) or every replica (replica < 0).
func (c *Client) RestartJob(ctx context.Context, tenant, job string, replica int32, o WriteOptions) (apiv1.Restarted, error) {
	var out apiv1.Restarted
	body := apiv1.Restart{}
	if replica >= 0 {
		body.Replica = &replica
	}
	return out, c.do(ctx, http.MethodPost, tenantPath(tenant, "jobs", job, "restart"), nil, body, o.IdempotencyKey, &out)
}

// DeleteJob deletes a job.
func (c *Client) DeleteJob(ctx context.Context, tenant, job string) (apiv1.JobDeleted, error) {
	var out apiv1.JobDeleted
	return out, c.do(ctx, http.MethodDelete, tenantPath(tenant, "jobs", job), nil, nil, "", &out)
}

// ListModels is what the tenant may run.
func (c *Client) ListModels(ctx context.Context, tenant string) (apiv1.ModelList, error) {
	var out apiv1.ModelList
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "models"), nil, nil, "", &out)
}

// Quota reads the tenant's tier and quota, and what its jobs claim of it.
func (c *Client) Quota(ctx context.Context, tenant string) (apiv1.TenantQuota, error) {
	var out apiv1.TenantQuota
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "quota"), nil, nil, "", &out)
}

// SetQuota changes the tenant's own quota figures (the operator's alone).
func (c *Client) SetQuota(ctx context.Context, tenant string, q apiv1.QuotaChange) (apiv1.TenantChanged, error) {
	var out apiv1.TenantChanged
	return out, c.do(ctx, http.MethodPut, tenantPath(tenant, "quota"), nil, q, "", &out)
}

// SetTier moves the tenant to another tier (the operator's alone).
func (c *Client) SetTier(ctx context.Context, tenant string, t apiv1.TierChange) (apiv1.TenantChanged, error) {
	var out apiv1.TenantChanged
	return out, c.do(ctx, http.MethodPut, tenantPath(tenant, "tier"), nil, t, "", &out)
}

// TenantHistory lists the tenant's quota and tier changes, newest first.
func (c *Client) TenantHistory(ctx context.Context, tenant string) (apiv1.TenantHistory, error) {
	var out apiv1.TenantHistory
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "history"), nil, nil, "", &out)
}

// ListKeys lists the tenant's API keys.
func (c *Client) ListKeys(ctx context.Context, tenant string) (apiv1.KeyList, error) {
	var out apiv1.KeyList
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "keys"), nil, nil, "", &out)
}

// CreateKey mints an API key; the answer's APIKey is the key, shown this once.
func (c *Client) CreateKey(ctx context.Context, tenant string, k apiv1.KeyCreate, o WriteOptions) (apiv1.KeyCreated, error) {
	var out apiv1.KeyCreated
	return out, c.do(ctx, http.MethodPost, tenantPath(tenant, "keys"), nil, k, o.IdempotencyKey, &out)
}

// RevokeKey revokes a key.
func (c *Client) RevokeKey(ctx context.Context, tenant, id string) (apiv1.Key, error) {
	var out apiv1.Key
	return out, c.do(ctx, http.MethodDelete, tenantPath(tenant, "keys", id), nil, nil, "", &out)
}

// SetKeyLimits replaces a key's own limits (nil: none of its own).
func (c *Client) SetKeyLimits(ctx context.Context, tenant, id string, l *v1alpha1.RateLimits) (apiv1.Key, error) {
	var out apiv1.Key
	return out, c.do(ctx, http.MethodPut, tenantPath(tenant, "keys", id, "limits"), nil, apiv1.KeyLimits{Limits: l}, "", &out)
}

// UsageQuery narrows a usage report.
type UsageQuery struct {
	// Since is a duration back from now (24h) or a time; empty: 24h.
	Since, Until  string
	Key, Endpoint string
	// From, To and GroupBy ask the meter's records (from/to: as since/until).
	From, To, GroupBy string
}

// Usage is the tenant's usage per key and hour.
func (c *Client) Usage(ctx context.Context, tenant string, q UsageQuery) (apiv1.Usage, error) {
	v := url.Values{}
	for k, val := range map[string]string{"since": q.Since, "until": q.Until, "key": q.Key, "endpoint": q.Endpoint,
		"from": q.From, "to": q.To, "groupBy": q.GroupBy} {
		if val != "" {
			v.Set(k, val)
		}
	}
	var out apiv1.Usage
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "usage"), v, nil, "", &out)
}

// Endpoints is the health of the tenant's endpoints.
func (c *Client) Endpoints(ctx context.Context, tenant string) (apiv1.EndpointList, error) {
	var out apiv1.EndpointList
	return out, c.do(ctx, http.MethodGet, tenantPath(tenant, "endpoints"), nil, nil, "", &out)
}

// LogQuery says which of a job's log lines to read (GET .../jobs/{job}/logs).
type LogQuery struct {
	// Replica and Node narrow to one replica, one node rank (nil: all).
	Replica, Node *int32
	// Follow keeps reading new lines until ctx ends.
	Follow bool
	// Since is a duration back from now (10m) or an RFC 3339 time; empty: none.
	Since string
	// Tail is each VM's last lines to start from (-1: all; nil: the server's default, 100,
	// or all with Since).
	Tail *int64
	// Search keeps the lines that contain it, ignoring case.
	Search string
}

// MaxLogEntry is the longest log entry the client reads (a line is at most 8 KiB as the
// agent forwards it; JSON may escape it to several times that).
const MaxLogEntry = 1 << 20

// Logs reads a job's log, calling each for every entry as it comes, until the server ends it
// (following: until ctx ends, then nil) or each fails. The request has no client timeout.
func (c *Client) Logs(ctx context.Context, tenant, job string, q LogQuery, each func(apiv1.LogEntry) error) error {
	v := url.Values{}
	if q.Replica != nil {
		v.Set("replica", strconv.Itoa(int(*q.Replica)))
	}
	if q.Node != nil {
		v.Set("node", strconv.Itoa(int(*q.Node)))
	}
	if q.Follow {
		v.Set("follow", "true")
	}
	if q.Tail != nil {
		v.Set("tail", strconv.FormatInt(*q.Tail, 10))
	}
	for k, val := range map[string]string{"since": q.Since, "search": q.Search} {
		if val != "" {
			v.Set(k, val)
		}
	}
	path := tenantPath(tenant, "jobs", job, "logs")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path+"?"+v.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	if err := c.authorize(ctx, req); err != nil {
		return err
	}
	hc := &http.Client{} // no timeout: a follow lasts as long as ctx
	if c.HTTP != nil {
		hc.Transport = c.HTTP.Transport
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if c.Inspect != nil {
			c.Inspect(req, resp, data)
		}
		return answerError(resp, data)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLogEntry)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if c.Inspect != nil {
			c.Inspect(req, resp, line)
		}
		var e apiv1.LogEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("GET %s: a log line is not the expected JSON: %w", path, err)
		}
		if err := each(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, in any, idem string, out any) error {
	retries := c.Retries
	if retries == 0 {
		retries = 3
	}
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, method, path, q, in, idem, out)
		var e *Error
		if attempt >= retries || !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.RetryAfter == "" {
			return err
		}
		wait := time.Second
		if n, perr := strconv.Atoi(e.RetryAfter); perr == nil && n >= 0 {
			wait = time.Duration(n) * time.Second
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

func (c *Client) once(ctx context.Context, method, path string, q url.Values, in any, idem string, out any) error {
	u := c.BaseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	if err := c.authorize(ctx, req); err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if c.Inspect != nil {
		c.Inspect(req, resp, data)
	}
	if resp.StatusCode >= 300 {
		return answerError(resp, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the expected JSON: %w", method, path, err)
	}
	return nil
}

// authorize adds the bearer token, if any.
func (c *Client) authorize(ctx context.Context, req *http.Request) error {
	if c.Token == nil {
		return nil
	}
	tok, err := c.Token(ctx)
	if err != nil {
		return fmt.Errorf("sign-in token: %w", err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return nil
}

// answerError is an error answer's *Error: its problem details, or its text.
func answerError(resp *http.Response, data []byte) *Error {
	e := &Error{Status: resp.StatusCode, Challenge: resp.Header.Get("WWW-Authenticate"), RetryAfter: resp.Header.Get("Retry-After")}
	if json.Unmarshal(data, &e.Problem) != nil || e.Problem.Status == 0 {
		e.Problem = apiv1.Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Detail: strings.TrimSpace(string(data))}
	}
	return e
}

// SignIn is how to sign in to the server (no token needed).
func (c *Client) SignIn(ctx context.Context) (apiv1.SignIn, error) {
	var out apiv1.SignIn
	return out, c.do(ctx, http.MethodGet, "/api/v1/signin", nil, nil, "", &out)
}
