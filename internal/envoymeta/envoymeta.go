// Package envoymeta names the dynamic metadata that Envoy's filters write and its access log
// carries to the usage service: what the key check (ext_authz) says about a request, and the
// token counts the usage Lua filter lifts from a response. The key check, the gateway's
// filters and the usage service all read the names here, so none imports another for them.
package envoymeta

// The key check's metadata: Envoy puts the CheckResponse's dynamic metadata under the ext_authz
// filter's canonical name, so the namespace must stay that name.
const (
	AuthzNamespace = "envoy.filters.http.ext_authz"
	AuthzTenant    = "tenant"
	AuthzJob       = "job"
	AuthzKeyID     = "key_id"
	// AuthzCaller is the tenant of the key, set on a call to a shared endpoint (the shared
	// serving tier), whose usage and tokens are the caller's, not the endpoint's tenant's.
	AuthzCaller = "caller"
)

// The usage Lua filter's metadata (usage/envoylua's script writes these).
const (
	UsageNamespace   = "inferplane.usage"
	PromptTokens     = "prompt_tokens"
	CompletionTokens = "completion_tokens"
	// StreamEvents is the number of SSE data events a stream carried (set as they pass), from
	// which a stream cut off before its usage is estimated.
	StreamEvents = "stream_events"
)
