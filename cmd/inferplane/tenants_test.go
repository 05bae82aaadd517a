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
