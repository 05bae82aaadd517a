package apiv1

import "time"

// Quota is what a tenant's jobs may claim together; 0 is no limit (in force, or a tier's) or
// "the tier's" (a tenant's own figures).
type Quota struct {
	GPUs           int32 `json:"gpus" minimum:"0" doc:"GPUs all the tenant's jobs may claim together (replicas x GPUs per replica)"`
	Jobs           int32 `json:"jobs" minimum:"0" doc:"Jobs the tenant may have"`
	ReplicasPerJob int32 `json:"replicasPerJob" minimum:"0" doc:"Replicas one job may have"`
}

// QuotaJob is what one job claims of its tenant's quota.
type QuotaJob struct {
	Name     string `json:"name"`
	Replicas int32  `json:"replicas"`
	GPUs     int64  `json:"gpus" doc:"Replicas x GPUs per replica"`
}

// TenantQuota is a tenant's tier and quota, and what its jobs claim of it.
type TenantQuota struct {
	Tenant string `json:"tenant"`
	Tier   string `json:"tier" doc:"The tier the tenant is on (spec.tier)"`
	// TierQuota and Own are the two sources of InForce: each figure the tenant's file sets
	// (Own, 0 for none) replaces the tier's.
	TierQuota Quota `json:"tierQuota" doc:"The tier's quota (0: no limit)"`
	Own       Quota `json:"own" doc:"The figures tenant.yaml sets itself (0: the tier's)"`
	InForce   Quota `json:"inForce" doc:"The quota the rules hold the tenant to (0: no limit)"`
	// UsedGPUs and Jobs are what the tenant's jobs in the inputs claim.
	UsedGPUs int64      `json:"usedGpus"`
	Jobs     []QuotaJob `json:"jobs"`
	// Over: the jobs claim more than the quota in force (it was lowered below what runs):
	// what runs is kept, and no job may grow until they are back under it.
	Over             bool     `json:"over"`
	AllowedNodeTypes []string `json:"allowedNodeTypes" nullable:"true" doc:"The node types in force (the tier's, or the tenant's narrower list); null: every node type"`
	Models           []string `json:"models" nullable:"true" doc:"The model catalogue in force; null: every model"`
	InputsCommit     string   `json:"inputsCommit"`
}

// QuotaChange is an operator's change of a tenant's own quota figures: each one given
// replaces the tenant's (0 takes the tier's back); those left out stay.
type QuotaChange struct {
	GPUs           *int32 `json:"gpus,omitempty" minimum:"0"`
	Jobs           *int32 `json:"jobs,omitempty" minimum:"0"`
	ReplicasPerJob *int32 `json:"replicasPerJob,omitempty" minimum:"0"`
	Reason         string `json:"reason" minLength:"1" maxLength:"500" doc:"Why: recorded in the commit and the tenant's history (the customer sees it)"`
}

// TierChange is an operator's move of a tenant to another tier.
type TierChange struct {
	Tier   string `json:"tier" minLength:"1" maxLength:"63"`
	Reason string `json:"reason" minLength:"1" maxLength:"500" doc:"Why: recorded in the commit and the tenant's history (the customer sees it)"`
}

// TenantChanged is the answer to a quota or tier change: the quota after it, and the write.
type TenantChanged struct {
	Quota TenantQuota `json:"quota"`
	Write Write       `json:"write"`
}

// TenantChange is one quota or tier change of a tenant, as its history shows it.
type TenantChange struct {
	Commit  string    `json:"commit" doc:"The inputs commit of the change"`
	When    time.Time `json:"when"`
	Author  string    `json:"author" doc:"Who made it: name <email>"`
	Change  string    `json:"change" enum:"quota,tier"`
	Summary string    `json:"summary" doc:"What changed, e.g. gpus 16 -> 32"`
	Reason  string    `json:"reason"`
}

// TenantHistory is a tenant's quota and tier changes, newest first.
type TenantHistory struct {
	Tenant  string         `json:"tenant"`
	Changes []TenantChange `json:"changes"`
}
