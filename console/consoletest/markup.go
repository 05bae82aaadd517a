package consoletest

import (
	"time"

	"github.com/inferplane/inferplane/console"
)

// Markup in names: what the real API refuses as a job or key name (a DNS label, a name the
// store checks), the double lets in, so that a test sees the console's own rendering of it.
const (
	// MarkupName is a job, key, VM and endpoint name; it holds no slash, so it is one path
	// segment of a job's URL.
	MarkupName = `x<img src=x onerror="window.__pwned='name'">`
	// MarkupModel is a model's name (and the master's image).
	MarkupModel = `<svg onload="window.__pwned='model'"></svg>`
	// MarkupReason is a reason, with the fields of an event stream after CRs and LFs: the live
	// list's events must carry it as data, not as fields of their own.
	MarkupReason = `<script>window.__pwned='reason'</script>` + "\rid: forged\revent: forged\r\ndata: <b>bold</b>\nretry: 1"
)

// AddMarkup puts markup in every name acme's pages show: a job (MarkupName) with its model,
// master, reason, replica and VM; the only model acme may run; a key; the usage of a key and
// an endpoint; an endpoint's health.
func (b *Backend) AddMarkup() {
	now := b.Now()
	b.AddJob(console.JobDetail{
		Job: console.Job{Tenant: "acme", Name: MarkupName, Model: MarkupModel, Runtime: "vllm", NodeType: "metal3.gpu-h100", Replicas: 1,
			GPUsPerReplica: 1, NodesPerReplica: 1, Stage: "serving", Reason: MarkupReason, Since: &now},
		Master: console.Master{Name: MarkupName, Model: MarkupModel, Image: MarkupModel, Args: []string{MarkupReason}, From: "recipe"},
		ReplicaList: []console.Replica{{Replica: 0, Stage: "serving", Reason: MarkupReason,
			Nodes: []console.Node{{VM: MarkupName, Node: MarkupName, Phase: MarkupReason}}}},
	})
	b.SetModels("acme", &console.ModelList{NodeTypes: []console.NodeType{{Name: "metal3.gpu-h100", GPUsPerNode: 8}},
		Models: []console.Model{{Model: MarkupModel, Runtime: "vllm", Source: MarkupName, Choices: []console.Choice{{NodeType: "metal3.gpu-h100",
			Master: MarkupName, GPUsPerReplica: 1, NodesPerReplica: 1, Why: MarkupReason}}}}})
	b.AddKey(console.Key{ID: "k-00000001", Tenant: "acme", Name: MarkupName, Endpoint: MarkupName, Status: "active", CreatedAt: now})
	hour := now.UTC().Truncate(time.Hour).Add(-time.Hour)
	s := console.Series{Name: MarkupName, Hours: []console.HourCounts{{Hour: hour, Counts: console.Counts{Requests: 3}}}}
	b.SetUsage("acme", &console.Usage{Keys: []console.Series{s}, Endpoints: []console.Series{s}})
	b.SetHealth("acme", &console.Health{Items: []console.EndpointHealth{{Job: MarkupName, Status: "degraded", Reasons: []string{MarkupReason}}}})
}
