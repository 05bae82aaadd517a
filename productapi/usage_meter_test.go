package productapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// TestUsageFromTheMeter: the usage route answers the meter's GPU-seconds beside the keys'
// tokens, grouped by job, key and day, and what the quota leaves; the viewer's role is needed,
// and groupBy without a meter is refused.
func TestUsageFromTheMeter(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 5, 3, 12, 0, 0, 0, time.UTC) // the meter's clock, and the range's end
	day := now.Truncate(24 * time.Hour).Add(-24 * time.Hour)
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	rep := startReplica(t, r, inputs, people, productapi.Options{Meter: apitest.Meter(t, now, apitest.AcmeMeterRecords(now)...)})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	dana := client.New(rep.url, client.StaticToken("dana"))
	dana.Inspect = doc.Inspector(t)
	from, to := day.Format(time.RFC3339), now.Format(time.RFC3339)

	u, err := dana.Usage(ctx, "acme", client.UsageQuery{From: from, To: to, GroupBy: "job"})
	require.NoError(t, err)
	require.NotNil(t, u.Metered)
	tok := apiv1.Counts{Requests: 15, TokensIn: 1500, TokensOut: 300}
	assert.Equal(t, []apiv1.UsageGroup{
		{Key: "mistral-small", GPUSeconds: 3600, GPUHours: 1},
		{Key: "qwen3-32b", GPUSeconds: 6600, GPUHours: 6600.0 / 3600, Counts: tok},
	}, u.Metered.Groups)
	assert.Equal(t, uint64(10200), u.Metered.Total.GPUSeconds, "globex's records are not acme's")
	assert.Equal(t, tok, u.Metered.Total.Counts)
	require.NotNil(t, u.Quota)
	assert.Equal(t, "h100-dedicated", u.Quota.Tier)
	assert.Equal(t, int32(16), u.Quota.GPUs)
	assert.Equal(t, int64(4), u.Quota.UsedGPUs)
	require.NotNil(t, u.Quota.LeftGPUs)
	assert.Equal(t, int64(12), *u.Quota.LeftGPUs)

	u, err = dana.Usage(ctx, "acme", client.UsageQuery{From: from, To: to, GroupBy: "key"})
	require.NoError(t, err)
	assert.Equal(t, []apiv1.UsageGroup{
		{Key: "", GPUSeconds: 10200, GPUHours: 10200.0 / 3600},
		{Key: "0123456789abcdef", Counts: tok},
	}, u.Metered.Groups, "GPUs are held by no key")

	u, err = dana.Usage(ctx, "acme", client.UsageQuery{From: from, To: to, GroupBy: "day"})
	require.NoError(t, err)
	d1, d2 := day.Format(time.DateOnly), day.Add(24*time.Hour).Format(time.DateOnly)
	assert.Equal(t, []apiv1.UsageGroup{
		{Key: d1, GPUSeconds: 6600, GPUHours: 6600.0 / 3600, Counts: apiv1.Counts{Requests: 10, TokensIn: 1000, TokensOut: 200}},
		{Key: d2, GPUSeconds: 3600, GPUHours: 1, Counts: apiv1.Counts{Requests: 5, TokensIn: 500, TokensOut: 100}},
	}, u.Metered.Groups)

	_, err = dana.Usage(ctx, "globex", client.UsageQuery{From: from, GroupBy: "job"})
	var ce *client.Error
	require.ErrorAs(t, err, &ce, "dana has no role in globex")
	assert.Equal(t, http.StatusForbidden, ce.Status)

	_, err = dana.Usage(ctx, "acme", client.UsageQuery{From: from, GroupBy: "vm"})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusUnprocessableEntity, ce.Status, "groupBy is one of the labels")

	plain := startReplica(t, r, inputs, people, productapi.Options{})
	_, err = client.New(plain.url, client.StaticToken("dana")).Usage(ctx, "acme", client.UsageQuery{GroupBy: "job"})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusServiceUnavailable, ce.Status)
	assert.Contains(t, ce.Error(), "--meter")
}
