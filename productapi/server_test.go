package productapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
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

// tokens is a verifier of made-up tokens, for the tests of what happens after sign-in; the
// sign-in itself is tested against a real Dex (e2e_test.go).
type tokens map[string]access.Identity

func (v tokens) Verify(_ context.Context, raw string) (access.Identity, error) {
	if raw == "" {
		return access.Identity{}, access.ErrNoToken
	}
	id, ok := v[raw]
	if !ok {
		return access.Identity{}, &access.TokenError{Kind: access.BadSignature, Err: errors.New("unknown test token")}
	}
	return id, nil
}

var people = tokens{
	"dana": {Issuer: "https://idp.test", Subject: "dana", Email: "dana@acme.example", EmailVerified: true, Name: "Dana", Groups: []string{"acme-ml", "acme-all"}},
	"vera": {Issuer: "https://idp.test", Subject: "vera", Email: "vera@acme.example", EmailVerified: true, Name: "Vera", Groups: []string{"acme-all"}},
	"ops":  {Issuer: "https://idp.test", Subject: "ops", Email: "ops@acme.example", EmailVerified: true, Name: "Ops"},
}

type replica struct {
	srv *productapi.Server
	url string
}

func startReplica(t *testing.T, r apitest.Remotes, inputsURL string, v productapi.Verifier, o productapi.Options) replica {
	t.Helper()
	rep := apitest.StartReplica(t, r, inputsURL, v, o)
	return replica{srv: rep.Server, url: rep.URL}
}

func TestCreateListDeleteWithoutClusters(t *testing.T) {
	ctx := context.Background()
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	rep := startReplica(t, r, inputs, people, productapi.Options{Domain: "models.example.com"})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	as := func(tok string) *client.Client {
		c := client.New(rep.url, client.StaticToken(tok))
		if tok == "" {
			c.Token = nil
		}
		c.Inspect = doc.Inspector(t)
		return c
	}
	dana := as("dana")

	me, err := dana.Me(ctx)
	require.NoError(t, err)
	assert.Equal(t, []apiv1.Membership{{Tenant: "acme", Role: "developer"}}, me.Tenants)
	_, err = as("").SignIn(ctx)
	assert.True(t, client.IsStatus(err, 404), "a server whose verifier is not OIDC does not say how to sign in: %v", err)

	w, err := dana.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "chat", Model: "Qwen/Qwen3-32B", Replicas: 2}, client.WriteOptions{IdempotencyKey: "k1"})
	require.NoError(t, err)
	assert.True(t, w.Write.Rendered, w.Write.RenderError)
	assert.Equal(t, int32(1), w.Job.GPUsPerReplica)
	assert.Equal(t, "metal3.gpu-h100", w.Job.NodeType)
	assert.Equal(t, "unknown", w.Job.Stage)
	assert.Contains(t, w.Job.Reason, "without a host cluster")
	assert.Equal(t, "https://chat.acme.models.example.com", w.Job.Endpoint)
	assert.Contains(t, gitserver.Git(t, r.Path("acme"), "show", "main:jobs/chat/kustomization.yaml"), "r1-n0-vm.yaml")
	msg := gitserver.Git(t, r.Path("inputs"), "log", "-1", "--format=%an <%ae>%n%s", "main")
	assert.Equal(t, "Dana <dana@acme.example>\nacme: create job chat (Qwen/Qwen3-32B)\n", msg)

	again, err := dana.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "chat", Model: "Qwen/Qwen3-32B", Replicas: 2}, client.WriteOptions{IdempotencyKey: "k1"})
	require.NoError(t, err)
	assert.True(t, again.Write.Replayed)
	assert.Equal(t, w.Write.InputsCommit, again.Write.InputsCommit)

	_, err = dana.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "chat", Model: "Qwen/Qwen3-32B"}, client.WriteOptions{})
	assert.True(t, client.IsStatus(err, http.StatusConflict), "%v", err)

	_, err = dana.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "big", Model: "Qwen/Qwen3-32B", Replicas: 40}, client.WriteOptions{})
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusUnprocessableEntity, ce.Status)
	require.NotEmpty(t, ce.Problem.Errors, "%v", err)
	assert.Equal(t, "tenants/acme/jobs/big.yaml", ce.Problem.Errors[0].File)
	assert.Equal(t, "spec.replicas", ce.Problem.Errors[0].Field)
	assert.Equal(t, "must be at most 16, Tenant acme's quota of replicas per job", ce.Problem.Errors[0].Detail)

	list, err := dana.ListJobs(ctx, "acme")
	require.NoError(t, err)
	models := map[string]string{}
	for _, j := range list.Items {
		models[j.Name] = j.Model
	}
	assert.Equal(t, "Qwen/Qwen3-32B", models["chat"])
	// A Parakeet job names no model: the one its master serves is the job's.
	assert.Equal(t, "nvidia/parakeet-tdt-0.6b-v3", models["transcribe"])

	d, err := dana.GetJob(ctx, "acme", "chat")
	require.NoError(t, err)
	assert.Len(t, d.ReplicaList, 2)

	_, err = dana.ListJobs(ctx, "globex")
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusForbidden, ce.Status)
	_, err = dana.ListJobs(ctx, "nosuch")
	var ce2 *client.Error
	require.ErrorAs(t, err, &ce2)
	assert.Equal(t, ce.Problem.Detail[:len("you have no role in tenant")], ce2.Problem.Detail[:len("you have no role in tenant")])

	_, err = as("vera").CreateJob(ctx, "acme", apiv1.JobCreate{Name: "x", Model: "Qwen/Qwen3-32B"}, client.WriteOptions{})
	assert.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)

	_, err = as("").ListJobs(ctx, "acme")
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusUnauthorized, ce.Status)
	assert.Equal(t, `Bearer realm="inferplane"`, ce.Challenge)

	ops := as("ops")
	sc, err := ops.SetReplicas(ctx, "acme", "chat", 3)
	require.NoError(t, err)
	assert.Equal(t, int32(3), sc.Job.Replicas)
	_, err = dana.SetReplicas(ctx, "acme", "chat", 1)
	assert.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)

	del, err := dana.DeleteJob(ctx, "acme", "chat")
	require.NoError(t, err)
	assert.True(t, del.Write.Rendered)
	_, err = dana.GetJob(ctx, "acme", "chat")
	assert.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
	out := gitserver.Git(t, r.Path("acme"), "ls-tree", "-r", "--name-only", "main")
	assert.NotContains(t, out, "jobs/chat/")
	t.Logf("answers checked against the OpenAPI document: %v", doc.Checked)
}

// The OpenAPI check is no rubber stamp: an answer with a field the document does not have, or
// a wrong type, or an undeclared status, is refused.
func TestOpenAPICheckRefuses(t *testing.T) {
	r := apitest.Remotes{Dir: t.TempDir()}
	rep := startReplica(t, r, apitest.BundledInputs(t, r), people, productapi.Options{})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/api/v1/me", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
	good := `{"issuer":"i","subject":"s","emailVerified":false,"groups":[],"operator":false,"tenants":[]}`
	require.NoError(t, doc.Check(req, resp, []byte(good)))
	for _, bad := range []string{
		`{"issuer":"i","subject":"s","emailVerified":false,"groups":[],"operator":false,"tenants":[],"extra":1}`,
		`{"issuer":"i","subject":"s","emailVerified":"no","groups":[],"operator":false,"tenants":[]}`,
		`{"issuer":"i","subject":"s","emailVerified":false,"groups":[],"operator":false,"tenants":[{"tenant":"a","role":"owner"}]}`,
	} {
		assert.Error(t, doc.Check(req, resp, []byte(bad)), bad)
	}
	resp.StatusCode = 418
	resp.Header.Set("Content-Type", "text/plain")
	assert.Error(t, doc.Check(req, resp, []byte("teapot")))
}

// GET /api/v1/signin needs no token and says which issuer and client id to sign in with.
func TestSignInNeedsNoToken(t *testing.T) {
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	want := apiv1.SignIn{Issuer: "https://idp.test", ClientID: "inferplane", GroupsClaim: "groups"}
	rep := startReplica(t, r, inputs, people, productapi.Options{SignIn: want})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	c := client.New(rep.url, nil)
	c.Inspect = doc.Inspector(t)
	got, err := c.SignIn(context.Background())
	require.NoError(t, err)
	assert.Equal(t, want, got)
	_, err = c.Me(context.Background())
	assert.True(t, client.IsStatus(err, 401), "everything else still needs a token: %v", err)
}
