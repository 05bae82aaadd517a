// Package bench measures the product API (`make bench-api`, docs/api.md): a job create until
// both pushes are done at 200 and at 2,000 tenants of 10 jobs, beside what a user would run
// instead (`inferplane jobs create`, which loads the whole tenants folder); GET jobs of a
// tenant with 50 jobs with the clusters read from watch caches, beside reading them per
// request; 100 concurrent creates over 3 replicas, beside the same through one. It runs only
// when INFERPLANE_BENCH_API=1 (make bench-api) and prints its figures with the load average.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/access"
	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/argocd"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/lifecycle/cluster"
	"github.com/inferplane/inferplane/lifecycle/lifecycletest"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
	"github.com/inferplane/inferplane/productapi/clusterwatch"
)

var clusters kubeenv.Servers

func TestMain(m *testing.M) { os.Exit(clusters.Main(m)) }

func enabled(t *testing.T) {
	if os.Getenv("INFERPLANE_BENCH_API") != "1" {
		t.Skip("SKIPPED: a benchmark; run it with make bench-api (INFERPLANE_BENCH_API=1)")
	}
}

// fleetTokens signs in "dev-<tenant>" as a developer of that fleet tenant (apitest.Fleet).
type fleetTokens struct{}

func (fleetTokens) Verify(_ context.Context, raw string) (access.Identity, error) {
	tenant, ok := strings.CutPrefix(raw, "dev-")
	if !ok {
		return access.Identity{}, access.ErrNoToken
	}
	return access.Identity{Issuer: "https://idp.test", Subject: raw, Email: raw + "@fleet.example", EmailVerified: true, Name: raw,
		Groups: []string{tenant + "-dev"}}, nil
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// report prints a line of the benchmark's figures.
func report(t *testing.T, format string, args ...any) {
	line := fmt.Sprintf(format, args...) + fmt.Sprintf("   [load %s]", load())
	fmt.Println("bench-api: " + line)
	t.Log(line)
}

// A job create, measured from the request until the answer, which comes after the inputs'
// push and the tenant's push: at 200 and at 2,000 tenants of 10 jobs each. Beside it, what a
// user would do instead: `inferplane jobs create` on a checkout of the inputs (the generator
// loads the whole tenants folder, renders and commits that tenant), without even pushing.
func TestBenchCreate(t *testing.T) {
	enabled(t)
	for _, n := range []int{200, 2000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			gs := gitserver.Start(t, "bench-token")
			r := apitest.Remotes{Server: gs}
			start := time.Now()
			inputs, tenants := apitest.Fleet(t, r, n, 10, 20)
			setup := time.Since(start)
			start = time.Now()
			rep := apitest.StartReplica(t, r, inputs, fleetTokens{}, productapi.Options{})
			clone := time.Since(start)
			ctx := context.Background()
			create := func(i int) time.Duration {
				tenant := tenants[i%20]
				c := client.New(rep.URL, client.StaticToken("dev-"+tenant))
				s := time.Now()
				w, err := c.CreateJob(ctx, tenant, apiv1.JobCreate{Name: fmt.Sprintf("new-%03d", i), Model: "Qwen/Qwen3-32B"}, client.WriteOptions{})
				d := time.Since(s)
				require.NoError(t, err)
				require.True(t, w.Write.Rendered, w.Write.RenderError)
				return d
			}
			for i := range 3 { // the first create of a replica loads the recipes once
				create(100 + i)
			}
			var lat []time.Duration
			before := readPhases(t, rep)
			for i := range 40 {
				lat = append(lat, create(i))
			}
			split := readPhases(t, rep).since(before)

			// The baseline: jobs create's work on a checkout (load everything, render one tenant,
			// commit it to a local repository).
			dir := filepath.Join(t.TempDir(), "inputs")
			gitserver.Git(t, "", "clone", "-q", r.Path("inputs"), dir)
			var base []time.Duration
			for i := range 3 {
				tenant := tenants[20+i]
				job := filepath.Join(dir, "tenants", tenant, "jobs", "extra.yaml")
				require.NoError(t, os.WriteFile(job, []byte(apitest.FleetJob("extra")), 0o644))
				s := time.Now()
				_, err := generator.Generate(ctx, generator.Options{RecipesDir: filepath.Join(dir, "recipes"), TenantsDir: filepath.Join(dir, "tenants"),
					OutDir: filepath.Join(t.TempDir(), "out"), Tenant: tenant, Getenv: r.Getenv, Check: generator.AdmissionCheck(ctx),
					RepoURL: "file:///nonexistent/{tenant}"})
				if err != nil && !strings.Contains(err.Error(), "push") && !strings.Contains(err.Error(), "fetch") {
					require.NoError(t, err)
				}
				base = append(base, time.Since(s))
			}
			p50, p99 := quantile(lat, 0.5), quantile(lat, 0.99)
			report(t, "create until both pushes, %d tenants x 10 jobs: p50 %s, p99 %s (40 creates, one replica over smart HTTP; %s); "+
				"jobs create's work on a checkout (no push): median %s, %.1fx the API's p50; setup: inputs repository %s, first clone %s",
				n, ms(p50), ms(p99), split, ms(quantile(base, 0.5)), float64(quantile(base, 0.5))/float64(p50), setup.Round(time.Second), clone.Round(time.Millisecond))
		})
	}
}

// 100 creates at once over 3 replicas (each its own clone), across 10 tenants: the wall time,
// the creates per second and how many pushes were refused and retried (the replicas' own
// metric); beside the same 100 through one replica.
func TestBenchConcurrentCreates(t *testing.T) {
	enabled(t)
	run := func(replicas int) (time.Duration, float64, map[int]int) {
		gs := gitserver.Start(t, "bench-token")
		r := apitest.Remotes{Server: gs}
		inputs, tenants := apitest.Fleet(t, r, 10, 10, 10)
		var reps []apitest.Replica
		for range replicas {
			reps = append(reps, apitest.StartReplica(t, r, inputs, fleetTokens{}, productapi.Options{}))
		}
		for i, rep := range reps { // warm: each replica has loaded the recipes
			_, err := client.New(rep.URL, client.StaticToken("dev-"+tenants[i])).CreateJob(context.Background(), tenants[i],
				apiv1.JobCreate{Name: fmt.Sprintf("warm-%d", i), Model: "Qwen/Qwen3-32B"}, client.WriteOptions{})
			require.NoError(t, err)
		}
		before := retried(t, reps)
		statuses := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for i := range 100 {
			wg.Go(func() {
				tenant := tenants[i%10]
				c := client.New(reps[i%replicas].URL, client.StaticToken("dev-"+tenant))
				c.HTTP = &http.Client{Timeout: 10 * time.Minute} // a queue of 100 writes in one replica takes minutes here
				_, err := c.CreateJob(context.Background(), tenant,
					apiv1.JobCreate{Name: fmt.Sprintf("c-%03d", i), Model: "Qwen/Qwen3-32B"}, client.WriteOptions{IdempotencyKey: fmt.Sprint(i)})
				code := 201
				var e *client.Error
				if err != nil {
					code = -1
					if ce, ok := err.(*client.Error); ok {
						e = ce
						code = e.Status
					}
				}
				mu.Lock()
				statuses[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
		wall := time.Since(start)
		return wall, retried(t, reps) - before, statuses
	}
	wall3, retries3, st3 := run(3)
	wall1, retries1, st1 := run(1)
	report(t, "100 concurrent creates over 3 replicas: %s wall, %.2f creates/s, %.0f pushes refused and retried, answers %v; "+
		"through 1 replica: %s wall, %.2f creates/s, %.0f retried, answers %v; 3 replicas do %.2fx the throughput of 1",
		wall3.Round(time.Millisecond), float64(st3[201])/wall3.Seconds(), retries3, st3, wall1.Round(time.Millisecond), float64(st1[201])/wall1.Seconds(), retries1, st1,
		wall1.Seconds()/wall3.Seconds())
}

// retried sums the replicas' inferplane_api_write_attempts (sum - count: attempts past the
// first of each write).
func retried(t *testing.T, reps []apitest.Replica) float64 {
	var total float64
	for _, r := range reps {
		sum, count := histogram(t, r, "inferplane_api_write_attempts")
		total += sum - count
	}
	return total
}

// histogram reads a histogram's sum and count from a replica's /metrics.
func histogram(t *testing.T, r apitest.Replica, name string) (sum, count float64) {
	resp, err := http.Get(r.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, name+"_sum %g", &v); err == nil {
			sum = v
		}
		if _, err := fmt.Sscanf(line, name+"_count %g", &v); err == nil {
			count = v
		}
	}
	return sum, count
}

// phases are the mean time of a write (inferplane_api_write_seconds: from its start until the
// tenant's repository is pushed) and of the tenant's render and push within it, between two
// readings of a replica's metrics.
type phases struct{ write, push [2]float64 }

func readPhases(t *testing.T, r apitest.Replica) phases {
	var p phases
	p.write[0], p.write[1] = histogram(t, r, "inferplane_api_write_seconds")
	p.push[0], p.push[1] = histogram(t, r, "inferplane_api_tenant_push_seconds")
	return p
}

// since says the mean whole write, the tenant's part and the rest (the inputs' fetch, apply,
// commit and push, and reading them back) since the earlier reading.
func (p phases) since(before phases) string {
	mean := func(a, b [2]float64) time.Duration {
		if a[1] == b[1] {
			return 0
		}
		return time.Duration((a[0] - b[0]) / (a[1] - b[1]) * float64(time.Second))
	}
	w, push := mean(p.write, before.write), mean(p.push, before.push)
	return fmt.Sprintf("mean write %s = the tenant's render and push %s + the inputs' write %s", ms(w), ms(push), ms(w-push))
}

// perRequest reads the clusters on every request, as `inferplane jobs list` does per command:
// the registry from the host, then the tenant's Applications and workloads.
type perRequest struct {
	host *rest.Config
	opts registry.Options
}

func (p perRequest) Objects(ctx context.Context, t cluster.Tenant) (*cluster.Objects, error) {
	hc, err := cluster.NewClient(p.host)
	if err != nil {
		return nil, err
	}
	snap, err := registry.List(ctx, hc, p.opts)
	if err != nil {
		return nil, err
	}
	cl, err := registry.Find(snap, p.opts, t.Name, t.Cluster)
	if err != nil {
		return nil, err
	}
	objs := &cluster.Objects{}
	if objs.Apps, err = cluster.ReadApplications(ctx, hc, p.host.Host, t); err != nil {
		return nil, err
	}
	tc, err := cluster.NewClient(cl.Config)
	if err != nil {
		return nil, err
	}
	return objs, cluster.ReadWorkloads(ctx, tc, cl.Server, t, objs)
}

func (p perRequest) Restart(context.Context, cluster.Tenant, string, int32) ([]cluster.Restarted, error) {
	return nil, fmt.Errorf("not in this benchmark")
}

// GET jobs of a tenant with 50 jobs whose Applications, VMs, VMIs and claims are in real API
// servers: the clusters read from the watch caches (clusterwatch), beside the same server
// reading them on every request.
func TestBenchGetJobs(t *testing.T) {
	enabled(t)
	host, tenantEnv := clusters.Get(t, "host"), clusters.Get(t, "tenant")
	ctx := context.Background()
	gs := gitserver.Start(t, "bench-token")
	r := apitest.Remotes{Server: gs}
	inputs, tenants := apitest.Fleet(t, r, 1, 50, 1)
	tenant := tenants[0]
	dir := filepath.Join(t.TempDir(), "inputs")
	gitserver.Git(t, "", "clone", "-q", r.Path("inputs"), dir)
	out := filepath.Join(t.TempDir(), "out")
	_, err := generator.Generate(ctx, generator.Options{RecipesDir: filepath.Join(dir, "recipes"), TenantsDir: filepath.Join(dir, "tenants"),
		OutDir: out, Getenv: r.Getenv})
	require.NoError(t, err)
	w := &lifecycletest.World{Host: host, Cluster: tenantEnv, Repo: filepath.Join(out, tenant), Tenant: tenant}
	now := time.Now().UTC().Truncate(time.Second)
	for j := range 50 {
		job := fmt.Sprintf("job-%02d", j)
		w.Sync(t, job)
		w.SetApplication(t, job, lifecycletest.Synced(now, "5d41402abc4b"))
		w.BindClaims(t, job)
		w.PutVMI(t, job+"-r0-n0", lifecycletest.All(lifecycletest.Phase(kubevirtv1.Running, "gpu-1", now), lifecycletest.Interface("10.0.0.1"),
			lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "", now)))
	}
	require.NoError(t, host.EnsureNamespace(ctx, registry.ArgoCDNamespace))
	secret, err := argocd.ClusterSecret(registry.ArgoCDNamespace, tenant, tenantEnv.Config)
	require.NoError(t, err)
	require.NoError(t, host.Client.Create(ctx, secret))
	t.Cleanup(func() { _ = host.Client.Delete(context.Background(), secret) })

	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	watcher := &clusterwatch.Watcher{Host: host.Config}
	require.NoError(t, watcher.Start(wctx))
	cached := apitest.StartReplica(t, r, inputs, fleetTokens{}, productapi.Options{Clusters: watcher})
	direct := apitest.StartReplica(t, r, inputs, fleetTokens{}, productapi.Options{Clusters: perRequest{host: host.Config}})
	measure := func(url string) []time.Duration {
		c := client.New(url, client.StaticToken("dev-"+tenant))
		list, err := c.ListJobs(ctx, tenant) // warm: the plan, and the watches' first lists
		require.NoError(t, err)
		require.Len(t, list.Items, 50)
		require.Equal(t, "loading-model", list.Items[0].Stage, list.Items[0].Reason) // no gateway: ready VMIs wait for it
		var lat []time.Duration
		for range 200 {
			s := time.Now()
			_, err := c.ListJobs(ctx, tenant)
			lat = append(lat, time.Since(s))
			require.NoError(t, err)
		}
		return lat
	}
	c, d := measure(cached.URL), measure(direct.URL)
	report(t, "GET jobs of a tenant with 50 jobs (200 requests): from the watch caches p50 %s, p99 %s; reading the clusters per request p50 %s, p99 %s (%.1fx the cached p99)",
		ms(quantile(c, 0.5)), ms(quantile(c, 0.99)), ms(quantile(d, 0.5)), ms(quantile(d, 0.99)), float64(quantile(d, 0.99))/float64(quantile(c, 0.99)))
}
