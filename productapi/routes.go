package productapi

import (
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// register adds every operation. Each names its operation id (the client's method) and the
// role it needs in its description.
func (s *Server) register() {
	t := Prefix + "/tenants/{tenant}"
	op := func(method, path, id, summary, desc string, status int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: desc,
			DefaultStatus: status, Tags: []string{tag(path)}}
	}
	signin := op(http.MethodGet, Prefix+"/signin", "getSignIn", "How to sign in",
		"The OIDC issuer and client id to sign in with (what `inferplane login` reads). No sign-in needed.", 200)
	signin.Security = []map[string][]string{}
	huma.Register(s.api, signin, s.getSignIn)
	huma.Register(s.api, op(http.MethodGet, Prefix+"/me", "getMe", "Who the caller is",
		"The caller's identity, whether it is an operator, and each tenant it has a role in.", 200), s.getMe)
	huma.Register(s.api, op(http.MethodGet, t+"/jobs", "listJobs", "List jobs",
		"The tenant's jobs with their readiness stage and reason. Role: viewer.", 200), s.listJobs)
	huma.Register(s.api, op(http.MethodPost, t+"/jobs", "createJob", "Create a job",
		"Commits the job to the inputs as the caller, checked by the rules generate applies (refusals carry its file, field and words), then renders and pushes the tenant's repository. Defaults as `inferplane jobs create` derives them. Idempotency-Key makes a retry write once. Role: developer.", 201), s.createJob)
	huma.Register(s.api, op(http.MethodGet, t+"/jobs/{job}", "getJob", "Get a job",
		"The job's master, endpoint, and per replica its nodes, stage, since and reason. Role: viewer.", 200), s.getJob)
	huma.Register(s.api, op(http.MethodDelete, t+"/jobs/{job}", "deleteJob", "Delete a job",
		"Removes the job from the inputs and renders the tenant's repository without it; Argo CD's prune deletes its VMs. Role: developer.", 200), s.deleteJob)
	huma.Register(s.api, op(http.MethodPut, t+"/jobs/{job}/replicas", "setJobReplicas", "Change a job's replicas",
		"Sets spec.replicas in the job's file (its comments kept), checked like a create. Role: admin.", 200), s.setReplicas)
	huma.Register(s.api, op(http.MethodPost, t+"/jobs/{job}/restart", "restartJob", "Restart a job",
		"Restarts one replica's VMs or all, keeping the model cache. Needs the clusters. Role: developer.", 200), s.restartJob)
	huma.Register(s.api, s.logsOperation(op(http.MethodGet, t+"/jobs/{job}/logs", "getJobLogs", "A job's logs",
		"What the job's model servers print and their inference agents report, read from each VM's console log (pods/log of its virt-launcher pod, container guest-console-log), merged over the VMs by time, as NDJSON (one LogEntry per line): the last lines of each VM (tail, since), only some (replica, node, search), and, following, new lines as they come. A client that stops reading for 10 s is cut off. Role: viewer.", 200)), s.jobLogs)
	huma.Register(s.api, op(http.MethodGet, t+"/models", "listModels", "List models",
		"What the tenant may run: hand-written masters, Parakeet and every recipe, on each allowed node type where a job naming it would be admitted, with the GPUs per replica and why; and the shared models of provider tenants its catalogue offers, which it calls with its own keys. Role: viewer.", 200), s.listModels)
	huma.Register(s.api, op(http.MethodGet, t+"/quota", "getQuota", "Get the tenant's quota",
		"The tenant's tier, its quota (the tier's, the tenant's own figures, and those in force), what its jobs claim of it, and its node types and models in force. Role: viewer.", 200), s.getQuota)
	huma.Register(s.api, op(http.MethodPut, t+"/quota", "setQuota", "Change the tenant's quota",
		"Sets the tenant's own quota figures (0: the tier's) in its tenant.yaml, one commit as the caller with the reason, shown in the tenant's history. A quota lowered below what runs keeps what runs and refuses growth. The operator's alone (its admin groups).", 200), s.setQuota)
	huma.Register(s.api, op(http.MethodPut, t+"/tier", "setTier", "Move the tenant to another tier",
		"Sets spec.tier in the tenant's tenant.yaml, one commit as the caller with the reason, checked by the rules generate applies (the new tier must offer the node types and models the tenant's jobs use). The operator's alone (its admin groups).", 200), s.setTier)
	huma.Register(s.api, op(http.MethodGet, t+"/history", "getTenantHistory", "The tenant's quota and tier changes",
		"Every quota and tier change of the tenant, newest first: when, who, what and why. Role: viewer.", 200), s.tenantHistory)
	huma.Register(s.api, op(http.MethodGet, t+"/keys", "listKeys", "List API keys",
		"The tenant's API keys (never their secret). Role: viewer.", 200), s.listKeys)
	huma.Register(s.api, op(http.MethodPost, t+"/keys", "createKey", "Create an API key",
		"The key is in this one answer only; the store keeps its HMAC. Role: developer.", 201), s.createKey)
	huma.Register(s.api, op(http.MethodDelete, t+"/keys/{id}", "revokeKey", "Revoke an API key",
		"Revocation is final; the record stays, listed as revoked. Role: developer.", 200), s.revokeKey)
	huma.Register(s.api, op(http.MethodPut, t+"/keys/{id}/limits", "setKeyLimits", "Set an API key's limits",
		"Replaces the key's own rate limits and token budgets (absent: none of its own). Each is at most the tenant's of the same kind (spec.limits of tenant.yaml), which apply to the key whatever its own; an operator is not bound by them. Role: developer.", 200), s.setKeyLimits)
	huma.Register(s.api, op(http.MethodGet, t+"/usage", "getUsage", "Usage: GPU-seconds, tokens per key, what the quota leaves",
		"Requests and tokens per key and hour over a range (from/to, or since/until), summed over every gateway replica; with a meter (api serve --meter), metered: the GPU-seconds the tenant's VMs held and the keys' recorded tokens, grouped by groupBy (job, model, key, day, nodeType, tier), and quota: what the quota in force leaves of what the jobs claim. groupBy without a meter: 503. Role: viewer.", 200), s.getUsage)
	huma.Register(s.api, op(http.MethodGet, t+"/endpoints", "listEndpoints", "Endpoint health",
		"Status, success rate and latency of each endpoint, summed over every gateway replica. Role: viewer.", 200), s.listEndpoints)
}

func tag(path string) string {
	for _, t := range []string{"jobs", "models", "keys", "usage", "endpoints"} {
		if strings.Contains(path, "/"+t) {
			return t
		}
	}
	for _, t := range []string{"/quota", "/tier", "/history"} {
		if strings.HasSuffix(path, t) {
			return "tenants"
		}
	}
	return "me"
}
