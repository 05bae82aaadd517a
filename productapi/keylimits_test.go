package productapi_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// acmeLimits are the limits the tests give acme in its tenant.yaml.
const acmeLimits = `  limits:
    requestsPerMinute: {value: 600}
    tokensPerDay: {value: 100000, mode: soft}
`

// withTenantLimits gives a tenant.yaml of the bundled inputs spec.limits (as the operator would).
func withTenantLimits(tenant, limits string) func(map[string]string) {
	return func(files map[string]string) {
		p := "tenants/" + tenant + "/tenant.yaml"
		files[p] = strings.Replace(files[p], "\nspec:\n", "\nspec:\n"+limits, 1)
	}
}

func rpm(n int64) *v1alpha1.RateLimits {
	return &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: n}}
}

// TestCustomersLimitTheirKeys: through the API's handlers, a customer who may manage a tenant's
// keys (developer and up) sets and clears a key's own limits, each at most the tenant's of
// the same kind (acme's tenant.yaml: 600 requests a minute, 100,000 tokens a day), at create
// and later; one above is refused by field with the tenant's value, and changes nothing. A
// viewer may not; another tenant's key is not found; a revoked key is not changed; the
// operator is not bound by the tenant's limits; a tenant without limits bounds nothing. No
// request touches the inputs (the tenant's limits stay as the operator wrote them).
func TestCustomersLimitTheirKeys(t *testing.T) {
	ctx := context.Background()
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r, withTenantLimits("acme", acmeLimits))
	h, err := keys.NewHasher([]byte(strings.Repeat("s", 32)))
	require.NoError(t, err)
	store := keys.NewFileStore(filepath.Join(t.TempDir(), "keys.db"))
	v := tokens{"root": {Issuer: "https://idp.test", Subject: "root", Email: "root@platform.example", EmailVerified: true, Groups: []string{"platform-ops"}},
		"gus": {Issuer: "https://idp.test", Subject: "gus", Email: "gus@globex.example", EmailVerified: true, Groups: []string{"globex-admins"}}}
	for k, id := range people {
		v[k] = id
	}
	rep := startReplica(t, r, inputs, v, productapi.Options{Keys: store, Hasher: h, Policy: access.Policy{AdminGroups: []string{"platform-ops"}}})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	as := func(tok string) *client.Client {
		c := client.New(rep.url, client.StaticToken(tok))
		c.Inspect = doc.Inspector(t)
		return c
	}
	head := gitserver.Git(t, r.Path("inputs"), "rev-parse", "main")

	// At create: within the tenant's limits, and above them.
	k, err := as("dana").CreateKey(ctx, "acme", apiv1.KeyCreate{Name: "ci", Limits: rpm(60)}, client.WriteOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 60, k.Limits.RequestsPerMinute.Value)
	_, err = as("dana").CreateKey(ctx, "acme", apiv1.KeyCreate{Name: "greedy", Limits: rpm(601)}, client.WriteOptions{})
	assertRefused(t, err, "body.limits.requestsPerMinute.value",
		"limits.requestsPerMinute.value is 601: must be at most 600, the tenant's own requests per minute (spec.limits.requestsPerMinute of tenants/acme/tenant.yaml), which applies to every key of acme")
	globex, err := as("root").CreateKey(ctx, "globex", apiv1.KeyCreate{Name: "theirs"}, client.WriteOptions{})
	require.NoError(t, err)
	gone, err := as("dana").CreateKey(ctx, "acme", apiv1.KeyCreate{Name: "old"}, client.WriteOptions{})
	require.NoError(t, err)
	_, err = as("dana").RevokeKey(ctx, "acme", gone.ID)
	require.NoError(t, err)

	within := &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 600}, TokensPerDay: &v1alpha1.Limit{Value: 100000, Mode: v1alpha1.LimitSoft},
		TokensPerMonth: &v1alpha1.Limit{Value: 5_000_000_000}}
	for _, tc := range []struct {
		name, who, tenant, key string
		limits                 *v1alpha1.RateLimits
		status                 int
		field, says            string
		want                   string // the key's limits after, in words
	}{
		{"a developer, within (a kind the tenant leaves open is free)", "dana", "acme", k.ID, within, 200, "", "",
			"600 requests per minute, 100000 tokens per day (soft), 5000000000 tokens per month"},
		{"a developer, above the tenant's daily tokens", "dana", "acme", k.ID, &v1alpha1.RateLimits{TokensPerDay: &v1alpha1.Limit{Value: 100001}}, 422,
			"body.limits.tokensPerDay.value", "limits.tokensPerDay.value is 100001: must be at most 100000, the tenant's own tokens per day", ""},
		{"acme's admin, a customer too, above", "ops", "acme", k.ID, rpm(1000), 422, "body.limits.requestsPerMinute.value", "must be at most 600", ""},
		{"not a positive number", "dana", "acme", k.ID, rpm(0), 422, "body.limits.requestsPerMinute.value", `limits.requestsPerMinute.value is 0: must be a positive number`, ""},
		{"a mode that is neither", "dana", "acme", k.ID, &v1alpha1.RateLimits{TokensPerMinute: &v1alpha1.Limit{Value: 5, Mode: "loud"}}, 422,
			"body.limits.tokensPerMinute.mode", "must be hard or soft", ""},
		{"a viewer", "vera", "acme", k.ID, rpm(1), 403, "", "needs developer", ""},
		{"another tenant's key, named through one's own", "dana", "acme", globex.ID, rpm(1), 404, "", "tenant acme has no key " + globex.ID, ""},
		{"a key that does not exist", "dana", "acme", "0123456789abcdef", rpm(1), 404, "", "tenant acme has no key 0123456789abcdef", ""},
		{"another tenant", "dana", "globex", globex.ID, rpm(1), 403, "", "you have no role in tenant", ""},
		{"a revoked key", "dana", "acme", gone.ID, rpm(1), 409, "", "is revoked", ""},
		{"the operator, above the tenant's", "root", "acme", k.ID, rpm(10000), 200, "", "", "10000 requests per minute"},
		{"a developer clears them: the tenant's remain", "dana", "acme", k.ID, nil, 200, "", "", "none"},
		{"a tenant without limits bounds nothing", "gus", "globex", globex.ID, rpm(1_000_000), 200, "", "", "1000000 requests per minute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := store.Get(ctx, tc.key)
			if err != nil {
				before = keys.Record{}
			}
			got, err := as(tc.who).SetKeyLimits(ctx, tc.tenant, tc.key, tc.limits)
			after, _ := store.Get(ctx, tc.key)
			if tc.status == 200 {
				require.NoError(t, err)
				assert.Equal(t, tc.want, limitsOf(got.Limits))
				assert.Equal(t, tc.want, limitsOf(after.Limits), "the store")
				return
			}
			require.Error(t, err)
			assert.True(t, client.IsStatus(err, tc.status), "want %d: %v", tc.status, err)
			if tc.field != "" {
				assertRefused(t, err, tc.field, tc.says)
			} else {
				assert.Contains(t, err.Error(), tc.says)
			}
			assert.Equal(t, limitsOf(before.Limits), limitsOf(after.Limits), "a refused change changed the key")
		})
	}
	assert.Equal(t, head, gitserver.Git(t, r.Path("inputs"), "rev-parse", "main"), "the inputs (the tenant's limits) were written")
}

// limitsOf says limits in words (limits.Set's), "none" without any.
func limitsOf(l *v1alpha1.RateLimits) string { return limits.FromSpec(l).String() }

// assertRefused: a 422 whose problem names the field and says what was expected.
func assertRefused(t *testing.T, err error, field, says string) {
	t.Helper()
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusUnprocessableEntity, ce.Status, "%v", err)
	for _, p := range ce.Problem.Errors {
		if p.Field == field {
			assert.Contains(t, p.Message, says)
			return
		}
	}
	t.Errorf("no problem for %s in %v", field, err)
}
