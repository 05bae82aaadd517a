package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Backend is what the console needs of the product API's service layer: the same reads and
// writes the JSON API offers, called in process with the signed-in caller. Every method
// decides access itself (the API's rules: access.Policy per tenant) and refuses with a
// *Problem or ErrNotFound; the console also hides what a role may not do, but never relies on
// that.
//
// The shapes follow the API's JSON types (productapi/apiv1) field for field where the API has
// them, so an adapter is a copy; what the API does not have yet (Key.LastUsed, usage per
// endpoint, Fleet) is said at each type.
type Backend interface {
	// Me is the caller's role in each tenant it may use, and whether it is the operator (the
	// API's GET /me): the console shows or hides controls by role, and answers 404 for a
	// tenant not listed.
	Me(ctx context.Context, id access.Identity) (*Me, error)

	// ListJobs is the tenant's jobs with their readiness stage, reason and since.
	ListJobs(ctx context.Context, id access.Identity, tenant string) ([]Job, error)
	// GetJob is one job's master, endpoint and replicas; ErrNotFound when there is none.
	GetJob(ctx context.Context, id access.Identity, tenant, job string) (*JobDetail, error)
	// CreateJob commits a new job; a refusal is a *Problem whose Fields name the request's
	// fields (body.gpuCount) or the job file's (spec.gpuCount).
	CreateJob(ctx context.Context, id access.Identity, tenant string, req JobCreate) (*Job, error)
	// RestartJob restarts one replica's VMs (replica set) or all, keeping the model cache.
	RestartJob(ctx context.Context, id access.Identity, tenant, job string, replica *int32) error
	// DeleteJob removes the job from the inputs.
	DeleteJob(ctx context.Context, id access.Identity, tenant, job string) error
	// JobLogs reads the job's log (the API's GET .../logs): each is called for every line,
	// stage change and notice as it comes, until the log ends (following: until ctx ends or
	// each fails). ErrNotFound for a job the caller may not see.
	JobLogs(ctx context.Context, id access.Identity, tenant, job string, q LogQuery, each func(LogLine) error) error
	// Models is what the tenant may run, per allowed node type, with the GPUs each needs.
	Models(ctx context.Context, id access.Identity, tenant string) (*ModelList, error)

	// ListKeys is the tenant's API keys (never their secret).
	ListKeys(ctx context.Context, id access.Identity, tenant string) ([]Key, error)
	// CreateKey mints a key; the secret is in this answer only.
	CreateKey(ctx context.Context, id access.Identity, tenant string, req KeyCreate) (*KeyCreated, error)
	// RevokeKey revokes a key (final; its record and usage stay).
	RevokeKey(ctx context.Context, id access.Identity, tenant, keyID string) error

	// Usage is requests and tokens per hour in [from, to), per key and per endpoint.
	Usage(ctx context.Context, id access.Identity, tenant string, from, to time.Time) (*Usage, error)
	// Health is each endpoint's status, success rate and latency.
	Health(ctx context.Context, id access.Identity, tenant string) (*Health, error)
	// Fleet is every tenant's jobs per stage and GPUs in use per node type against quota: for
	// the operator only (a *Problem with status 403 for anyone else).
	Fleet(ctx context.Context, id access.Identity) (*Fleet, error)
}

// ErrNotFound is a job, key or tenant that does not exist (or that the caller may not know of:
// the console answers 404 for both, so another customer's names are never confirmed).
var ErrNotFound = errors.New("not found")

// Problem is a refusal the console shows to the caller: the API's problem details (RFC 9457).
type Problem struct {
	// Status is the HTTP status the API would answer (403, 404, 409, 422, 503...).
	Status int
	// Detail says what went wrong, for people.
	Detail string
	// Fields are the problems placed at a field: the console shows each next to its form
	// field, matched by the path's last element (body.gpuCount and spec.gpuCount both go to
	// gpuCount); others are listed above the form.
	Fields []FieldProblem
}

// FieldProblem is one thing wrong with one field.
type FieldProblem struct {
	// File is the input file it is in (tenants/acme/jobs/chat.yaml); empty for the request.
	File string
	// Field is the path (spec.gpuCount, body.replicas).
	Field string
	// Message is the whole line, as `generate` prints it.
	Message string
}

func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d: %s", p.Status, p.Detail)
	for _, f := range p.Fields {
		b.WriteString("; " + f.Message)
	}
	return b.String()
}

// Me is what the caller may use (apiv1.Me).
type Me struct {
	// Operator is a member of the operator's admin groups (admin in every tenant).
	Operator bool
	// Tenants are the tenants the caller has a role in, with the role.
	Tenants []access.Membership
}

// allows says whether a role may take an action (access.Needs: viewer < developer < admin).
func allows(role v1alpha1.TenantRole, a access.Action) bool {
	need := access.Needs(a)
	return role != "" && need != "" && slices.Index(v1alpha1.TenantRoles, role) >= slices.Index(v1alpha1.TenantRoles, need)
}

// Stages are the readiness stages, from worst to best (lifecycle's).
var Stages = []string{"failed", "crash-looping", "unknown", "syncing", "waiting-for-capacity", "booting",
	"pulling-image", "downloading-weights", "loading-model", "serving"}

// Job is one job as a list shows it (apiv1.Job).
type Job struct {
	Tenant          string
	Name            string
	Model           string
	Runtime         string
	Variant         string
	NodeType        string
	Replicas        int32
	GPUsPerReplica  int32
	NodesPerReplica int32
	RequireAPIKey   bool
	// Endpoint is the job's URL (https://<job>.<tenant>.<domain>); empty when unknown.
	Endpoint string
	// Stage is the least ready replica's stage (Stages); Reason says why, Since since when.
	Stage  string
	Since  *time.Time
	Reason string
}

// JobDetail is one job (apiv1.JobDetail, without the Argo CD and gateway internals).
type JobDetail struct {
	Job
	Master Master
	// ReplicaList is each replica's stage and nodes (apiv1's field of the same name).
	ReplicaList []Replica
}

// Master is the model master a job runs (apiv1.Master).
type Master struct {
	Name               string
	Model              string
	Image              string
	ImageDigest        string
	PerReplicaGPUCount int32
	Args               []string
	From               string
}

// Replica is one replica of a job (apiv1.Replica). History is the stages it went through,
// oldest first, when the service layer keeps them (the API does not yet: empty then).
type Replica struct {
	Replica int32
	Stage   string
	Since   *time.Time
	Reason  string
	Nodes   []Node
	History []StageChange
}

// StageChange is one stage a replica entered.
type StageChange struct {
	Stage  string
	Since  time.Time
	Reason string
}

// Node is one VM of a replica (apiv1.Node).
type Node struct {
	VM    string
	Node  string
	Phase string
	IPs   []string
	Ready bool
}

// LogQuery narrows a job's log (the API's query of GET .../logs).
type LogQuery struct {
	// Replica and Node narrow to one replica, one node rank (nil: all).
	Replica, Node *int32
	Follow        bool
	// Tail is each VM's last lines to start from (nil: the API's default); Since leaves out
	// lines before a time (RFC 3339) or a duration back from now.
	Tail   *int64
	Since  string
	Search string
}

// LogLine is one entry of a job's log (apiv1.LogEntry): a line (Kind "line"), a VM's stage
// change ("status") or a notice, Message saying the last two. The JSON is what the log pane's
// script reads.
type LogLine struct {
	Kind      string    `json:"kind"`
	Time      time.Time `json:"time"`
	Replica   *int32    `json:"replica,omitempty"`
	Node      *int32    `json:"node,omitempty"`
	VM        string    `json:"vm,omitempty"`
	Stream    string    `json:"stream,omitempty"`
	Line      string    `json:"line,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
	Message   string    `json:"message,omitempty"`
}

// JobCreate asks for a new job (apiv1.JobCreate): the fields of `inferplane jobs create`.
type JobCreate struct {
	Name           string
	Model          string
	Variant        string
	NodeType       string
	GPUCount       int32
	Replicas       int32
	ModelCacheSize string
	RequireAPIKey  *bool
}

// ModelList is what a tenant may run (apiv1.ModelList), and the provider tenants' models it
// may call with its own keys (Shared).
type ModelList struct {
	NodeTypes []NodeType
	Models    []Model
	Shared    []SharedModel
}

// SharedModel is a provider tenant's endpoint the tenant may call (apiv1.SharedModel).
type SharedModel struct {
	Model, Provider, Endpoint string
	// URL is https://<endpoint>.<provider>.<domain> ("" when the API does not know the domain).
	URL string
}

// NodeType is a GPU node class (apiv1.NodeType).
type NodeType struct {
	Name            string
	GPUsPerNode     int32
	GPUMemoryGB     int32
	HardwareProfile string
}

// Model is one model and where it runs (apiv1.Model).
type Model struct {
	Model   string
	Runtime string
	Source  string
	Choices []Choice
}

// Choice is one node type a model runs on, and what a replica needs there (apiv1.Choice).
type Choice struct {
	NodeType        string
	Master          string
	GPUsPerReplica  int32
	NodesPerReplica int32
	Why             string
}

// KeyCreate asks for an API key (apiv1.KeyCreate).
type KeyCreate struct {
	Name     string
	Endpoint string
	Expires  string
}

// Key is an API key's record (apiv1.Key, plus LastUsed: the start of the last hour the key
// made a request in, which the API can read from its usage; nil when never or unknown).
type Key struct {
	ID        string
	Tenant    string
	Endpoint  string
	Name      string
	Status    string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
	LastUsed  *time.Time
}

// KeyCreated carries the key itself, once (apiv1.KeyCreated).
type KeyCreated struct {
	Key
	APIKey string
}

// Usage is requests and tokens per hour (apiv1.Usage regrouped): one series per key, and one
// per endpoint (the API sums keys' usage per key today; per endpoint needs its hours split by
// endpoint, which the gateway's ledger has).
type Usage struct {
	From, To  time.Time
	Keys      []Series
	Endpoints []Series
	// Metered is the meter's GPU time and recorded tokens per job, and Quota what the quota
	// leaves; nil when the API knows no meter.
	Metered *Metered
}

// Metered is the meter's account of the period, per job.
type Metered struct {
	Jobs  []MeteredRow
	Total MeteredRow
	// OpenGPUHours is the part of the GPU time of VMs running now, not recorded yet.
	OpenGPUHours float64
	Quota        QuotaLeft
}

// MeteredRow is one job's GPU-hours and tokens.
type MeteredRow struct {
	Job      string
	GPUHours float64
	Counts
}

// QuotaLeft is the quota in force against what the jobs claim; Left* are nil with no limit.
type QuotaLeft struct {
	Tier               string
	GPUs, Jobs         int32
	UsedGPUs, UsedJobs int64
	LeftGPUs, LeftJobs *int64
}

// Series is one key's or endpoint's usage per hour.
type Series struct {
	Name  string
	Total Counts
	Hours []HourCounts
}

// Counts are requests and tokens.
type Counts struct {
	Requests  uint64
	TokensIn  uint64
	TokensOut uint64
}

// HourCounts is one hour's counts; Hour is the hour's start.
type HourCounts struct {
	Hour time.Time
	Counts
}

// Health is the tenant's endpoints (apiv1.EndpointList).
type Health struct {
	Window string
	Items  []EndpointHealth
}

// EndpointHealth is one endpoint over every gateway replica (apiv1.EndpointHealth).
type EndpointHealth struct {
	Job          string
	Status       string
	Reasons      []string
	Ready, Total int
	Requests     uint64
	Errors       uint64
	SuccessRate  *float64
	LatencyP50Ms *float64
	LatencyP99Ms *float64
}

// Fleet is what the operator sees of every tenant (not in the API yet).
type Fleet struct {
	Tenants []FleetTenant
	// GPUs are in use per node type, over every tenant.
	GPUs []GPUUse
	// QuotaUnknown: the backend does not know the tenants' quotas (the product API does not
	// report them), so none is shown rather than "none set".
	QuotaUnknown bool
}

// FleetTenant is one tenant's jobs per stage and GPUs against its quota.
type FleetTenant struct {
	Tenant string
	// Stages counts the tenant's jobs per stage (keys of Stages).
	Stages map[string]int
	GPUs   []GPUUse
}

// GPUUse is GPUs in use on one node type against a quota (0: none set).
type GPUUse struct {
	NodeType string
	InUse    int64
	Quota    int64
}
