package productapi_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// withOperator is people and Pat, of the operator's admin group "platform".
var withOperator = func() tokens {
	out := tokens{"pat": {Issuer: "https://idp.test", Subject: "pat", Email: "pat@platform.example", EmailVerified: true, Name: "Pat", Groups: []string{"platform"}}}
	for k, v := range people {
		out[k] = v
	}
	return out
}()

func i32(v int32) *int32 { return &v }

// TestQuotaAndTierChanges: the API refuses a create or a replica change over quota before
// anything is committed, saying what is used, the quota and what the request needs; the
// operator alone changes a tenant's quota and tier, each one commit as the operator with the
// reason, shown in the tenant's history; a quota lowered below what runs keeps what runs and
// refuses growth; a tier that lacks what the tenant's jobs use is refused.
func TestQuotaAndTierChanges(t *testing.T) {
	ctx := context.Background()
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	rep := startReplica(t, r, inputs, withOperator, productapi.Options{Policy: access.Policy{AdminGroups: []string{"platform"}}})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	as := func(tok string) *client.Client {
		c := client.New(rep.url, client.StaticToken(tok))
		c.Inspect = doc.Inspector(t)
		return c
	}
	dana, ops, pat := as("dana"), as("ops"), as("pat")
	head := func() string { return gitserver.Git(t, r.Path("inputs"), "rev-parse", "main") }
	refused := func(t *testing.T, err error, file, field, message string) {
		t.Helper()
		var ce *client.Error
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, http.StatusUnprocessableEntity, ce.Status)
		require.Len(t, ce.Problem.Errors, 1, "%v", err)
		assert.Equal(t, file, ce.Problem.Errors[0].File)
		assert.Equal(t, field, ce.Problem.Errors[0].Field)
		assert.Equal(t, message, ce.Problem.Errors[0].Message)
	}

	q, err := dana.Quota(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, "h100-dedicated", q.Tier)
	assert.Equal(t, apiv1.Quota{GPUs: 8, Jobs: 8, ReplicasPerJob: 16}, q.TierQuota)
	assert.Equal(t, apiv1.Quota{GPUs: 16}, q.Own)
	assert.Equal(t, apiv1.Quota{GPUs: 16, Jobs: 8, ReplicasPerJob: 16}, q.InForce)
	assert.Equal(t, int64(4), q.UsedGPUs)
	assert.Equal(t, []string{"metal3.gpu-h100"}, q.AllowedNodeTypes)
	assert.False(t, q.Over)

	t.Run("a create over quota is refused before anything is committed", func(t *testing.T) {
		before := head()
		_, err := dana.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "big", Model: "Qwen/Qwen3-32B", Replicas: 13}, client.WriteOptions{})
		refused(t, err, "tenants/acme/jobs/big.yaml", "spec.replicas",
			"tenants/acme/jobs/big.yaml: spec.replicas is 13: needs 13 GPUs (13 replicas x 1), but Tenant acme's GPU quota is 16 and its other jobs use 4 "+
				"(mistral-small 1x1, qwen3-32b 2x1, transcribe 1x1): 12 left")
		assert.Equal(t, before, head(), "nothing committed")
	})
	t.Run("the models list is the tier's catalogue", func(t *testing.T) {
		l, err := dana.ListModels(ctx, "acme")
		require.NoError(t, err)
		assert.Equal(t, "h100-dedicated", l.Tier)
		var names []string
		for _, m := range l.Models {
			names = append(names, m.Model)
		}
		assert.Contains(t, names, "Qwen/Qwen3-32B")
		assert.Contains(t, names, "mistral-small-24b")
		assert.Contains(t, names, "nvidia/parakeet-tdt-0.6b-v3")
		assert.NotContains(t, names, "moonshotai/Kimi-K2-Instruct", "not in h100-dedicated's catalogue")
		assert.NotContains(t, names, "deepseek-ai/DeepSeek-V3.2")
		// The shared serving tier: platform's Qwen3-32B, which acme's catalogue offers.
		assert.Equal(t, []apiv1.SharedModel{{Model: "Qwen/Qwen3-32B", Provider: "platform", Endpoint: "qwen3-32b"}}, l.Shared,
			"no URL: this API is not told the domain")
	})
	t.Run("the quota and the tier are the operator's", func(t *testing.T) {
		_, err := ops.SetQuota(ctx, "acme", apiv1.QuotaChange{GPUs: i32(64), Reason: "I am acme's admin"})
		assert.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)
		_, err = ops.SetTier(ctx, "acme", apiv1.TierChange{Tier: "h200-dedicated", Reason: "upgrade myself"})
		assert.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)
		_, err = pat.SetQuota(ctx, "acme", apiv1.QuotaChange{GPUs: i32(64), Reason: "two lines\nof reason"})
		assert.True(t, client.IsStatus(err, http.StatusUnprocessableEntity), "%v", err)
	})
	t.Run("lowering below what runs keeps it and refuses growth", func(t *testing.T) {
		w, err := pat.SetQuota(ctx, "acme", apiv1.QuotaChange{GPUs: i32(2), Reason: "invoice 1042 unpaid"})
		require.NoError(t, err)
		assert.True(t, w.Write.Rendered, w.Write.RenderError)
		assert.Equal(t, apiv1.Quota{GPUs: 2, Jobs: 8, ReplicasPerJob: 16}, w.Quota.InForce)
		assert.True(t, w.Quota.Over)
		msg := gitserver.Git(t, r.Path("inputs"), "log", "-1", "--format=%an <%ae>%n%B", "main")
		assert.Regexp(t, `^Pat <pat@platform.example>\nacme: quota gpus 16 -> 2\n\nInferplane-Tenant: acme\nInferplane-Change: quota\n`+
			`Inferplane-Reason: invoice 1042 unpaid\nInferplane-Write: [a-z2-7]{26}\n\n$`, msg)
		assert.Contains(t, gitserver.Git(t, r.Path("inputs"), "show", "main:tenants/acme/tenant.yaml"),
			"# Who may use acme through the product API", "the file's comments are kept")
		assert.Contains(t, gitserver.Git(t, r.Path("acme"), "show", "main:jobs/qwen3-32b/kustomization.yaml"), "r1-n0-vm.yaml", "what runs is kept")

		before := head()
		_, err = ops.SetReplicas(ctx, "acme", "qwen3-32b", 3)
		refused(t, err, "tenants/acme/jobs/qwen3-32b.yaml", "spec.replicas",
			"tenants/acme/jobs/qwen3-32b.yaml: spec.replicas is 3: needs 3 GPUs (3 replicas x 1), but Tenant acme's GPU quota is 2 and its other jobs use 2 "+
				"(mistral-small 1x1, transcribe 1x1): 0 left")
		assert.Equal(t, before, head(), "nothing committed")
		sc, err := ops.SetReplicas(ctx, "acme", "qwen3-32b", 1)
		require.NoError(t, err, "shrinking is fine")
		assert.Equal(t, int32(1), sc.Job.Replicas)

		w, err = pat.SetQuota(ctx, "acme", apiv1.QuotaChange{GPUs: i32(0), Jobs: i32(4), Reason: "back to the tier's GPUs"})
		require.NoError(t, err)
		assert.Equal(t, apiv1.Quota{Jobs: 4}, w.Quota.Own)
		assert.Equal(t, apiv1.Quota{GPUs: 8, Jobs: 4, ReplicasPerJob: 16}, w.Quota.InForce)
	})
	t.Run("a tier that lacks what the jobs use is refused; one that has it is taken", func(t *testing.T) {
		before := head()
		_, err := pat.SetTier(ctx, "acme", apiv1.TierChange{Tier: "h300-dedicated", Reason: "typo"})
		refused(t, err, "tenants/acme/tenant.yaml", "spec.tier", `tenants/acme/tenant.yaml: spec.tier is "h300-dedicated": `+
			`no Tier "h300-dedicated" in tenants/tiers/ (the tiers: h100-dedicated, h200-dedicated); did you mean h100-dedicated, h200-dedicated?`)
		_, err = pat.SetTier(ctx, "acme", apiv1.TierChange{Tier: "h200-dedicated", Reason: "moves to H200"})
		var ce *client.Error
		require.ErrorAs(t, err, &ce, "h200-dedicated does not offer mistral-small-24b nor Parakeet")
		assert.Equal(t, http.StatusUnprocessableEntity, ce.Status)
		assert.Contains(t, ce.Error(), "tenants/acme/jobs/mistral-small.yaml: spec.model is \"mistral-small-24b\": not in Tenant acme's model catalogue")
		assert.Equal(t, before, head(), "nothing committed")

		w, err := pat.SetTier(ctx, "initech", apiv1.TierChange{Tier: "h200-dedicated", Reason: "signed for H200"})
		require.NoError(t, err)
		assert.Equal(t, "h200-dedicated", w.Quota.Tier)
		assert.Equal(t, apiv1.Quota{GPUs: 32, Jobs: 16, ReplicasPerJob: 8}, w.Quota.InForce)
		assert.Equal(t, []string{}, w.Quota.AllowedNodeTypes, "initech's own [] still narrows it")
	})
	t.Run("the tenant's history", func(t *testing.T) {
		h, err := dana.TenantHistory(ctx, "acme")
		require.NoError(t, err)
		require.Len(t, h.Changes, 2)
		assert.Equal(t, "quota gpus 2 -> tier's, jobs tier's -> 4", h.Changes[0].Summary)
		assert.Equal(t, "back to the tier's GPUs", h.Changes[0].Reason)
		assert.Equal(t, "quota gpus 16 -> 2", h.Changes[1].Summary)
		assert.Equal(t, "Pat <pat@platform.example>", h.Changes[1].Author)
		assert.Equal(t, "quota", h.Changes[1].Change)
		g, err := pat.TenantHistory(ctx, "initech")
		require.NoError(t, err)
		require.Len(t, g.Changes, 1)
		assert.Equal(t, apiv1.TenantChange{Commit: g.Changes[0].Commit, When: g.Changes[0].When, Author: "Pat <pat@platform.example>",
			Change: "tier", Summary: "tier h100-dedicated -> h200-dedicated", Reason: "signed for H200"}, g.Changes[0])
	})
	t.Run("a change's summary is of the inputs it is applied to, not of the replica's last read", func(t *testing.T) {
		// An operator's hand edit puts initech back on h100-dedicated behind the replica's back.
		dir := filepath.Join(t.TempDir(), "inputs")
		gitserver.Git(t, "", "clone", "-q", r.Path("inputs"), dir)
		p := filepath.Join(dir, "tenants", "initech", "tenant.yaml")
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		edited := strings.Replace(string(b), "tier: h200-dedicated", "tier: h100-dedicated", 1)
		require.NotEqual(t, string(b), edited)
		require.NoError(t, os.WriteFile(p, []byte(edited), 0o644))
		gitserver.Git(t, dir, "-c", "user.name=Ops", "-c", "user.email=ops@platform.example", "commit", "-qam", "initech: back to H100 by hand")
		gitserver.Git(t, dir, "push", "-q", "origin", "main")

		_, err = pat.SetTier(ctx, "initech", apiv1.TierChange{Tier: "h200-dedicated", Reason: "H200 again"})
		require.NoError(t, err)
		assert.Equal(t, "initech: tier h100-dedicated -> h200-dedicated\n", gitserver.Git(t, r.Path("inputs"), "log", "-1", "--format=%s", "main"))
	})
}

// TestQuotaWithoutTiers: inputs without tiers/ (a tier is then only a name): the tenant's own
// quota is the one in force, its node types its own, every model offered (null in the answer,
// which the OpenAPI document allows).
func TestQuotaWithoutTiers(t *testing.T) {
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs, tenants := apitest.Fleet(t, r, 1, 2, 0)
	rep := startReplica(t, r, inputs, fleetTokens{}, productapi.Options{})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	c := client.New(rep.url, client.StaticToken("dev-"+tenants[0]))
	c.Inspect = doc.Inspector(t)
	q, err := c.Quota(context.Background(), tenants[0])
	require.NoError(t, err)
	assert.Equal(t, apiv1.Quota{}, q.TierQuota)
	assert.Equal(t, apiv1.Quota{GPUs: 1000}, q.InForce)
	assert.Equal(t, int64(2), q.UsedGPUs)
	assert.Equal(t, []string{"metal3.gpu-h100"}, q.AllowedNodeTypes)
	assert.Nil(t, q.Models)
}

// TestTenantHistoryThroughPeers: with the replicas' peer settings every commit carries the
// writer's trailers (and a handed-over write a key); a tenant change's own trailers (its tenant,
// change and reason) stay readable, so its history lists it, whichever replica took it and
// whichever pushed it.
func TestTenantHistoryThroughPeers(t *testing.T) {
	ctx := context.Background()
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	o := productapi.Options{Policy: access.Policy{AdminGroups: []string{"platform"}}, PeerToken: "peers-secret"}
	reps := []replica{startReplica(t, r, inputs, withOperator, o), startReplica(t, r, inputs, withOperator, o)}
	tiers := []string{"h200-dedicated", "h100-dedicated"}
	for i, rep := range reps {
		_, err := client.New(rep.url, client.StaticToken("pat")).SetTier(ctx, "initech", apiv1.TierChange{Tier: tiers[i], Reason: "change " + tiers[i]})
		require.NoError(t, err)
	}
	for _, rep := range reps {
		require.NoError(t, rep.srv.Refresh(ctx))
		h, err := client.New(rep.url, client.StaticToken("pat")).TenantHistory(ctx, "initech")
		require.NoError(t, err)
		require.Len(t, h.Changes, 2)
		assert.Equal(t, "tier", h.Changes[0].Change)
		assert.Equal(t, "change h100-dedicated", h.Changes[0].Reason)
		assert.Equal(t, "tier", h.Changes[1].Change)
		assert.Equal(t, "change h200-dedicated", h.Changes[1].Reason)
	}
}
