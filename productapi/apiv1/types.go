// Package apiv1 holds the Go types of the product API's JSON under /api/v1: the bodies the
// server's handlers take and return (its OpenAPI document is generated from them) and the
// typed client decodes. It imports nothing of the server, so a client (the CLI, a test, the
// console's backend) takes only these types.
package apiv1

import (
	"time"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Roles a caller can have in a tenant (spec.access of tenant.yaml).
const (
	RoleViewer    = "viewer"
	RoleDeveloper = "developer"
	RoleAdmin     = "admin"
)

// SignIn is how a client signs in to this API (no sign-in needed to read it): the OIDC
// provider and the client id its ID tokens must be issued for. `inferplane login` reads it.
type SignIn struct {
	Issuer   string `json:"issuer" format:"uri" doc:"The OIDC issuer URL (its discovery document is at /.well-known/openid-configuration)"`
	ClientID string `json:"clientId" doc:"The client id to sign in as: the audience of the ID tokens this API accepts"`
	// GroupsClaim names the claim the roles read, so a client can say which groups it has.
	GroupsClaim string `json:"groupsClaim" doc:"The ID token claim holding the caller's groups"`
}

// Me is who the caller is and what it may use.
type Me struct {
	Issuer  string `json:"issuer" doc:"The token's issuer"`
	Subject string `json:"subject" doc:"The caller's subject at the issuer"`
	Email   string `json:"email,omitempty"`
	// EmailVerified says whether the provider vouches for the address (only then does it
	// name a user entry of spec.access).
	EmailVerified bool     `json:"emailVerified"`
	Name          string   `json:"name,omitempty"`
	Groups        []string `json:"groups"`
	// Operator is true for a member of the operator's admin groups (admin in every tenant).
	Operator bool         `json:"operator"`
	Tenants  []Membership `json:"tenants" doc:"Every tenant the caller has a role in"`
}

// Membership is a tenant and the caller's role there.
type Membership struct {
	Tenant string `json:"tenant"`
	Role   string `json:"role" enum:"viewer,developer,admin"`
}

// Job is one job as a list shows it: what it runs and how far it is.
type Job struct {
	Tenant          string `json:"tenant"`
	Name            string `json:"name"`
	Model           string `json:"model"`
	Runtime         string `json:"runtime" enum:"vllm,parakeet"`
	Variant         string `json:"variant,omitempty"`
	NodeType        string `json:"nodeType"`
	Replicas        int32  `json:"replicas"`
	GPUsPerReplica  int32  `json:"gpusPerReplica"`
	NodesPerReplica int32  `json:"nodesPerReplica"`
	RequireAPIKey   bool   `json:"requireApiKey"`
	// Endpoint is the job's URL (https://<job>.<tenant>.<domain>); empty when the server
	// knows no domain.
	Endpoint string `json:"endpoint,omitempty"`
	// Stage is the least ready replica's readiness stage; Reason says why, Since since when.
	Stage  string     `json:"stage" enum:"failed,crash-looping,unknown,syncing,waiting-for-capacity,booting,pulling-image,downloading-weights,loading-model,serving"`
	Since  *time.Time `json:"since,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// JobList is a tenant's jobs.
type JobList struct {
	Tenant string `json:"tenant"`
	// InputsCommit is the inputs commit the list was read from.
	InputsCommit string `json:"inputsCommit"`
	Items        []Job  `json:"items"`
}

// JobDetail is one job: its master, endpoint and, per replica, nodes and stage.
type JobDetail struct {
	Job
	Master       Master       `json:"master"`
	ReplicaList  []Replica    `json:"replicaStatus"`
	Application  *Application `json:"application,omitempty"`
	Gateway      *GatewayView `json:"gateway,omitempty"`
	GatewayError string       `json:"gatewayError,omitempty"`
	InputsCommit string       `json:"inputsCommit"`
}

// Master is the model master a job runs.
type Master struct {
	Name               string   `json:"name"`
	Model              string   `json:"model"`
	Image              string   `json:"image,omitempty"`
	ImageDigest        string   `json:"imageDigest,omitempty"`
	PerReplicaGPUCount int32    `json:"perReplicaGpuCount"`
	Args               []string `json:"args,omitempty"`
	// From says where the master came from: a hand-written master, the built-in Parakeet
	// master, or a recipe derived for a hardware profile.
	From string `json:"from"`
}

// Replica is one replica of a job.
type Replica struct {
	Replica int32      `json:"replica"`
	Stage   string     `json:"stage"`
	Since   *time.Time `json:"since,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	Nodes   []Node     `json:"nodes"`
}

// Node is one VM of a replica, as its VMI reports it.
type Node struct {
	VM    string   `json:"vm"`
	Node  string   `json:"node,omitempty"`
	Phase string   `json:"phase,omitempty"`
	IPs   []string `json:"ips,omitempty"`
	Ready bool     `json:"ready"`
	// Agent is what the VM's inference agent last reported, when the API read it (a running
	// VM the gateway does not serve yet).
	Agent *AgentStatus `json:"agent,omitempty"`
}

// Application is the job's Argo CD Application, as far as the stages read it.
type Application struct {
	Name     string `json:"name"`
	Sync     string `json:"sync"`
	Health   string `json:"health,omitempty"`
	Revision string `json:"revision,omitempty"`
}

// GatewayView is the gateway's view of the job's endpoint.
type GatewayView struct {
	Known   bool     `json:"known"`
	Status  string   `json:"status,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	Ready   int      `json:"ready"`
	Total   int      `json:"total"`
}

// JobCreate asks for a new job: the fields of `inferplane jobs create`, defaults derived the
// same way (gpuCount: the master's perReplicaGPUCount; nodeType: the tenant's only allowed
// node type; runtime: parakeet for the Parakeet model).
type JobCreate struct {
	Name           string          `json:"name" doc:"The job's name (a DNS label; the endpoint is <name>.<tenant>.<domain>)"`
	Model          string          `json:"model" doc:"A recipe model id (Qwen/Qwen3-32B) or a ModelMaster name"`
	Runtime        string          `json:"runtime,omitempty" enum:"vllm,parakeet"`
	Variant        string          `json:"variant,omitempty"`
	Strategy       string          `json:"strategy,omitempty"`
	NodeType       string          `json:"nodeType,omitempty"`
	GPUCount       int32           `json:"gpuCount,omitempty" doc:"GPUs per replica; default the master's perReplicaGPUCount"`
	Replicas       int32           `json:"replicas,omitempty" doc:"Replicas behind the endpoint; default 1"`
	ModelCacheSize string          `json:"modelCacheSize,omitempty"`
	Features       map[string]bool `json:"features,omitempty" doc:"Recipe features turned on or off"`
	RequireAPIKey  *bool           `json:"requireApiKey,omitempty" doc:"Default true"`
}

// ReplicasChange sets a job's replicas.
type ReplicasChange struct {
	Replicas int32 `json:"replicas" minimum:"0"`
}

// Restart restarts a job's VMs, keeping its model cache.
type Restart struct {
	// Replica restarts one replica; absent restarts every replica.
	Replica *int32 `json:"replica,omitempty" minimum:"0"`
}

// Restarted is what a restart did.
type Restarted struct {
	Tenant string        `json:"tenant"`
	Job    string        `json:"job"`
	VMs    []RestartedVM `json:"vms"`
}

// RestartedVM is one VM restarted, and how (KubeVirt's restart subresource, or its VMI
// deleted for runStrategy Always to start a new one).
type RestartedVM struct {
	VM  string `json:"vm"`
	How string `json:"how"`
}

// Write says what a write did in git.
type Write struct {
	// InputsCommit is the inputs commit that holds the change (the first request's, when
	// Replayed).
	InputsCommit string `json:"inputsCommit"`
	// Replayed: the Idempotency-Key was seen before; nothing was written this time.
	Replayed bool `json:"replayed"`
	// Unchanged: the change left the inputs as they were.
	Unchanged bool `json:"unchanged"`
	// TenantCommit is the tenant repository's commit of the render ("" when the render
	// changed nothing or did not happen).
	TenantCommit string `json:"tenantCommit,omitempty"`
	// Rendered: the tenant's repository reflects the change; when false, RenderError says why
	// and the reconcile loop of every replica renders it.
	Rendered    bool   `json:"rendered"`
	RenderError string `json:"renderError,omitempty"`
}

// JobWritten is the answer to a job write.
type JobWritten struct {
	Job   Job   `json:"job"`
	Write Write `json:"write"`
}

// JobDeleted is the answer to a job deletion.
type JobDeleted struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	Write  Write  `json:"write"`
}

// ModelList is what a tenant may run: each model with the node types it fits, the GPUs a
// replica needs there and why.
type ModelList struct {
	Tenant       string     `json:"tenant"`
	Tier         string     `json:"tier" doc:"The tenant's tier, whose catalogue (narrowed by the tenant's own list, if any) the models are"`
	InputsCommit string     `json:"inputsCommit"`
	NodeTypes    []NodeType `json:"nodeTypes" doc:"The tenant's allowed node types"`
	Models       []Model    `json:"models"`
	// Shared are the models of provider tenants (the shared serving tier) that the tenant may
	// call with its own keys: those its catalogue offers.
	Shared []SharedModel `json:"shared" doc:"Models of provider tenants the tenant may call with its own keys (the shared serving tier): those its catalogue offers"`
}

// SharedModel is a provider tenant's endpoint that a tenant may call with its own keys,
// charged to its own limits and budgets.
type SharedModel struct {
	Model    string `json:"model" doc:"The model the endpoint serves"`
	Provider string `json:"provider" doc:"The provider tenant"`
	Endpoint string `json:"endpoint" doc:"The provider's job serving it"`
	URL      string `json:"url,omitempty" doc:"https://<job>.<provider>.<domain>, when the API knows the domain"`
}

// NodeType is a GPU node class.
type NodeType struct {
	Name            string `json:"name"`
	GPUsPerNode     int32  `json:"gpusPerNode"`
	GPUMemoryGB     int32  `json:"gpuMemoryGB,omitempty"`
	HardwareProfile string `json:"hardwareProfile,omitempty"`
}

// Model is one model and where it runs.
type Model struct {
	// Model is what a job names in model: a recipe model id or a ModelMaster name.
	Model   string `json:"model"`
	Runtime string `json:"runtime"`
	// Source is recipe, master (hand-written) or built-in (Parakeet).
	Source  string   `json:"source" enum:"recipe,master,built-in"`
	Choices []Choice `json:"choices"`
}

// Choice is one node type a model runs on.
type Choice struct {
	NodeType        string `json:"nodeType"`
	Master          string `json:"master"`
	GPUsPerReplica  int32  `json:"gpusPerReplica"`
	NodesPerReplica int32  `json:"nodesPerReplica"`
	// Why the GPU count: the recipe's strategy and parallel sizes for this hardware, or the
	// hand-written master's.
	Why string `json:"why"`
}

// KeyCreate asks for an API key.
type KeyCreate struct {
	Name string `json:"name,omitempty" doc:"A label for people"`
	// Endpoint limits the key to one job of the tenant; empty allows every endpoint.
	Endpoint string `json:"endpoint,omitempty"`
	// Expires: a duration (720h, 30d), a date (2027-01-31) or an RFC 3339 time; empty never.
	Expires string `json:"expires,omitempty"`
	// Limits are the key's own rate limits and token budgets, on top of its tenant's.
	Limits *v1alpha1.RateLimits `json:"limits,omitempty"`
}

// Key is an API key's record (never its secret).
type Key struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Endpoint  string     `json:"endpoint,omitempty"`
	Name      string     `json:"name,omitempty"`
	Status    string     `json:"status" enum:"active,revoked,expired"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
	// Limits are the key's own limits (absent: only its tenant's).
	Limits *v1alpha1.RateLimits `json:"limits,omitempty"`
}

// KeyLimits replaces a key's own limits.
type KeyLimits struct {
	// Limits are the key's new limits, each at most its tenant's of the same kind; absent or
	// null: none of its own (the tenant's still apply).
	Limits *v1alpha1.RateLimits `json:"limits,omitempty"`
}

// KeyCreated carries the key itself: in this one response only.
type KeyCreated struct {
	Key
	APIKey string `json:"apiKey" doc:"The key; shown once, stored only as an HMAC"`
}

// KeyList is a tenant's keys.
type KeyList struct {
	Tenant string `json:"tenant"`
	Items  []Key  `json:"items"`
}

// Usage is a tenant's requests and tokens per key and hour, summed over every gateway
// replica.
type Usage struct {
	Tenant string     `json:"tenant"`
	From   *time.Time `json:"from,omitempty"`
	To     *time.Time `json:"to,omitempty"`
	Keys   []KeyUsage `json:"keys"`
	// Limits are the spend against the tenant's limits and its keys' own in their current
	// windows (every gateway replica shares the counts); empty when none are set.
	Limits []LimitSpend `json:"limits"`
	// LimitsLocal is true when the figures are one gateway replica's own counts: it has no
	// shared limits store, or cannot reach it. Other replicas' spend may be missing.
	LimitsLocal bool `json:"limitsLocal,omitempty"`
	// Metered is the meter's account of the period (GPU-seconds and the keys' recorded
	// tokens, grouped by groupBy); absent when this API server knows no meter.
	Metered *MeteredUsage `json:"metered,omitempty"`
	// Quota is what the tenant's quota leaves: its figures in force and what its jobs claim.
	Quota *QuotaLeft `json:"quota,omitempty"`
}

// MeteredUsage is the meter's records of a period, grouped.
type MeteredUsage struct {
	From    time.Time `json:"from" doc:"The first hour counted"`
	To      time.Time `json:"to" doc:"The end of the last hour counted"`
	GroupBy string    `json:"groupBy,omitempty" enum:"job,model,key,day,nodeType,tier,"`
	// Groups are sorted by key; GPU time has no key, so under groupBy=key it is the row with
	// an empty key.
	Groups []UsageGroup `json:"groups"`
	Total  UsageGroup   `json:"total"`
	// OpenGPUSeconds is the part of the GPU time not recorded yet (VMs running now, up to
	// Through): in the answer at once, in the records once proven.
	OpenGPUSeconds uint64    `json:"openGpuSeconds"`
	Through        time.Time `json:"through"`
}

// UsageGroup is one row of metered usage.
type UsageGroup struct {
	Key        string  `json:"key"`
	GPUSeconds uint64  `json:"gpuSeconds"`
	GPUHours   float64 `json:"gpuHours" doc:"gpuSeconds / 3600"`
	Counts
}

// QuotaLeft is a tenant's quota in force against what its jobs claim (0: no limit, and no
// figure left).
type QuotaLeft struct {
	Tier     string `json:"tier"`
	GPUs     int32  `json:"gpus"`
	UsedGPUs int64  `json:"usedGpus"`
	LeftGPUs *int64 `json:"leftGpus,omitempty" doc:"GPUs more the jobs may claim; absent: no limit"`
	Jobs     int32  `json:"jobs"`
	UsedJobs int64  `json:"usedJobs"`
	LeftJobs *int64 `json:"leftJobs,omitempty" doc:"Jobs more the tenant may create; absent: no limit"`
}

// LimitSpend is one limit with its spend in the current window.
type LimitSpend struct {
	// KeyID is empty for the tenant's own limits (all its keys together).
	KeyID       string    `json:"keyId,omitempty"`
	Scope       string    `json:"scope" enum:"tenant,key"`
	Limit       string    `json:"limit" doc:"requestsPerMinute, tokensPerMinute, tokensPerDay, tokensPerWeek or tokensPerMonth"`
	Mode        string    `json:"mode" enum:"hard,soft"`
	Value       int64     `json:"value"`
	Used        int64     `json:"used"`
	Remaining   int64     `json:"remaining"`
	WindowStart time.Time `json:"windowStart"`
	ResetsAt    time.Time `json:"resetsAt"`
}

// KeyUsage is one key's usage.
type KeyUsage struct {
	KeyID string `json:"keyId"`
	// Endpoints are the jobs the key called in the period.
	Endpoints []string   `json:"endpoints"`
	Total     Counts     `json:"total"`
	Hours     []HourSlot `json:"hours"`
}

// Counts are requests and tokens.
type Counts struct {
	Requests  uint64 `json:"requests"`
	TokensIn  uint64 `json:"tokensIn"`
	TokensOut uint64 `json:"tokensOut"`
}

// HourSlot is one hour of a key's usage.
type HourSlot struct {
	Hour time.Time `json:"hour"`
	Counts
}

// EndpointList is the health of a tenant's endpoints.
type EndpointList struct {
	Tenant string `json:"tenant"`
	// Window is the sliding window the figures cover (e.g. 5m0s).
	Window string           `json:"window,omitempty"`
	Items  []EndpointHealth `json:"items"`
}

// EndpointHealth is one endpoint, summed over every gateway replica.
type EndpointHealth struct {
	Job      string   `json:"job"`
	Status   string   `json:"status" enum:"healthy,degraded,unavailable"`
	Reasons  []string `json:"reasons,omitempty"`
	Ready    int      `json:"ready"`
	Total    int      `json:"total"`
	Requests uint64   `json:"requests"`
	Errors   uint64   `json:"errors"`
	Denied   uint64   `json:"denied"`
	// SuccessRate is 1 - errors/requests; absent without requests.
	SuccessRate *float64 `json:"successRate,omitempty"`
	// LatencyP50Ms and LatencyP99Ms: the worst gateway replica's (percentiles do not add).
	LatencyP50Ms *float64 `json:"latencyP50Ms,omitempty"`
	LatencyP99Ms *float64 `json:"latencyP99Ms,omitempty"`
}
