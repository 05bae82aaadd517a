// Package consoletest is a TEST DOUBLE of the product API's service layer for the console's
// tests: an in-memory console.Backend that decides access with the real access.Policy (the
// API's rules) and refuses a create the way the API does (a *console.Problem with field
// paths), so the console's pages, forms and refusals can be tested in a real browser before
// the API server exists. It is not the API: nothing is committed, rendered or read from a
// cluster; a test moves a job's stage by hand, as the API's e2e moves a VMI.
package consoletest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/policy"
)

// Backend is the in-memory double. Safe for concurrent use.
type Backend struct {
	Policy access.Policy
	// Domain makes endpoints http://<job>.<tenant>.<Domain> (http: the tests' stand-in
	// gateway listens on loopback without TLS).
	Domain string
	Now    func() time.Time

	mu      sync.Mutex
	tenants []*v1alpha1.Tenant
	jobs    map[string][]*console.JobDetail
	models  map[string]*console.ModelList
	keys    map[string][]console.Key
	usage   map[string]*console.Usage
	health  map[string]*console.Health
	logs    map[string]*jobLog // by tenant/job
	// Calls counts the writes that reached the double, by method: tests check that a refused
	// request never got here.
	calls map[string]int
	// unavailable makes Usage or Health (by method name) refuse with a problem, as the API does
	// when it knows no gateway.
	unavailable map[string]*console.Problem
}

// New is an empty double with these tenants.
func New(policy access.Policy, tenants ...*v1alpha1.Tenant) *Backend {
	return &Backend{Policy: policy, Domain: "inference.test", Now: time.Now, tenants: tenants,
		jobs: map[string][]*console.JobDetail{}, models: map[string]*console.ModelList{}, keys: map[string][]console.Key{},
		usage: map[string]*console.Usage{}, health: map[string]*console.Health{}, calls: map[string]int{},
		unavailable: map[string]*console.Problem{}}
}

// Tenant makes a tenant object with an access list and a GPU quota.
func Tenant(name string, quota int32, acc ...v1alpha1.TenantAccess) *v1alpha1.Tenant {
	t := &v1alpha1.Tenant{Spec: v1alpha1.TenantSpec{Tier: "dedicated", Access: acc}}
	if quota > 0 {
		t.Spec.Quota = &v1alpha1.Quota{GPUs: quota}
	}
	t.Name = name
	return t
}

// quotaGPUs is a tenant's GPU quota (0: none).
func quotaGPUs(t *v1alpha1.Tenant) int32 {
	if t.Spec.Quota == nil {
		return 0
	}
	return t.Spec.Quota.GPUs
}

// Calls is how many times a method reached the double (the writes, and ListJobs).
func (b *Backend) Calls(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[method]
}

// decide checks the caller's access as the API does: no role is "not found" (the console shows
// a 404 for it), a weak role a 403 with the policy's words.
func (b *Backend) decide(id access.Identity, tenant string, a access.Action) error {
	var obj *v1alpha1.Tenant
	for _, t := range b.tenants {
		if t.Name == tenant {
			obj = t
		}
	}
	d := b.Policy.Decide(id, tenant, obj, a)
	switch {
	case d.Role == "":
		return console.ErrNotFound
	case !d.Allowed:
		return &console.Problem{Status: http.StatusForbidden, Detail: d.Reason}
	case obj == nil:
		return console.ErrNotFound
	}
	return nil
}

// Me is the caller's memberships, as the API's GET /me derives them.
func (b *Backend) Me(_ context.Context, id access.Identity) (*console.Me, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls["Me"]++
	return &console.Me{Operator: b.Policy.IsOperator(id), Tenants: b.Policy.Memberships(id, b.tenants)}, nil
}

// SetModels sets what a tenant may run.
func (b *Backend) SetModels(tenant string, m *console.ModelList) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.models[tenant] = m
}

// AddJob adds a job as if it were in the inputs.
func (b *Backend) AddJob(j console.JobDetail) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if j.Endpoint == "" && b.Domain != "" {
		j.Endpoint = fmt.Sprintf("http://%s.%s.%s", j.Name, j.Tenant, b.Domain)
	}
	b.jobs[j.Tenant] = append(b.jobs[j.Tenant], &j)
}

// SetStage moves a job (every replica) to a stage, as the clusters would.
func (b *Backend) SetStage(tenant, job, stage, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.Now()
	for _, j := range b.jobs[tenant] {
		if j.Name != job {
			continue
		}
		j.Stage, j.Reason, j.Since = stage, reason, &now
		for i := range j.ReplicaList {
			r := &j.ReplicaList[i]
			r.Stage, r.Reason, r.Since = stage, reason, &now
			r.History = append(r.History, console.StageChange{Stage: stage, Since: now, Reason: reason})
		}
	}
}

func (b *Backend) ListJobs(_ context.Context, id access.Identity, tenant string) ([]console.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls["ListJobs"]++
	if err := b.decide(id, tenant, access.Read); err != nil {
		return nil, err
	}
	var out []console.Job
	for _, j := range b.jobs[tenant] {
		out = append(out, j.Job)
	}
	slices.SortFunc(out, func(a, b console.Job) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) find(tenant, name string) (int, *console.JobDetail) {
	for i, j := range b.jobs[tenant] {
		if j.Name == name {
			return i, j
		}
	}
	return -1, nil
}

func (b *Backend) GetJob(_ context.Context, id access.Identity, tenant, job string) (*console.JobDetail, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.Read); err != nil {
		return nil, err
	}
	_, j := b.find(tenant, job)
	if j == nil {
		return nil, console.ErrNotFound
	}
	cp := *j
	return &cp, nil
}

// CreateJob checks the request as the API's generator would, in its words and at its field
// paths: the name, a model the tenant may run on the node type, the GPU count the master
// needs, the tenant's GPU quota.
func (b *Backend) CreateJob(_ context.Context, id access.Identity, tenant string, req console.JobCreate) (*console.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.WriteJobs); err != nil {
		return nil, err
	}
	file := "tenants/" + tenant + "/jobs/" + req.Name + ".yaml"
	refuse := func(field, msg string) error {
		return &console.Problem{Status: http.StatusUnprocessableEntity, Detail: "refused by the rules generate applies; nothing was committed",
			Fields: []console.FieldProblem{{File: file, Field: field, Message: file + ": " + field + ": " + msg}}}
	}
	if errs := validation.IsDNS1123Label(req.Name); len(errs) > 0 {
		return nil, refuse("metadata.name", fmt.Sprintf("Invalid value: %q: %s", req.Name, errs[0]))
	}
	if _, j := b.find(tenant, req.Name); j != nil {
		return nil, &console.Problem{Status: http.StatusConflict, Detail: fmt.Sprintf("a job %q exists already in tenant %q", req.Name, tenant)}
	}
	choice, model, err := b.choice(tenant, req, refuse)
	if err != nil {
		return nil, err
	}
	if req.GPUCount == 0 {
		req.GPUCount = choice.GPUsPerReplica
	}
	if req.GPUCount != choice.GPUsPerReplica {
		return nil, refuse("spec.gpuCount", fmt.Sprintf("Invalid value: %d: must equal the model master's perReplicaGPUCount %d (%s)", req.GPUCount, choice.GPUsPerReplica, choice.Why))
	}
	req.Replicas = max(req.Replicas, 1)
	if t := b.tenant(tenant); t != nil {
		// The quota's own rule and words, as the product API refuses a create.
		var others []policy.Claim
		for _, j := range b.jobs[tenant] {
			others = append(others, policy.Claim{Job: j.Name, Replicas: j.Replicas, GPUs: int64(j.GPUsPerReplica * j.Replicas)})
		}
		job := &v1alpha1.ManagedInferenceJob{Spec: v1alpha1.ManagedInferenceJobSpec{Replicas: req.Replicas, GPUCount: req.GPUCount}}
		job.Name = req.Name
		if errs := policy.CheckJobQuota(t, job, others, nil); len(errs) > 0 {
			return nil, refuse(errs[0].Field, fielderr.Describe(errs[0]))
		}
	}
	b.calls["CreateJob"]++
	now := b.Now()
	j := console.JobDetail{Job: console.Job{Tenant: tenant, Name: req.Name, Model: req.Model, Runtime: model.Runtime, NodeType: choice.NodeType,
		Replicas: req.Replicas, GPUsPerReplica: req.GPUCount, NodesPerReplica: choice.NodesPerReplica, RequireAPIKey: req.RequireAPIKey == nil || *req.RequireAPIKey,
		Stage: "syncing", Reason: "committed; Argo CD has not synced it yet", Since: &now},
		Master: console.Master{Name: choice.Master, Model: req.Model, PerReplicaGPUCount: choice.GPUsPerReplica, From: model.Source}}
	for r := range req.Replicas {
		j.ReplicaList = append(j.ReplicaList, console.Replica{Replica: r, Stage: "syncing", Since: &now,
			History: []console.StageChange{{Stage: "syncing", Since: now}}})
	}
	if b.Domain != "" {
		j.Endpoint = fmt.Sprintf("http://%s.%s.%s", j.Name, tenant, b.Domain)
	}
	b.jobs[tenant] = append(b.jobs[tenant], &j)
	out := j.Job
	return &out, nil
}

func (b *Backend) choice(tenant string, req console.JobCreate, refuse func(string, string) error) (console.Choice, console.Model, error) {
	ml := b.models[tenant]
	if ml == nil {
		return console.Choice{}, console.Model{}, refuse("spec.model", "no models for this tenant")
	}
	i := slices.IndexFunc(ml.Models, func(m console.Model) bool { return m.Model == req.Model })
	if i < 0 {
		return console.Choice{}, console.Model{}, refuse("spec.model", fmt.Sprintf("Not found: %q: no recipe or master of that name this tenant may run", req.Model))
	}
	m := ml.Models[i]
	for _, c := range m.Choices {
		if req.NodeType == "" || c.NodeType == req.NodeType {
			return c, m, nil
		}
	}
	return console.Choice{}, console.Model{}, refuse("spec.nodeType", fmt.Sprintf("Unsupported value: %q: the tenant's allowedNodeTypes do not run %s there", req.NodeType, req.Model))
}

func (b *Backend) tenant(name string) *v1alpha1.Tenant {
	for _, t := range b.tenants {
		if t.Name == name {
			return t
		}
	}
	return nil
}

func (b *Backend) RestartJob(_ context.Context, id access.Identity, tenant, job string, replica *int32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.WriteJobs); err != nil {
		return err
	}
	_, j := b.find(tenant, job)
	if j == nil {
		return console.ErrNotFound
	}
	b.calls["RestartJob"]++
	now := b.Now()
	for i := range j.ReplicaList {
		if replica == nil || *replica == j.ReplicaList[i].Replica {
			r := &j.ReplicaList[i]
			r.Stage, r.Reason, r.Since = "booting", "restarted", &now
			r.History = append(r.History, console.StageChange{Stage: "booting", Since: now, Reason: "restarted"})
		}
	}
	j.Stage, j.Reason, j.Since = "booting", "restarted", &now
	return nil
}

func (b *Backend) DeleteJob(_ context.Context, id access.Identity, tenant, job string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.WriteJobs); err != nil {
		return err
	}
	i, j := b.find(tenant, job)
	if j == nil {
		return console.ErrNotFound
	}
	b.calls["DeleteJob"]++
	b.jobs[tenant] = slices.Delete(b.jobs[tenant], i, i+1)
	return nil
}

func (b *Backend) Models(_ context.Context, id access.Identity, tenant string) (*console.ModelList, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.Read); err != nil {
		return nil, err
	}
	if m := b.models[tenant]; m != nil {
		return m, nil
	}
	return &console.ModelList{}, nil
}

func (b *Backend) ListKeys(_ context.Context, id access.Identity, tenant string) ([]console.Key, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.Read); err != nil {
		return nil, err
	}
	return slices.Clone(b.keys[tenant]), nil
}

// CreateKey mints a key of the form the gateway's keys have (a prefix, then random hex).
func (b *Backend) CreateKey(_ context.Context, id access.Identity, tenant string, req console.KeyCreate) (*console.KeyCreated, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.WriteKeys); err != nil {
		return nil, err
	}
	var exp *time.Time
	if req.Expires != "" {
		d, err := time.ParseDuration(req.Expires)
		if err != nil {
			return nil, &console.Problem{Status: http.StatusUnprocessableEntity, Detail: "the request is not valid",
				Fields: []console.FieldProblem{{Field: "body.expires", Message: fmt.Sprintf("body.expires: Invalid value: %q: a duration such as 720h", req.Expires)}}}
		}
		t := b.Now().Add(d)
		exp = &t
	}
	b.calls["CreateKey"]++
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	idb := make([]byte, 4)
	_, _ = rand.Read(idb)
	k := console.Key{ID: "k-" + hex.EncodeToString(idb), Tenant: tenant, Endpoint: req.Endpoint, Name: req.Name, Status: "active",
		CreatedAt: b.Now(), ExpiresAt: exp}
	b.keys[tenant] = append(b.keys[tenant], k)
	return &console.KeyCreated{Key: k, APIKey: "ipk_" + hex.EncodeToString(raw)}, nil
}

// AddKey adds a key record as if minted earlier.
func (b *Backend) AddKey(k console.Key) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys[k.Tenant] = append(b.keys[k.Tenant], k)
}

func (b *Backend) RevokeKey(_ context.Context, id access.Identity, tenant, keyID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.WriteKeys); err != nil {
		return err
	}
	for i, k := range b.keys[tenant] {
		if k.ID == keyID {
			b.calls["RevokeKey"]++
			now := b.Now()
			b.keys[tenant][i].Status, b.keys[tenant][i].RevokedAt = "revoked", &now
			return nil
		}
	}
	return console.ErrNotFound
}

// SetUsage and SetHealth set what the usage page shows.
func (b *Backend) SetUsage(tenant string, u *console.Usage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.usage[tenant] = u
}

// SetUnavailable makes Usage or Health (method) answer p until called with nil.
func (b *Backend) SetUnavailable(method string, p *console.Problem) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unavailable[method] = p
}

func (b *Backend) SetHealth(tenant string, h *console.Health) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.health[tenant] = h
}

func (b *Backend) Usage(_ context.Context, id access.Identity, tenant string, from, to time.Time) (*console.Usage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.Read); err != nil {
		return nil, err
	}
	if p := b.unavailable["Usage"]; p != nil {
		return nil, p
	}
	u := &console.Usage{From: from, To: to}
	if all := b.usage[tenant]; all != nil {
		u.Keys, u.Endpoints = within(all.Keys, from, to), within(all.Endpoints, from, to)
		u.Metered = all.Metered
	}
	return u, nil
}

// within keeps the hours in [from, to) and sums them.
func within(series []console.Series, from, to time.Time) []console.Series {
	var out []console.Series
	for _, s := range series {
		n := console.Series{Name: s.Name}
		for _, h := range s.Hours {
			if !h.Hour.Before(from) && h.Hour.Before(to) {
				n.Hours = append(n.Hours, h)
				n.Total.Requests += h.Requests
				n.Total.TokensIn += h.TokensIn
				n.Total.TokensOut += h.TokensOut
			}
		}
		out = append(out, n)
	}
	return out
}

func (b *Backend) Health(_ context.Context, id access.Identity, tenant string) (*console.Health, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.decide(id, tenant, access.Read); err != nil {
		return nil, err
	}
	if p := b.unavailable["Health"]; p != nil {
		return nil, p
	}
	if h := b.health[tenant]; h != nil {
		return h, nil
	}
	return &console.Health{}, nil
}

// Fleet counts every tenant's jobs per stage and GPUs per node type: for operators only.
func (b *Backend) Fleet(_ context.Context, id access.Identity) (*console.Fleet, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.Policy.IsOperator(id) {
		return nil, &console.Problem{Status: http.StatusForbidden, Detail: "the fleet is the operator's"}
	}
	f := &console.Fleet{}
	total := map[string]int64{}
	for _, t := range b.tenants {
		ft := console.FleetTenant{Tenant: t.Name, Stages: map[string]int{}}
		per := map[string]int64{}
		for _, j := range b.jobs[t.Name] {
			ft.Stages[j.Stage]++
			per[j.NodeType] += int64(j.GPUsPerReplica * j.Replicas)
		}
		for _, nt := range sortedKeys(per) {
			ft.GPUs = append(ft.GPUs, console.GPUUse{NodeType: nt, InUse: per[nt], Quota: int64(quotaGPUs(t))})
			total[nt] += per[nt]
		}
		f.Tenants = append(f.Tenants, ft)
	}
	for _, nt := range sortedKeys(total) {
		f.GPUs = append(f.GPUs, console.GPUUse{NodeType: nt, InUse: total[nt]})
	}
	return f, nil
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

var _ console.Backend = (*Backend)(nil)
