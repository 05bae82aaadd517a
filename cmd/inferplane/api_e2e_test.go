package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/e2e/envoystandin"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/lifecycletest"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
)

// The people of the product API's end-to-end test, as Dex's static users.
var apiUsers = []dex.User{
	{Email: "dana@acme.example", Password: "pw-dana", Name: "Dana", Groups: []string{"acme-ml", "acme-all"}},
	{Email: "vera@acme.example", Password: "pw-vera", Name: "Vera", Groups: []string{"acme-all"}},
	{Email: "gina@globex.example", Password: "pw-gina", Name: "Gina", Groups: []string{"globex-admins"}},
}

func apiSignIn(t *testing.T, d *dex.Dex, clientID, email string) string {
	t.Helper()
	for _, u := range apiUsers {
		if u.Email == email {
			tok, err := d.PasswordGrant(context.Background(), d.Client(clientID), email, u.Password)
			require.NoError(t, err, d.Log(20))
			return tok.IDToken
		}
	}
	t.Fatalf("no user %s", email)
	return ""
}

// acmeLimits is a tenant file with limits only: what the gateway reads of tenant.yaml.
const acmeLimits = `apiVersion: inferplane.io/v1alpha1
kind: Tenant
metadata:
  name: acme
spec:
  limits:
    requestsPerMinute:
      value: 1000
    tokensPerMonth:
      value: 1000000
      mode: soft
`

// apiWorld is everything the product API's end-to-end test runs: Dex, the git remotes, a host
// API server with the cluster registry and two tenant API servers, the gateway (xds serve with
// our stand-in for Envoy) and `inferplane api serve`.
type apiWorld struct {
	dex, otherDex *dex.Dex
	gs            *gitserver.Server
	remotes       apitest.Remotes
	host, acme    *kubeenv.Env
	globex        *kubeenv.Env
	apiURL        string
	gatewayURL    string
	admin         string
	doc           *apitest.OpenAPI
	cfg           productapi.Config
}

func startAPIWorld(t *testing.T) *apiWorld {
	w := &apiWorld{host: clusters.Get(t, "host"), acme: clusters.Get(t, "tenant"), globex: kubeenv.Another(t)}
	ctx := context.Background()
	clients := []dex.Client{{ID: "inferplane", Secret: "api-secret", RedirectURIs: []string{"http://127.0.0.1:1/callback"}}, {ID: "another-app", Secret: "other-secret"}}
	w.dex = dex.Start(t, dex.Options{Clients: clients, Users: apiUsers})
	w.otherDex = dex.Start(t, dex.Options{Clients: clients, Users: apiUsers})

	w.gs = gitserver.Start(t, "git-token-e2e")
	w.remotes = apitest.Remotes{Server: w.gs}
	inputs := apitest.BundledInputs(t, w.remotes)
	dir := t.TempDir()
	creds := filepath.Join(dir, "inputs-credentials")
	require.NoError(t, os.WriteFile(creds, []byte("inferplane:"+w.gs.Token+"\n"), 0o600))
	tenantCreds := filepath.Join(dir, "tenant-git")
	require.NoError(t, os.MkdirAll(tenantCreds, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(tenantCreds, apitest.TokenEnv), []byte(w.gs.Token), 0o600))

	// The cluster registry: Argo CD's cluster Secrets of acme's and globex's clusters.
	require.NoError(t, w.host.EnsureNamespace(ctx, registry.ArgoCDNamespace))
	require.NoError(t, w.host.EnsureNamespace(ctx, productapi.DefaultKeysNamespace))
	for name, env := range map[string]*kubeenv.Env{"acme": w.acme, "globex": w.globex} {
		s := argoClusterSecret(t, name, env.Config)
		require.NoError(t, w.host.Client.Create(ctx, s))
		t.Cleanup(func() { _ = w.host.Client.Delete(context.Background(), s) })
	}
	hostKC := filepath.Join(dir, "host.kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(hostKC, "host", map[string]*rest.Config{"host": w.host.Config}))
	secret := writeKeySecret(t)
	// acme's limits, as generate --gateway-dir gives the gateway the tenants' files.
	limitsDir := filepath.Join(dir, "limits")
	require.NoError(t, os.MkdirAll(filepath.Join(limitsDir, "acme"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(limitsDir, "acme", "tenant.yaml"), []byte(acmeLimits), 0o644))

	// The gateway: xds serve discovering replicas through the registry, keys from APIKey
	// objects in the host cluster (the store the API mints them into), our Envoy stand-in.
	const domain = "models.example.com"
	admin, grpcAddr := freePort(t), freePort(t)
	gctx, cancel := context.WithCancel(ctx)
	done := startServe(t, gctx, admin, "--source", "clusters", "--kubeconfig", hostKC, "--domain", domain,
		"--grpc-address", grpcAddr, "--admin-address", admin, "--log-level", "warn",
		"--keys-namespace", productapi.DefaultKeysNamespace, "--secret-file", secret, "--usage-file", "-",
		"--probe-interval", "100ms", "--probe-timeout", "100ms", "--limits-tenants", limitsDir)
	t.Cleanup(func() { cancel(); _ = waitServe(t, done) })
	w.admin = "http://" + admin
	// e2e/envoystandin: the key check's metadata and the real usage.lua's counts in its
	// access log, as Envoy's would be.
	w.gatewayURL = envoystandin.Start(t, envoystandin.Options{Admin: w.admin, Authz: []string{grpcAddr}, ALS: grpcAddr, Node: "envoy-api-test"}).URL()

	// The product API, as an operator runs it: `inferplane api serve`.
	listen := freePort(t)
	w.apiURL = "http://" + listen
	args := []string{"api", "serve", "--listen", listen, "--oidc-issuer", w.dex.Issuer, "--oidc-client-id", "inferplane",
		"--inputs-repo", inputs, "--inputs-credentials-file", creds, "--tenant-credentials-dir", tenantCreds,
		"--kubeconfig", hostKC, "--keys-namespace", productapi.DefaultKeysNamespace, "--keys-secret-file", secret,
		"--server", w.admin, "--domain", domain, "--log-level", "warn", "--reconcile-interval", "2s", "--work-dir", filepath.Join(dir, "work")}
	actx, acancel := context.WithCancel(ctx)
	apiDone := make(chan error, 1)
	go func() { _, _, err := execCLI(actx, args...); apiDone <- err }()
	t.Cleanup(func() {
		acancel()
		select {
		case err := <-apiDone:
			assert.NoError(t, err, "api serve shuts down cleanly")
		case <-time.After(2 * time.Minute): // its --shutdown-timeout is 20 s; a loaded machine adds to it
			t.Error("api serve did not stop")
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get(w.apiURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 30*time.Second, 50*time.Millisecond, "api serve becomes ready")
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, w.apiURL))
	w.doc = doc
	require.NoError(t, err)
	w.cfg = productapi.Config{OIDC: access.VerifierConfig{Issuer: w.dex.Issuer, ClientID: "inferplane"},
		Inputs: inputsrepo.Options{URL: inputs, CredentialsFile: creds}, TenantCredentialsDir: tenantCreds}
	return w
}

// client signs in as a client would (Dex's password grant) and checks every answer against
// the OpenAPI document the server serves.
func (w *apiWorld) client(t *testing.T, token string) *apiclient.Client {
	c := apiclient.New(w.apiURL, apiclient.StaticToken(token))
	c.Inspect = w.doc.Inspector(t)
	return c
}

// cloneTenant clones a tenant's rendered repository, as Argo CD fetches it.
func (w *apiWorld) cloneTenant(t *testing.T, tenant string) string {
	dir := filepath.Join(t.TempDir(), tenant)
	u := strings.Replace(w.remotes.URL(tenant), "http://", "http://inferplane:"+w.gs.Token+"@", 1)
	gitserver.Git(t, "", "clone", "-q", u, dir)
	return dir
}

// A customer signs in, lists models, creates a job, follows it from syncing to serving as the
// test moves its VMIs as KubeVirt would, mints a key, calls the endpoint through the stand-in
// for Envoy, reads usage and health, restarts and deletes the job; every answer is checked
// against the OpenAPI document.
func TestAPICustomerJourney(t *testing.T) {
	w := startAPIWorld(t)
	ctx := context.Background()
	dana := w.client(t, apiSignIn(t, w.dex, "inferplane", "dana@acme.example"))

	me, err := dana.Me(ctx)
	require.NoError(t, err)
	assert.Equal(t, "dana@acme.example", me.Email)
	assert.Equal(t, []apiv1.Membership{{Tenant: "acme", Role: "developer"}}, me.Tenants)

	models, err := dana.ListModels(ctx, "acme")
	require.NoError(t, err)
	var qwen *apiv1.Model
	for i := range models.Models {
		if models.Models[i].Model == "Qwen/Qwen3-32B" {
			qwen = &models.Models[i]
		}
	}
	require.NotNil(t, qwen, "Qwen3-32B is among acme's models")
	require.Len(t, qwen.Choices, 1, "acme may use metal3.gpu-h100 only")
	assert.Equal(t, "metal3.gpu-h100", qwen.Choices[0].NodeType)
	assert.Equal(t, int32(1), qwen.Choices[0].GPUsPerReplica)
	assert.Contains(t, qwen.Choices[0].Why, "derived from recipe Qwen/Qwen3-32B for h100")

	created, err := dana.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "chat", Model: "Qwen/Qwen3-32B", Replicas: 2}, apiclient.WriteOptions{IdempotencyKey: "create-chat-1"})
	require.NoError(t, err)
	assert.True(t, created.Write.Rendered, created.Write.RenderError)
	assert.Equal(t, "syncing", created.Job.Stage, created.Job.Reason)
	assert.Contains(t, created.Job.Reason, "no Argo CD Application for acme/chat")
	assert.Equal(t, "https://chat.acme.models.example.com", created.Job.Endpoint)
	log := gitserver.Git(t, w.remotes.Path("inputs"), "log", "-1", "--format=%an <%ae>|%s", "main")
	assert.Equal(t, "Dana <dana@acme.example>|acme: create job chat (Qwen/Qwen3-32B)\n", log)

	// Argo CD syncs the repository the API pushed; KubeVirt brings the VMs up.
	repo := w.cloneTenant(t, "acme")
	world := &lifecycletest.World{Host: w.host, Cluster: w.acme, Repo: repo, Tenant: "acme"}
	world.Sync(t, "chat")
	now := time.Now().UTC().Truncate(time.Second)
	world.SetApplication(t, "chat", lifecycletest.Synced(now, "5d41402abc4b"))
	world.BindClaims(t, "chat")
	var doubles []*replicadouble.Double
	for r := range 2 {
		d, err := replicadouble.Start(replicadouble.Options{Name: "chat-r" + strconv.Itoa(r), Model: "Qwen/Qwen3-32B"})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		doubles = append(doubles, d)
	}
	vmiUp := func(i int, ready corev1.ConditionStatus) {
		world.PutVMI(t, "chat-r"+strconv.Itoa(i)+"-n0", lifecycletest.All(lifecycletest.Phase(kubevirtv1.Running, "gpu-h100-0"+strconv.Itoa(i), now),
			lifecycletest.Interface(doubles[i].Host()),
			lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, ready, "", "", now),
			func(v *kubevirtv1.VirtualMachineInstance) {
				v.Annotations[v1alpha1.AnnotationServingPort] = strconv.Itoa(doubles[i].Port())
			}))
	}
	vmiUp(0, corev1.ConditionFalse)
	vmiUp(1, corev1.ConditionFalse)
	stageIs := func(want string) apiv1.JobDetail {
		t.Helper()
		var d apiv1.JobDetail
		require.Eventually(t, func() bool {
			d, err = dana.GetJob(ctx, "acme", "chat")
			return err == nil && d.Stage == want
		}, 30*time.Second, 100*time.Millisecond, "stage %s; last: %s (%s) %v", want, d.Stage, d.Reason, err)
		return d
	}
	stageIs(string(lifecycle.StageLoadingModel))
	vmiUp(0, corev1.ConditionTrue)
	vmiUp(1, corev1.ConditionTrue)
	d := stageIs(string(lifecycle.StageServing))
	require.Len(t, d.ReplicaList, 2)
	assert.Equal(t, "gpu-h100-01", d.ReplicaList[1].Nodes[0].Node)
	assert.Equal(t, "qwen3-32b-h100", d.Master.Name)

	list, err := dana.ListJobs(ctx, "acme")
	require.NoError(t, err)
	stages := map[string]string{}
	for _, j := range list.Items {
		stages[j.Name] = j.Stage
	}
	assert.Equal(t, "serving", stages["chat"])

	// A key, shown once; the endpoint called with it through the gateway.
	k, err := dana.CreateKey(ctx, "acme", apiv1.KeyCreate{Name: "ci", Endpoint: "chat", Expires: "30d"}, apiclient.WriteOptions{})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(k.APIKey, "ipk_"))
	keys, err := dana.ListKeys(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, keys.Items, 1)
	assert.Equal(t, k.ID, keys.Items[0].ID)
	raw, _ := json.Marshal(keys)
	assert.NotContains(t, string(raw), k.APIKey[4:], "the key is never listed")
	call := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, w.gatewayURL+"/v1/chat/completions",
			bytes.NewReader([]byte(`{"model":"Qwen/Qwen3-32B","messages":[{"role":"user","content":"Write a haiku about GPUs"}]}`)))
		req.Host = "chat.acme.models.example.com"
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var status int
	var answer string
	require.Eventually(t, func() bool { // the gateway's watch of APIKey objects takes the key in
		status, answer = call(k.APIKey)
		return status == 200
	}, 20*time.Second, 100*time.Millisecond, "last: %d %s", status, answer)
	assert.Contains(t, answer, "heard: Write a haiku about GPUs")

	var u apiv1.Usage
	require.Eventually(t, func() bool {
		u, err = dana.Usage(ctx, "acme", apiclient.UsageQuery{Since: "1h"})
		return err == nil && len(u.Keys) == 1 && u.Keys[0].Total.Requests >= 1
	}, 10*time.Second, 100*time.Millisecond, "usage: %+v %v", u, err)
	assert.Equal(t, k.ID, u.Keys[0].KeyID)
	assert.Equal(t, []string{"chat"}, u.Keys[0].Endpoints)
	assert.Positive(t, u.Keys[0].Total.TokensIn)
	require.NotEmpty(t, u.Keys[0].Hours)
	// The spend against acme's limits: requests counted by the key check, tokens when the
	// access log reaches the limits' counter (beside the usage ledger, so it may trail it).
	spend := map[string]apiv1.LimitSpend{}
	tokens := u.Keys[0].Total.TokensIn + u.Keys[0].Total.TokensOut
	require.Eventually(t, func() bool {
		u, err = dana.Usage(ctx, "acme", apiclient.UsageQuery{Since: "1h"})
		if err != nil {
			return false
		}
		for _, l := range u.Limits {
			spend[l.Limit] = l
		}
		// A month's window holds the call whenever the test runs (a minute's may have turned).
		return uint64(spend["tokensPerMonth"].Used) >= tokens
	}, 10*time.Second, 100*time.Millisecond, "limits: %+v %v", u.Limits, err)
	require.Contains(t, spend, "requestsPerMinute", "usage: %+v", u.Limits)
	rpm := spend["requestsPerMinute"]
	assert.Equal(t, "tenant", rpm.Scope)
	assert.Equal(t, "hard", rpm.Mode)
	assert.EqualValues(t, 1000, rpm.Value)
	assert.Equal(t, rpm.Value-rpm.Used, rpm.Remaining)
	assert.Equal(t, "soft", spend["tokensPerMonth"].Mode)
	assert.True(t, u.LimitsLocal, "this gateway has no Redis: its counts are its own")

	eps, err := dana.Endpoints(ctx, "acme")
	require.NoError(t, err)
	require.NotEmpty(t, eps.Items)
	assert.Equal(t, "chat", eps.Items[0].Job)
	assert.Equal(t, 2, eps.Items[0].Ready)

	// A key with a limit of its own, set through the API: the gateway holds it to it.
	_, err = dana.CreateKey(ctx, "acme", apiv1.KeyCreate{Endpoint: "chat", Limits: &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 0}}}, apiclient.WriteOptions{})
	require.Error(t, err, "a limit of 0 is refused")
	assert.Contains(t, err.Error(), `limits.requestsPerMinute.value is 0: must be a positive number`)
	one, err := dana.CreateKey(ctx, "acme", apiv1.KeyCreate{Endpoint: "chat", Limits: &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 1}}}, apiclient.WriteOptions{})
	require.NoError(t, err)
	require.NotNil(t, one.Limits)
	assert.EqualValues(t, 1, one.Limits.RequestsPerMinute.Value)
	require.Eventually(t, func() bool { status, answer = call(one.APIKey); return status != 401 && status != 403 }, 20*time.Second, 100*time.Millisecond)
	require.Equal(t, 200, status, answer)
	// The next call is refused, unless the minute turned in between: then the one after.
	for i := 0; i < 2 && status == 200; i++ {
		status, answer = call(one.APIKey)
	}
	assert.Equal(t, http.StatusTooManyRequests, status, "the key's own limit of 1 request a minute: %s", answer)
	assert.Contains(t, answer, "API key "+one.ID)
	assert.Contains(t, answer, "limit 1,")

	revoked, err := dana.RevokeKey(ctx, "acme", k.ID)
	require.NoError(t, err)
	assert.Equal(t, "revoked", revoked.Status)
	require.Eventually(t, func() bool { status, _ = call(k.APIKey); return status == 403 }, 20*time.Second, 100*time.Millisecond)

	// Restart one replica: its VMI goes, its model cache stays.
	rs, err := dana.RestartJob(ctx, "acme", "chat", 1, apiclient.WriteOptions{})
	require.NoError(t, err)
	assert.Equal(t, []apiv1.RestartedVM{{VM: "chat-r1-n0", How: "deleted the VMI"}}, rs.VMs)
	err = w.acme.Client.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "chat-r1-n0"}, &kubevirtv1.VirtualMachineInstance{})
	assert.True(t, apierrors.IsNotFound(err), "%v", err)
	require.NoError(t, w.acme.Client.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "chat-r1-n0-model-cache"}, &corev1.PersistentVolumeClaim{}))

	del, err := dana.DeleteJob(ctx, "acme", "chat")
	require.NoError(t, err)
	assert.True(t, del.Write.Rendered, del.Write.RenderError)
	files := gitserver.Git(t, w.remotes.Path("acme"), "ls-tree", "-r", "--name-only", "main")
	assert.NotContains(t, files, "jobs/chat/")
	assert.NotContains(t, files, "argocd/applications/chat.yaml")
	t.Logf("answers checked against the OpenAPI document: %v", w.doc.Checked)
}

// Every refusal of sign-in and roles, with tokens from a real Dex: no token (401 with a
// challenge), expired, wrong audience, another issuer, alg none, a tampered signature; a
// member of acme reading globex (403, and the answer reads the same as for a tenant that does
// not exist); a viewer creating a job (403).
func TestAPIRefusals(t *testing.T) {
	w := startAPIWorld(t)
	ctx := context.Background()
	dana := apiSignIn(t, w.dex, "inferplane", "dana@acme.example")
	refused := func(c *apiclient.Client, call func(*apiclient.Client) error) *apiclient.Error {
		t.Helper()
		err := call(c)
		var e *apiclient.Error
		require.ErrorAs(t, err, &e)
		return e
	}
	list := func(tenant string) func(*apiclient.Client) error {
		return func(c *apiclient.Client) error { _, err := c.ListJobs(ctx, tenant); return err }
	}

	noToken := apiclient.New(w.apiURL, nil)
	noToken.Inspect = w.doc.Inspector(t)
	e := refused(noToken, list("acme"))
	assert.Equal(t, 401, e.Status)
	assert.Equal(t, `Bearer realm="inferplane"`, e.Challenge)

	parts := strings.Split(dana, ".")
	sig := []byte(parts[2])
	sig[10] ^= 1
	if sig[10] == '-' || sig[10] == '_' {
		sig[10] = 'A'
	}
	for name, tok := range map[string]string{
		"wrong audience": apiSignIn(t, w.dex, "another-app", "dana@acme.example"),
		"another issuer": apiSignIn(t, w.otherDex, "inferplane", "dana@acme.example"),
		"alg none":       base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + ".",
		"tampered":       parts[0] + "." + parts[1] + "." + string(sig),
	} {
		e := refused(w.client(t, tok), list("acme"))
		assert.Equal(t, 401, e.Status, name)
		assert.Contains(t, e.Challenge, `error="invalid_token"`, name)
	}

	// Expired: a replica whose clock is a day ahead (Dex's tokens live 24 h).
	later := w.cfg
	later.OIDC.Now = func() time.Time { return time.Now().Add(25 * time.Hour) }
	laterURL := startInProcessAPI(t, later)
	c := apiclient.New(laterURL, apiclient.StaticToken(dana))
	c.Inspect = w.doc.Inspector(t)
	e = refused(c, list("acme"))
	assert.Equal(t, 401, e.Status)
	assert.Contains(t, e.Challenge, `error_description="token expired"`)

	// acme's member reading globex: 403, worded as for a tenant that does not exist.
	d := w.client(t, dana)
	globex := refused(d, list("globex"))
	nosuch := refused(d, list("nosuch"))
	assert.Equal(t, 403, globex.Status)
	assert.Equal(t, 403, nosuch.Status)
	assert.Equal(t, strings.ReplaceAll(globex.Problem.Detail, "globex", "X"), strings.ReplaceAll(nosuch.Problem.Detail, "nosuch", "X"))
	for _, call := range []func(*apiclient.Client) error{
		func(c *apiclient.Client) error { _, err := c.GetJob(ctx, "globex", "llama"); return err },
		func(c *apiclient.Client) error { _, err := c.ListModels(ctx, "globex"); return err },
		func(c *apiclient.Client) error { _, err := c.ListKeys(ctx, "globex"); return err },
	} {
		e := refused(d, call)
		assert.Equal(t, 403, e.Status)
		assert.NotContains(t, e.Problem.Error(), "llama")
		assert.NotContains(t, e.Problem.Error(), "exist")
	}

	vera := w.client(t, apiSignIn(t, w.dex, "inferplane", "vera@acme.example"))
	e = refused(vera, func(c *apiclient.Client) error {
		_, err := c.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "x", Model: "Qwen/Qwen3-32B"}, apiclient.WriteOptions{})
		return err
	})
	assert.Equal(t, 403, e.Status)
	assert.Equal(t, "your role in tenant \"acme\" is viewer; creating, restarting or deleting a job needs developer", e.Problem.Detail)
	_, err := vera.ListJobs(ctx, "acme")
	assert.NoError(t, err, "a viewer reads")
	t.Logf("answers checked against the OpenAPI document: %v", w.doc.Checked)
}

// startInProcessAPI runs another replica of the API in this process (productapi.Serve).
func startInProcessAPI(t *testing.T, c productapi.Config) string {
	listen := freePort(t)
	c.Listen = listen
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- productapi.Serve(ctx, c) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 30*time.Second, 50*time.Millisecond)
	return "http://" + listen
}
