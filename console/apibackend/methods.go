package apibackend

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// problem turns the API's error answer into the console's: 404 is ErrNotFound, any other
// problem keeps its status, detail and fields (file, field path, generate's words).
func problem(err error) error {
	var e *client.Error
	if !errors.As(err, &e) {
		return err
	}
	if e.Status == http.StatusNotFound {
		return console.ErrNotFound
	}
	p := &console.Problem{Status: e.Status, Detail: e.Problem.Detail}
	if p.Detail == "" {
		p.Detail = e.Problem.Title
	}
	for _, f := range e.Problem.Errors {
		p.Fields = append(p.Fields, console.FieldProblem{File: f.File, Field: f.Field, Message: f.Message})
	}
	return p
}

func (b *Backend) Me(ctx context.Context, id access.Identity) (*console.Me, error) {
	me, err := b.c.Me(as(ctx, id))
	if err != nil {
		return nil, problem(err)
	}
	out := &console.Me{Operator: me.Operator}
	for _, m := range me.Tenants {
		out.Tenants = append(out.Tenants, access.Membership{Tenant: m.Tenant, Role: v1alpha1.TenantRole(m.Role)})
	}
	return out, nil
}

func (b *Backend) ListJobs(ctx context.Context, id access.Identity, tenant string) ([]console.Job, error) {
	l, err := b.c.ListJobs(as(ctx, id), tenant)
	if err != nil {
		return nil, problem(err)
	}
	out := make([]console.Job, 0, len(l.Items))
	for _, j := range l.Items {
		out = append(out, job(j))
	}
	return out, nil
}

func job(j apiv1.Job) console.Job {
	return console.Job{Tenant: j.Tenant, Name: j.Name, Model: j.Model, Runtime: j.Runtime, Variant: j.Variant,
		NodeType: j.NodeType, Replicas: j.Replicas, GPUsPerReplica: j.GPUsPerReplica, NodesPerReplica: j.NodesPerReplica,
		RequireAPIKey: j.RequireAPIKey, Endpoint: j.Endpoint, Stage: j.Stage, Since: j.Since, Reason: j.Reason}
}

func (b *Backend) GetJob(ctx context.Context, id access.Identity, tenant, name string) (*console.JobDetail, error) {
	d, err := b.c.GetJob(as(ctx, id), tenant, name)
	if err != nil {
		return nil, problem(err)
	}
	m := d.Master
	out := &console.JobDetail{Job: job(d.Job), Master: console.Master{Name: m.Name, Model: m.Model, Image: m.Image,
		ImageDigest: m.ImageDigest, PerReplicaGPUCount: m.PerReplicaGPUCount, Args: m.Args, From: m.From}}
	for _, r := range d.ReplicaList {
		rep := console.Replica{Replica: r.Replica, Stage: r.Stage, Since: r.Since, Reason: r.Reason}
		for _, n := range r.Nodes {
			rep.Nodes = append(rep.Nodes, console.Node{VM: n.VM, Node: n.Node, Phase: n.Phase, IPs: n.IPs, Ready: n.Ready})
		}
		out.ReplicaList = append(out.ReplicaList, rep)
	}
	return out, nil
}

func (b *Backend) CreateJob(ctx context.Context, id access.Identity, tenant string, req console.JobCreate) (*console.Job, error) {
	w, err := b.c.CreateJob(as(ctx, id), tenant, apiv1.JobCreate{Name: req.Name, Model: req.Model, Variant: req.Variant,
		NodeType: req.NodeType, GPUCount: req.GPUCount, Replicas: req.Replicas, ModelCacheSize: req.ModelCacheSize,
		RequireAPIKey: req.RequireAPIKey}, client.WriteOptions{})
	if err != nil {
		return nil, problem(err)
	}
	j := job(w.Job)
	return &j, nil
}

func (b *Backend) RestartJob(ctx context.Context, id access.Identity, tenant, name string, replica *int32) error {
	r := int32(-1)
	if replica != nil {
		r = *replica
	}
	_, err := b.c.RestartJob(as(ctx, id), tenant, name, r, client.WriteOptions{})
	return problem(err)
}

func (b *Backend) DeleteJob(ctx context.Context, id access.Identity, tenant, name string) error {
	_, err := b.c.DeleteJob(as(ctx, id), tenant, name)
	return problem(err)
}

func (b *Backend) Models(ctx context.Context, id access.Identity, tenant string) (*console.ModelList, error) {
	l, err := b.c.ListModels(as(ctx, id), tenant)
	if err != nil {
		return nil, problem(err)
	}
	out := &console.ModelList{}
	for _, n := range l.NodeTypes {
		out.NodeTypes = append(out.NodeTypes, console.NodeType{Name: n.Name, GPUsPerNode: n.GPUsPerNode, GPUMemoryGB: n.GPUMemoryGB, HardwareProfile: n.HardwareProfile})
	}
	for _, m := range l.Models {
		cm := console.Model{Model: m.Model, Runtime: m.Runtime, Source: m.Source}
		for _, c := range m.Choices {
			cm.Choices = append(cm.Choices, console.Choice{NodeType: c.NodeType, Master: c.Master, GPUsPerReplica: c.GPUsPerReplica, NodesPerReplica: c.NodesPerReplica, Why: c.Why})
		}
		out.Models = append(out.Models, cm)
	}
	for _, s := range l.Shared {
		out.Shared = append(out.Shared, console.SharedModel{Model: s.Model, Provider: s.Provider, Endpoint: s.Endpoint, URL: s.URL})
	}
	return out, nil
}

// lastUseWindow is how far back a key's last use is looked for in the usage.
const lastUseWindow = 30 * 24 * time.Hour

func (b *Backend) ListKeys(ctx context.Context, id access.Identity, tenant string) ([]console.Key, error) {
	ctx = as(ctx, id)
	l, err := b.c.ListKeys(ctx, tenant)
	if err != nil {
		return nil, problem(err)
	}
	// The last use is the last hour with a request in the usage the gateways report; without
	// gateways (the usage refused) the keys are listed without it.
	last := map[string]time.Time{}
	if u, err := b.c.Usage(ctx, tenant, client.UsageQuery{Since: lastUseWindow.String()}); err == nil {
		for _, k := range u.Keys {
			for _, h := range k.Hours {
				if h.Requests > 0 && h.Hour.After(last[k.KeyID]) {
					last[k.KeyID] = h.Hour
				}
			}
		}
	}
	out := make([]console.Key, 0, len(l.Items))
	for _, k := range l.Items {
		ck := key(k)
		if t, ok := last[k.ID]; ok {
			ck.LastUsed = &t
		}
		out = append(out, ck)
	}
	return out, nil
}

func key(k apiv1.Key) console.Key {
	return console.Key{ID: k.ID, Tenant: k.Tenant, Endpoint: k.Endpoint, Name: k.Name, Status: k.Status,
		CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}
}

func (b *Backend) CreateKey(ctx context.Context, id access.Identity, tenant string, req console.KeyCreate) (*console.KeyCreated, error) {
	k, err := b.c.CreateKey(as(ctx, id), tenant, apiv1.KeyCreate{Name: req.Name, Endpoint: req.Endpoint, Expires: req.Expires}, client.WriteOptions{})
	if err != nil {
		return nil, problem(err)
	}
	return &console.KeyCreated{Key: key(k.Key), APIKey: k.APIKey}, nil
}

func (b *Backend) RevokeKey(ctx context.Context, id access.Identity, tenant, keyID string) error {
	_, err := b.c.RevokeKey(as(ctx, id), tenant, keyID)
	return problem(err)
}

// Usage is the API's usage per key and hour, and per endpoint: the API's usage narrowed to
// each endpoint a key called, summed over the keys.
func (b *Backend) Usage(ctx context.Context, id access.Identity, tenant string, from, to time.Time) (*console.Usage, error) {
	ctx = as(ctx, id)
	q := client.UsageQuery{Since: from.UTC().Format(time.RFC3339), Until: to.UTC().Format(time.RFC3339)}
	u, err := b.c.Usage(ctx, tenant, q)
	if err != nil {
		return nil, problem(err)
	}
	out := &console.Usage{From: from, To: to}
	var endpoints []string
	for _, k := range u.Keys {
		out.Keys = append(out.Keys, series(k.KeyID, []apiv1.KeyUsage{k}))
		for _, e := range k.Endpoints {
			if !slices.Contains(endpoints, e) {
				endpoints = append(endpoints, e)
			}
		}
	}
	slices.Sort(endpoints)
	for _, e := range endpoints {
		q.Endpoint = e
		eu, err := b.c.Usage(ctx, tenant, q)
		if err != nil {
			return nil, problem(err)
		}
		out.Endpoints = append(out.Endpoints, series(e, eu.Keys))
	}
	if u.Metered != nil {
		q = client.UsageQuery{From: q.Since, To: q.Until, GroupBy: "job"}
		mu, err := b.c.Usage(ctx, tenant, q)
		if err != nil {
			return nil, problem(err)
		}
		out.Metered = metered(mu)
	}
	return out, nil
}

// metered is the meter's answer per job, with what the quota leaves.
func metered(u apiv1.Usage) *console.Metered {
	row := func(g apiv1.UsageGroup) console.MeteredRow {
		return console.MeteredRow{Job: g.Key, GPUHours: g.GPUHours, Counts: console.Counts{Requests: g.Requests, TokensIn: g.TokensIn, TokensOut: g.TokensOut}}
	}
	m := &console.Metered{Total: row(u.Metered.Total), OpenGPUHours: float64(u.Metered.OpenGPUSeconds) / 3600}
	for _, g := range u.Metered.Groups {
		m.Jobs = append(m.Jobs, row(g))
	}
	if q := u.Quota; q != nil {
		m.Quota = console.QuotaLeft{Tier: q.Tier, GPUs: q.GPUs, Jobs: q.Jobs, UsedGPUs: q.UsedGPUs, UsedJobs: q.UsedJobs, LeftGPUs: q.LeftGPUs, LeftJobs: q.LeftJobs}
	}
	return m
}

// series sums keys' usage per hour into one named series, hours in order.
func series(name string, keys []apiv1.KeyUsage) console.Series {
	s := console.Series{Name: name}
	byHour := map[time.Time]*console.HourCounts{}
	for _, k := range keys {
		s.Total = add(s.Total, k.Total)
		for _, h := range k.Hours {
			hc := byHour[h.Hour]
			if hc == nil {
				hc = &console.HourCounts{Hour: h.Hour}
				byHour[h.Hour] = hc
			}
			hc.Counts = add(hc.Counts, h.Counts)
		}
	}
	for _, hc := range byHour {
		s.Hours = append(s.Hours, *hc)
	}
	slices.SortFunc(s.Hours, func(a, b console.HourCounts) int { return a.Hour.Compare(b.Hour) })
	return s
}

func add(a console.Counts, b apiv1.Counts) console.Counts {
	return console.Counts{Requests: a.Requests + b.Requests, TokensIn: a.TokensIn + b.TokensIn, TokensOut: a.TokensOut + b.TokensOut}
}

func (b *Backend) Health(ctx context.Context, id access.Identity, tenant string) (*console.Health, error) {
	l, err := b.c.Endpoints(as(ctx, id), tenant)
	if err != nil {
		return nil, problem(err)
	}
	out := &console.Health{Window: l.Window}
	for _, e := range l.Items {
		out.Items = append(out.Items, console.EndpointHealth{Job: e.Job, Status: e.Status, Reasons: e.Reasons, Ready: e.Ready,
			Total: e.Total, Requests: e.Requests, Errors: e.Errors, SuccessRate: e.SuccessRate, LatencyP50Ms: e.LatencyP50Ms, LatencyP99Ms: e.LatencyP99Ms})
	}
	return out, nil
}

// Fleet is read from the API as the operator (admin in every tenant): every tenant's jobs,
// counted per stage, and the GPUs they ask for per node type. The API reports no quotas, so
// QuotaUnknown is set.
func (b *Backend) Fleet(ctx context.Context, id access.Identity) (*console.Fleet, error) {
	ctx = as(ctx, id)
	me, err := b.c.Me(ctx)
	if err != nil {
		return nil, problem(err)
	}
	if !me.Operator {
		return nil, &console.Problem{Status: http.StatusForbidden, Detail: "the fleet is the operator's (its admin groups)"}
	}
	out := &console.Fleet{QuotaUnknown: true}
	total := map[string]int64{}
	for _, m := range me.Tenants {
		l, err := b.c.ListJobs(ctx, m.Tenant)
		if err != nil {
			return nil, problem(err)
		}
		ft := console.FleetTenant{Tenant: m.Tenant, Stages: map[string]int{}}
		use := map[string]int64{}
		for _, j := range l.Items {
			ft.Stages[j.Stage]++
			use[j.NodeType] += int64(j.Replicas) * int64(j.GPUsPerReplica)
		}
		for _, nt := range sortedKeys(use) {
			ft.GPUs = append(ft.GPUs, console.GPUUse{NodeType: nt, InUse: use[nt]})
			total[nt] += use[nt]
		}
		out.Tenants = append(out.Tenants, ft)
	}
	for _, nt := range sortedKeys(total) {
		out.GPUs = append(out.GPUs, console.GPUUse{NodeType: nt, InUse: total[nt]})
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
