package apibackend_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/apibackend"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
)

// refuseAll is the network's verifier in these tests: no bearer token is good.
type refuseAll struct{}

func (refuseAll) Verify(context.Context, string) (access.Identity, error) {
	return access.Identity{}, &access.TokenError{Kind: "invalid", Err: errors.New("no token is good here")}
}

var (
	dana = access.Identity{Issuer: "https://idp.test", Subject: "dana", Email: "dana@acme.example", EmailVerified: true, Groups: []string{"acme-ml"}}
	vic  = access.Identity{Issuer: "https://idp.test", Subject: "vic", Email: "vic@acme.example", EmailVerified: true, Groups: []string{"acme-all"}}
	ops  = access.Identity{Issuer: "https://idp.test", Subject: "ops", Email: "ops@platform.test", EmailVerified: true, Groups: []string{"platform-ops"}}
)

func start(t *testing.T) (*apibackend.Backend, apitest.Replica) {
	t.Helper()
	r := apitest.Remotes{Dir: t.TempDir()}
	rep := apitest.StartReplica(t, r, apitest.BundledInputs(t, r), apibackend.Verifier(refuseAll{}),
		productapi.Options{Policy: access.Policy{AdminGroups: []string{"platform-ops"}}, Domain: "inference.test"})
	return apibackend.New(rep.Server.Handler()), rep
}

// TestInProcess: the console's calls reach the API's handler as the signed-in user, with the
// API's roles and words; a request from the network is not let in by the console's verifier.
func TestInProcess(t *testing.T) {
	b, rep := start(t)
	ctx := context.Background()

	me, err := b.Me(ctx, dana)
	require.NoError(t, err)
	assert.False(t, me.Operator)
	assert.Equal(t, []access.Membership{{Tenant: "acme", Role: v1alpha1.RoleDeveloper}}, me.Tenants)

	jobs, err := b.ListJobs(ctx, dana, "acme")
	require.NoError(t, err)
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name)
	}
	assert.ElementsMatch(t, []string{"mistral-small", "qwen3-32b", "transcribe"}, names)

	// The provider tenant's shared model acme's tier offers, for the create page.
	models, err := b.Models(ctx, dana, "acme")
	require.NoError(t, err)
	require.NotEmpty(t, models.Shared, "acme's catalogue offers the platform tenant's shared model")
	assert.Equal(t, "platform", models.Shared[0].Provider)

	_, err = b.GetJob(ctx, dana, "acme", "nosuch")
	assert.ErrorIs(t, err, console.ErrNotFound)

	// The API's refusal, with generate's file, field and words.
	_, err = b.CreateJob(ctx, dana, "acme", console.JobCreate{Name: "forced", Model: "Qwen/Qwen3-32B", GPUCount: 3, Replicas: 1})
	var p *console.Problem
	require.ErrorAs(t, err, &p)
	assert.Equal(t, http.StatusUnprocessableEntity, p.Status)
	require.NotEmpty(t, p.Fields)
	assert.Equal(t, "tenants/acme/jobs/forced.yaml", p.Fields[0].File)
	assert.Equal(t, "spec.gpuCount", p.Fields[0].Field)

	// A viewer's write: the API's 403 and words.
	err = b.DeleteJob(ctx, vic, "acme", "qwen3-32b")
	require.ErrorAs(t, err, &p)
	assert.Equal(t, http.StatusForbidden, p.Status)
	assert.Contains(t, p.Detail, `your role in tenant "acme" is viewer`)

	// The operator's fleet: every tenant, jobs per stage, GPUs the jobs ask for; no quota.
	_, err = b.Fleet(ctx, dana)
	require.ErrorAs(t, err, &p)
	assert.Equal(t, http.StatusForbidden, p.Status)
	f, err := b.Fleet(ctx, ops)
	require.NoError(t, err)
	assert.True(t, f.QuotaUnknown)
	require.NotEmpty(t, f.Tenants)
	assert.Equal(t, 3, f.Tenants[0].Stages["unknown"], "acme's three jobs, no cluster")

	// From the network, the same call without a token is refused: the identity in the
	// context is the console's alone.
	resp, err := http.Get(rep.URL + "/api/v1/tenants/acme/jobs")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// Keys need a key store this replica has not: the API's 503 words, as a Problem.
	_, err = b.CreateKey(ctx, dana, "acme", console.KeyCreate{Name: "x"})
	require.ErrorAs(t, err, &p)
	assert.Equal(t, http.StatusServiceUnavailable, p.Status)
}

// TestUsageWithTheMeter: with a meter, the console's usage has the meter's GPU-hours and
// tokens per job and what the quota leaves; the gateways are not needed for it.
func TestUsageWithTheMeter(t *testing.T) {
	now := time.Date(2026, 5, 3, 12, 0, 0, 0, time.UTC)
	r := apitest.Remotes{Dir: t.TempDir()}
	rep := apitest.StartReplica(t, r, apitest.BundledInputs(t, r), apibackend.Verifier(refuseAll{}),
		productapi.Options{Domain: "inference.test", Meter: apitest.Meter(t, now, apitest.AcmeMeterRecords(now)...)})
	b := apibackend.New(rep.Server.Handler())
	u, err := b.Usage(context.Background(), dana, "acme", now.Add(-36*time.Hour), now)
	require.NoError(t, err)
	require.NotNil(t, u.Metered)
	tok := console.Counts{Requests: 15, TokensIn: 1500, TokensOut: 300}
	assert.Equal(t, []console.MeteredRow{{Job: "mistral-small", GPUHours: 1}, {Job: "qwen3-32b", GPUHours: 6600.0 / 3600, Counts: tok}}, u.Metered.Jobs)
	assert.Equal(t, console.MeteredRow{GPUHours: 10200.0 / 3600, Counts: tok}, u.Metered.Total)
	q := u.Metered.Quota
	assert.Equal(t, "h100-dedicated", q.Tier)
	require.NotNil(t, q.LeftGPUs)
	assert.Equal(t, int64(12), *q.LeftGPUs)
}
