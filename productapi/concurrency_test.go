package productapi_test

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/publish"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// fleetTokens signs in "dev-<tenant>" as a developer of that fleet tenant (apitest.Fleet).
type fleetTokens struct{}

func (fleetTokens) Verify(_ context.Context, raw string) (access.Identity, error) {
	tenant, ok := strings.CutPrefix(raw, "dev-")
	if !ok {
		return access.Identity{}, access.ErrNoToken
	}
	return access.Identity{Issuer: "https://idp.test", Subject: raw, Email: raw + "@fleet.example", EmailVerified: true,
		Name: raw, Groups: []string{tenant + "-dev"}}, nil
}

// outcome is one request's answer.
type outcome struct {
	op, tenant, job string
	status          int
	write           apiv1.Write
}

// The inputs and every tenant repository after concurrent writes through several replicas:
// every 2xx is exactly one commit, the inputs hold exactly the jobs whose creates succeeded and
// were not deleted, and every tenant's repository is what generate renders from them.
func TestConcurrentWritesOverThreeReplicas(t *testing.T) {
	ctx := context.Background()
	gs := gitserver.Start(t, "concurrency-token")
	r := apitest.Remotes{Server: gs}
	inputs, tenants := apitest.Fleet(t, r, 10, 0, 10)
	before := commits(t, r)
	var reps []replica
	for range 3 {
		reps = append(reps, startReplica(t, r, inputs, fleetTokens{}, productapi.Options{}))
	}

	// 20 clients, 10 requests each, spread over the replicas: 6 creates of jobs of its own, then
	// 3 deletes of its own and 1 of the job j2 of the other client of its tenant, which that
	// client deletes too (one of the two wins; the other gets 404 or 409).
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	for c := range 20 {
		wg.Go(func() {
			tenant := tenants[c%10]
			cl := client.New(reps[c%3].url, client.StaticToken("dev-"+tenant))
			other := client.New(reps[(c+1)%3].url, client.StaticToken("dev-"+tenant))
			name := func(owner, i int) string { return fmt.Sprintf("c%02d-j%d", owner, i) }
			record := func(o outcome, err error) {
				var e *client.Error
				switch {
				case err == nil:
					o.status = 200
				case errorsAs(err, &e):
					o.status = e.Status
					if e.Status == 422 || e.Status >= 500 {
						t.Logf("%s %s/%s: %v", o.op, o.tenant, o.job, err)
					}
				default:
					t.Errorf("%s %s/%s: %v", o.op, o.tenant, o.job, err)
				}
				mu.Lock()
				outs = append(outs, o)
				mu.Unlock()
			}
			for i := range 6 {
				w, err := cl.CreateJob(ctx, tenant, apiv1.JobCreate{Name: name(c, i), Model: "Qwen/Qwen3-32B"}, client.WriteOptions{IdempotencyKey: name(c, i)})
				record(outcome{op: "create", tenant: tenant, job: name(c, i), write: w.Write}, err)
			}
			neighbour := (c + 10) % 20                                                             // the other client of the same tenant
			for _, job := range []string{name(c, 0), name(c, 2), name(neighbour, 2), name(c, 3)} { // j2: both clients delete it
				d, err := other.DeleteJob(ctx, tenant, job)
				record(outcome{op: "delete", tenant: tenant, job: job, write: d.Write}, err)
			}
		})
	}
	wg.Wait()
	require.Len(t, outs, 200)

	// Every 2xx is one commit of its own; nothing else was committed.
	byStatus := map[int]int{}
	want := map[string]bool{}
	commitOf := map[string]string{}
	for _, o := range outs {
		byStatus[o.status]++
		switch {
		case o.status == 200 && o.op == "create":
			want[o.tenant+"/"+o.job] = true
		case o.status == 200 && o.op == "delete":
			delete(want, o.tenant+"/"+o.job)
		case o.op == "create":
			t.Errorf("create %s/%s: %d", o.tenant, o.job, o.status)
		case o.status != http.StatusNotFound && o.status != http.StatusConflict:
			t.Errorf("delete %s/%s: %d (expected 2xx, 404 or 409)", o.tenant, o.job, o.status)
		}
		if o.status == 200 {
			require.False(t, o.write.Replayed || o.write.Unchanged, "%+v", o)
			require.NotContains(t, commitOf, o.write.InputsCommit, "two answers name one commit")
			commitOf[o.write.InputsCommit] = o.op + " " + o.tenant + "/" + o.job
			assert.True(t, o.write.Rendered, o.write.RenderError)
		}
	}
	after := commits(t, r)
	assert.Len(t, after, len(before)+len(commitOf), "one commit per 2xx: %v", byStatus)
	for _, c := range after[len(before):] {
		assert.Contains(t, commitOf, c, "a commit no answer reported")
	}
	t.Logf("answers: %v; commits: %d", byStatus, len(commitOf))

	// The inputs hold exactly the jobs of the successful creates not deleted since.
	inputsDir := filepath.Join(t.TempDir(), "inputs")
	gitserver.Git(t, "", "clone", "-q", r.Path("inputs"), inputsDir)
	have := map[string]bool{}
	for _, tn := range tenants {
		files, _ := filepath.Glob(filepath.Join(inputsDir, "tenants", tn, "jobs", "*.yaml"))
		for _, f := range files {
			have[tn+"/"+strings.TrimSuffix(filepath.Base(f), ".yaml")] = true
		}
	}
	assert.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(have)))

	// Every tenant repository is what generate renders from the final inputs (after one
	// reconcile, which must find nothing to do).
	for _, o := range reps[0].srv.Reconcile(ctx) {
		assert.NoError(t, o.Err, o.Tenant)
	}
	assertRepositoriesAsGenerated(t, r, inputsDir, tenants)
}

func errorsAs(err error, e **client.Error) bool {
	ce, ok := err.(*client.Error)
	if ok {
		*e = ce
	}
	return ok
}

// commits lists the inputs branch's commits, oldest first.
func commits(t *testing.T, r apitest.Remotes) []string {
	out := strings.Fields(gitserver.Git(t, r.Path("inputs"), "rev-list", "--reverse", "main"))
	return out
}

// assertRepositoriesAsGenerated renders every tenant from an inputs checkout with the
// generator, as `generate` would, and compares each tenant repository's files with it.
func assertRepositoriesAsGenerated(t *testing.T, r apitest.Remotes, inputsDir string, tenants []string) {
	t.Helper()
	for _, tn := range tenants {
		out, err := generator.Render(generator.Options{RecipesDir: filepath.Join(inputsDir, "recipes"), TenantsDir: filepath.Join(inputsDir, "tenants"),
			OutDir: t.TempDir(), Tenant: tn, Getenv: r.Getenv, Check: generator.AdmissionCheck(context.Background())})
		require.NoError(t, err)
		require.Len(t, out, 1)
		got, ok, err := publish.Current(context.Background(), out[0].Target)
		require.NoError(t, err)
		require.True(t, ok, tn)
		wantFiles := map[string]string{}
		for p, b := range out[0].Files {
			wantFiles[p] = string(b)
		}
		gotFiles := map[string]string{}
		for p, b := range got {
			gotFiles[p] = string(b)
		}
		assert.Equal(t, wantFiles, gotFiles, "tenant %s: its repository is what generate renders", tn)
	}
	_ = fs.ValidPath
	_ = os.Getenv
}

// The replica process of the kill test: this test binary run again with these variables set.
const (
	envHelperInputs = "PRODUCTAPI_HELPER_INPUTS"
	envHelperCreds  = "PRODUCTAPI_HELPER_CREDENTIALS"
	envHelperToken  = "PRODUCTAPI_HELPER_GIT_TOKEN"
	envHelperListen = "PRODUCTAPI_HELPER_LISTEN"
)

// TestHelperReplica is not a test: it is the body of the replica process the kill test starts
// (`api serve`'s own wiring, productapi.Serve); it returns at once in a normal run.
func TestHelperReplica(t *testing.T) {
	inputs := os.Getenv(envHelperInputs)
	if inputs == "" {
		return
	}
	token := os.Getenv(envHelperToken)
	err := productapi.Serve(context.Background(), productapi.Config{
		Listen: os.Getenv(envHelperListen), Verifier: fleetTokens{},
		Inputs:            inputsrepo.Options{URL: inputs, CredentialsFile: os.Getenv(envHelperCreds)},
		ReconcileInterval: -1,
		Listening:         func(addr string) { fmt.Println("LISTENING", addr) },
		TenantCredentialsDir: func() string {
			dir := t.TempDir()
			_ = os.WriteFile(filepath.Join(dir, apitest.TokenEnv), []byte(token), 0o600)
			return dir
		}(),
	})
	t.Fatal(err)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
