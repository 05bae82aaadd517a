package productapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/gateway"
	"github.com/inferplane/inferplane/metering"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/usage"
)

type usageInput struct {
	TenantParam
	Since    string `query:"since" doc:"A duration back from now (24h) or an RFC 3339 time; default 24h"`
	Until    string `query:"until" doc:"An RFC 3339 time; default now"`
	Key      string `query:"key" doc:"Only this key's usage" pattern:"^([0-9a-f]{16})?$"`
	Endpoint string `query:"endpoint" doc:"Only keys that called this job"`
	From     string `query:"from" doc:"Start of the period, as since (since's alias; it wins)"`
	To       string `query:"to" doc:"End of the period, as until (until's alias; it wins)"`
	GroupBy  string `query:"groupBy" enum:"job,model,key,day,nodeType,tier," doc:"Group the meter's records (metered) by this label; needs the meter"`
}

func (s *Server) noMeter() error {
	return newProblem(http.StatusServiceUnavailable, "this API server knows no meter (api serve --meter URL, the admin address of inferplane meter serve)")
}

func (s *Server) noGateway() error {
	return newProblem(http.StatusServiceUnavailable, "this API server knows no gateway (api serve --server URL, the admin address of each xds serve replica)")
}

// getUsage sums the tenant's usage over every gateway replica; one that cannot be read fails
// the answer rather than give a partial sum (as `keys usage` does).
func (s *Server) getUsage(ctx context.Context, in *usageInput) (*body[apiv1.Usage], error) {
	v, _, err := s.authorize(ctx, in.Tenant, access.Read)
	if err != nil {
		return nil, err
	}
	in.Since, in.Until = cmpOr(in.From, in.Since), cmpOr(in.To, in.Until)
	switch {
	case in.GroupBy != "" && s.opts.Meter == "":
		return nil, s.noMeter()
	case len(s.opts.Gateways) == 0 && s.opts.Meter == "":
		return nil, s.noGateway()
	}
	out := apiv1.Usage{Tenant: in.Tenant, Keys: []apiv1.KeyUsage{}, Limits: []apiv1.LimitSpend{}}
	if len(s.opts.Gateways) > 0 {
		if err := s.gatewayUsage(ctx, in, &out); err != nil {
			return nil, err
		}
	}
	if s.opts.Meter != "" {
		if err := s.meteredUsage(ctx, in, &out); err != nil {
			return nil, err
		}
		q, err := s.quotaAt(ctx, v, in.Tenant)
		if err != nil {
			return nil, err
		}
		out.Quota = quotaLeft(q)
	}
	return &body[apiv1.Usage]{Body: out}, nil
}

// meteredUsage reads the meter's records of the period.
func (s *Server) meteredUsage(ctx context.Context, in *usageInput, out *apiv1.Usage) error {
	now := s.opts.Now()
	from, err := usage.ParseSince(cmpOr(in.Since, "24h"), now)
	if err != nil {
		return newProblem(http.StatusUnprocessableEntity, "from: "+err.Error())
	}
	to := now
	if in.Until != "" {
		if to, err = time.Parse(time.RFC3339, in.Until); err != nil {
			return newProblem(http.StatusUnprocessableEntity, fmt.Sprintf("to: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", in.Until))
		}
	}
	if !to.After(from) {
		return newProblem(http.StatusUnprocessableEntity, fmt.Sprintf("to: %s is not after from %s", to.Format(time.RFC3339), from.Format(time.RFC3339)))
	}
	rep, err := metering.Client{BaseURL: s.opts.Meter}.Usage(ctx, in.Tenant, from, to, in.GroupBy)
	if err != nil {
		s.log.Warn("usage: the meter could not be read", "error", err)
		return newProblem(http.StatusBadGateway, "the meter could not be read: "+err.Error())
	}
	m := &apiv1.MeteredUsage{From: rep.From, To: rep.To, GroupBy: rep.GroupBy, Groups: []apiv1.UsageGroup{},
		Total: usageGroup(metering.Group{Usage: rep.Total}), OpenGPUSeconds: rep.OpenGPUSeconds, Through: rep.Through}
	for _, g := range rep.Groups {
		m.Groups = append(m.Groups, usageGroup(g))
	}
	out.Metered = m
	return nil
}

func usageGroup(g metering.Group) apiv1.UsageGroup {
	return apiv1.UsageGroup{Key: g.Key, GPUSeconds: g.GPUSeconds, GPUHours: float64(g.GPUSeconds) / 3600,
		Counts: apiv1.Counts{Requests: g.Requests, TokensIn: g.TokensIn, TokensOut: g.TokensOut}}
}

// quotaLeft is what the quota in force leaves of what the jobs claim (never below 0: a quota
// lowered below what runs leaves nothing).
func quotaLeft(q apiv1.TenantQuota) *apiv1.QuotaLeft {
	jobs := map[string]bool{}
	for _, j := range q.Jobs {
		jobs[j.Name] = true
	}
	out := &apiv1.QuotaLeft{Tier: q.Tier, GPUs: q.InForce.GPUs, UsedGPUs: q.UsedGPUs, Jobs: q.InForce.Jobs, UsedJobs: int64(len(jobs))}
	if out.GPUs > 0 {
		left := max(int64(out.GPUs)-out.UsedGPUs, 0)
		out.LeftGPUs = &left
	}
	if out.Jobs > 0 {
		left := max(int64(out.Jobs)-out.UsedJobs, 0)
		out.LeftJobs = &left
	}
	return out
}

// gatewayUsage sums the keys' usage over every gateway replica.
func (s *Server) gatewayUsage(ctx context.Context, in *usageInput, out *apiv1.Usage) error {
	now := s.opts.Now()
	q := url.Values{"tenant": {in.Tenant}, "since": {cmpOr(in.Since, "24h")}}
	if in.Until != "" {
		q.Set("until", in.Until)
	}
	if in.Key != "" {
		q.Set("key", in.Key)
	}
	if _, err := usage.ParseSince(q.Get("since"), now); err != nil {
		return newProblem(http.StatusUnprocessableEntity, "since: "+err.Error())
	}
	if in.Until != "" {
		if _, err := time.Parse(time.RFC3339, in.Until); err != nil {
			return newProblem(http.StatusUnprocessableEntity, fmt.Sprintf("until: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", in.Until))
		}
	}
	reps := make([]usage.UsageReport, len(s.opts.Gateways))
	var lim limits.StatusReport
	g, gctx := errgroup.WithContext(ctx)
	for i, u := range s.opts.Gateways {
		g.Go(func() error {
			var err error
			reps[i], err = gateway.Client{BaseURL: u}.Usage(gctx, q)
			return err
		})
	}
	g.Go(func() error {
		// The counts live in the store every replica shares: one replica answers for all.
		var err error
		lim, err = gateway.Client{BaseURL: s.opts.Gateways[0]}.Limits(gctx, in.Tenant, in.Key)
		return err
	})
	if err := g.Wait(); err != nil {
		s.log.Warn("usage: a gateway replica could not be read", "error", err)
		return newProblem(http.StatusBadGateway, "a gateway replica could not be read, so the sum would be partial: "+err.Error())
	}
	lists := make([][]usage.KeyUsage, len(reps))
	out.Limits, out.LimitsLocal = limitSpend(in.Tenant, lim.Limits), !lim.StoreUp
	for i, r := range reps {
		lists[i] = r.Keys
		if i == 0 {
			out.From, out.To = timePtr(r.From), timePtr(r.To)
		}
	}
	for _, k := range usage.MergeUsage(lists...) {
		if k.Tenant != in.Tenant || (in.Endpoint != "" && !slices.Contains(k.Endpoints, in.Endpoint)) {
			continue
		}
		ku := apiv1.KeyUsage{KeyID: k.KeyID, Endpoints: append([]string{}, k.Endpoints...), Hours: []apiv1.HourSlot{},
			Total: apiv1.Counts{Requests: k.Total.Requests, TokensIn: k.Total.TokensIn, TokensOut: k.Total.TokensOut}}
		for _, h := range k.Hours {
			ku.Hours = append(ku.Hours, apiv1.HourSlot{Hour: h.Hour.UTC(), Counts: apiv1.Counts{Requests: h.Requests, TokensIn: h.TokensIn, TokensOut: h.TokensOut}})
		}
		out.Keys = append(out.Keys, ku)
	}
	return nil
}

// limitSpend keeps the tenant's figures only: a gateway asked for one tenant answers for it,
// but the API never passes on another tenant's figure whatever a gateway sends.
func limitSpend(tenant string, in []limits.LimitStatus) []apiv1.LimitSpend {
	out := []apiv1.LimitSpend{}
	for _, l := range in {
		if l.Tenant != tenant {
			continue
		}
		out = append(out, apiv1.LimitSpend{KeyID: l.KeyID, Scope: l.Scope, Limit: l.Limit, Mode: string(l.Mode),
			Value: l.Value, Used: l.Used, Remaining: l.Remaining, WindowStart: l.WindowStart, ResetsAt: l.ResetsAt})
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// listEndpoints is the health of the tenant's endpoints summed over every gateway replica:
// requests, errors and denials add up, the status is the worst, latencies the worst replica's.
func (s *Server) listEndpoints(ctx context.Context, in *TenantParam) (*body[apiv1.EndpointList], error) {
	if _, _, err := s.authorize(ctx, in.Tenant, access.Read); err != nil {
		return nil, err
	}
	if len(s.opts.Gateways) == 0 {
		return nil, s.noGateway()
	}
	reps := make([]usage.HealthReport, len(s.opts.Gateways))
	g, gctx := errgroup.WithContext(ctx)
	for i, u := range s.opts.Gateways {
		g.Go(func() error {
			var err error
			reps[i], err = gateway.Client{BaseURL: u}.Health(gctx, in.Tenant)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, newProblem(http.StatusBadGateway, "a gateway replica could not be read: "+err.Error())
	}
	return &body[apiv1.EndpointList]{Body: mergeHealth(in.Tenant, reps)}, nil
}

var statusRank = map[string]int{string(usage.StatusHealthy): 0, string(usage.StatusDegraded): 1, string(usage.StatusUnavailable): 2}

func mergeHealth(tenant string, reps []usage.HealthReport) apiv1.EndpointList {
	out := apiv1.EndpointList{Tenant: tenant, Items: []apiv1.EndpointHealth{}}
	byJob := map[string]*apiv1.EndpointHealth{}
	var order []string
	for _, r := range reps {
		out.Window = r.Window
		for _, e := range r.Endpoints {
			if e.Tenant != tenant {
				continue
			}
			m := byJob[e.Job]
			if m == nil {
				m = &apiv1.EndpointHealth{Job: e.Job, Status: string(e.Status)}
				byJob[e.Job] = m
				order = append(order, e.Job)
			}
			if statusRank[string(e.Status)] > statusRank[m.Status] {
				m.Status = string(e.Status)
			}
			for _, reason := range e.Reasons {
				if !slices.Contains(m.Reasons, reason) {
					m.Reasons = append(m.Reasons, reason)
				}
			}
			if e.Replicas != nil {
				// Every gateway replica probes the same VMs: the counts are the same replicas.
				m.Ready, m.Total = max(m.Ready, e.Replicas.Ready), max(m.Total, e.Replicas.Total)
			}
			m.Requests += e.Requests
			m.Errors += e.Errors
			m.Denied += e.Denied
			m.LatencyP50Ms = maxPtr(m.LatencyP50Ms, e.LatencyP50Ms)
			m.LatencyP99Ms = maxPtr(m.LatencyP99Ms, e.LatencyP99Ms)
		}
	}
	slices.Sort(order)
	for _, j := range order {
		m := byJob[j]
		if m.Requests > 0 {
			rate := 1 - float64(m.Errors)/float64(m.Requests)
			m.SuccessRate = &rate
		}
		out.Items = append(out.Items, *m)
	}
	return out
}

func maxPtr(a, b *float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil || *a >= *b:
		return a
	}
	return b
}

// gatewayCache keeps each tenant's rotations for a second: the stages of a list of 50 jobs
// ask the gateway once, and a burst of reads does not become a burst of gateway calls.
type gatewayCache struct {
	urls []string
	ttl  time.Duration
	mu   sync.Mutex
	m    map[string]rotEntry
}

type rotEntry struct {
	at  time.Time
	rot map[string]*lifecycle.Rotation
	err error
}

func newGatewayCache(urls []string) *gatewayCache {
	return &gatewayCache{urls: urls, ttl: time.Second, m: map[string]rotEntry{}}
}

// Rotations is the gateway's view of the tenant's endpoints, from the first gateway replica
// that answers.
func (g *gatewayCache) Rotations(ctx context.Context, tenant string) (map[string]*lifecycle.Rotation, error) {
	if len(g.urls) == 0 {
		return nil, errors.New("this API server knows no gateway (--gateway)")
	}
	g.mu.Lock()
	e, ok := g.m[tenant]
	g.mu.Unlock()
	if ok && time.Since(e.at) < g.ttl {
		return e.rot, e.err
	}
	var errs []string
	e = rotEntry{at: time.Now()}
	for _, u := range g.urls {
		rot, err := gateway.Client{BaseURL: u, HTTP: &http.Client{Timeout: 3 * time.Second}}.Rotations(ctx, tenant)
		if err == nil {
			e.rot, errs = rot, nil
			break
		}
		errs = append(errs, err.Error())
	}
	if errs != nil {
		e.err = errors.New(strings.Join(errs, "; "))
	}
	g.mu.Lock()
	g.m[tenant] = e
	g.mu.Unlock()
	return e.rot, e.err
}
