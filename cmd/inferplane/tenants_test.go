package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/clientconfig"
)

// signedIn makes a CLI context for server, signed in with token, the current one.
func signedIn(t *testing.T, server, token, tenant string) {
	t.Helper()
	t.Setenv(clientconfig.EnvDir, t.TempDir())
	store, err := clientconfig.Open()
	require.NoError(t, err)
	cfg, err := store.Load()
	require.NoError(t, err)
	name := clientconfig.NameFor(server)
	cfg.Set(clientconfig.Context{Name: name, Server: server, Tenant: tenant})
	cfg.CurrentContext = name
	require.NoError(t, store.Save(cfg))
	require.NoError(t, store.SaveTokens(name, clientconfig.Tokens{IDToken: token, Expiry: time.Now().Add(time.Hour)}))
}

// TestTenantsCommands: the operator changes acme's quota and moves initech to another tier
// with the CLI, each a commit with the reason; quota and history show them; what the API
// refuses is printed with its words; usage errors exit 2 before anything is asked.
func TestTenantsCommands(t *testing.T) {
	ctx := context.Background()
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	rep := apitest.StartReplica(t, r, inputs, apitest.Tokens{
		"pat":  {Issuer: "https://idp.test", Subject: "pat", Email: "pat@platform.example", EmailVerified: true, Name: "Pat", Groups: []string{"platform"}},
		"dana": {Issuer: "https://idp.test", Subject: "dana", Email: "dana@acme.example", EmailVerified: true, Name: "Dana", Groups: []string{"acme-ml"}},
	}, productapi.Options{Policy: access.Policy{AdminGroups: []string{"platform"}}})
	signedIn(t, rep.URL, "pat", "")

	out, errOut, err := execCLI(ctx, "tenants", "set-quota", "acme", "--gpu-quota", "32", "--reason", "order 4711: 16 more H100s")
	require.NoError(t, err, errOut)
	assert.Contains(t, errOut, "acme: committed ")
	assert.Contains(t, out, "Tier:       h100-dedicated")
	assert.Regexp(t, `in force\s+32\s+8\s+16`, out)
	assert.Regexp(t, `tenant\s+32\s+\(tier's\)\s+\(tier's\)`, out)
	assert.Regexp(t, `used\s+4\s+3`, out)
	assert.Equal(t, "Pat <pat@platform.example>\nacme: quota gpus 16 -> 32\n",
		gitserver.Git(t, r.Path("inputs"), "log", "-1", "--format=%an <%ae>%n%s", "main"))

	_, errOut, err = execCLI(ctx, "tenants", "set-tier", "initech", "h200-dedicated", "--reason", "signed for H200")
	require.NoError(t, err, errOut)

	out, _, err = execCLI(ctx, "tenants", "history", "acme")
	require.NoError(t, err)
	assert.Regexp(t, `Pat <pat@platform.example>\s+quota gpus 16 -> 32\s+order 4711: 16 more H100s`, out)
	out, _, err = execCLI(ctx, "tenants", "quota", "initech", "-o", "json")
	require.NoError(t, err)
	assert.Contains(t, out, `"tier": "h200-dedicated"`)

	_, _, err = execCLI(ctx, "tenants", "set-tier", "acme", "h300-dedicated", "--reason", "typo")
	require.Error(t, err)
	assert.Equal(t, 1, exitCode(err))
	assert.Contains(t, err.Error(), `tenants/acme/tenant.yaml: spec.tier is "h300-dedicated": no Tier "h300-dedicated" in tenants/tiers/`)

	for _, args := range [][]string{
		{"tenants", "set-quota", "acme", "--gpu-quota", "32"},                          // no reason
		{"tenants", "set-quota", "acme", "--reason", "why"},                            // no figure
		{"tenants", "set-quota", "acme", "--gpu-quota", "-1", "--reason", "why"},       // negative
		{"tenants", "set-quota", "acme", "--gpu-quota", "1", "--reason", "two\nlines"}, // not one line
		{"tenants", "set-tier", "acme", "--reason", "why"},                             // no tier
		{"tenants", "quota", "-o", "name"},
	} {
		_, _, err := execCLI(ctx, args...)
		require.Error(t, err, "%v", args)
		assert.Equal(t, 2, exitCode(err), "%v: %v", args, err)
	}

	signedIn(t, rep.URL, "dana", "acme")
	_, _, err = execCLI(ctx, "tenants", "set-quota", "--gpu-quota", "64", "--reason", "more please", "acme")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "changing a tenant's tier or quota is for the operator")
	out, _, err = execCLI(ctx, "tenants", "quota")
	require.NoError(t, err, "a customer reads its own quota (the context's tenant)")
	assert.Contains(t, out, "Tenant:     acme")
}

// TestUsageCommand: `inferplane usage` prints the meter's GPU-hours beside the keys' tokens,
// grouped, and what the quota leaves, as a table, JSON and CSV.
func TestUsageCommand(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 5, 3, 12, 0, 0, 0, time.UTC)
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	rep := apitest.StartReplica(t, r, inputs, apitest.Tokens{
		"dana": {Issuer: "https://idp.test", Subject: "dana", Email: "dana@acme.example", EmailVerified: true, Name: "Dana", Groups: []string{"acme-ml"}},
	}, productapi.Options{Meter: apitest.Meter(t, now, apitest.AcmeMeterRecords(now)...)})
	signedIn(t, rep.URL, "dana", "acme")
	from, to := "--from=2026-05-02T00:00:00Z", "--to=2026-05-03T12:00:00Z"

	out, errOut, err := execCLI(ctx, "usage", from, to, "--group-by", "job")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `JOB\s+GPU-HOURS\s+GPU-SECONDS\s+REQUESTS\s+TOKENS IN\s+TOKENS OUT`, out)
	assert.Regexp(t, `mistral-small\s+1\.000\s+3600\s+0\s+0\s+0`, out)
	assert.Regexp(t, `qwen3-32b\s+1\.833\s+6600\s+15\s+1500\s+300`, out)
	assert.Regexp(t, `total\s+2\.833\s+10200\s+15\s+1500\s+300`, out)
	assert.Contains(t, out, "quota (tier h100-dedicated): GPUs 4 of 16 used, 12 left, jobs 3 of 8 used, 5 left")

	out, _, err = execCLI(ctx, "usage", from, to, "--group-by", "day", "-o", "csv")
	require.NoError(t, err)
	assert.Equal(t, "tenant,from,to,groupBy,key,gpuSeconds,gpuHours,requests,tokensIn,tokensOut\n"+
		"acme,2026-05-02T00:00:00Z,2026-05-03T12:00:00Z,day,2026-05-02,6600,1.833,10,1000,200\n"+
		"acme,2026-05-02T00:00:00Z,2026-05-03T12:00:00Z,day,2026-05-03,3600,1.000,5,500,100\n"+
		"acme,2026-05-02T00:00:00Z,2026-05-03T12:00:00Z,day,total,10200,2.833,15,1500,300\n", out)

	out, _, err = execCLI(ctx, "usage", from, to, "-o", "json")
	require.NoError(t, err)
	assert.Contains(t, out, `"gpuSeconds": 10200`)
	assert.Contains(t, out, `"leftGpus": 12`)
}
