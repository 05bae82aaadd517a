// Package bench measures the product API (`make bench-api`, docs/api.md): job creates until
// both pushes are done, from 8 clients at once, through 1 and 3 replicas at 200, 2,000 and
// 20,000 tenants of 10 jobs (creates per second, p50, p99, and the ratios); GET jobs of a
// tenant with 50 jobs with the clusters read from watch caches, beside reading them per
// request. It runs only when INFERPLANE_BENCH_API=1 (make bench-api) and prints its figures
// with the load average; the write designs side by side run with make bench-api-designs.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/access"
	registry "github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/argocd"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/lifecycletest"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/lifecycle/cluster"
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

// createLoad is the load of one measurement: clients creating jobs at once, each one after the
// other, each client on a tenant of its own among the tenants written to.
type createLoad struct {
	clients, each, tenants int
}

// benchLoad is make bench-api's load: 8 clients of 6 creates each over 16 tenants, 48 creates
// per measurement (so p99 is the slowest of them).
var benchLoad = createLoad{clients: 8, each: 6, tenants: 16}

// measured is one measurement's figures.
type measured struct {
	size, replicas int
	wall           time.Duration
	lat            []time.Duration
	stats          inputsrepo.Stats
	split          string
	cpu            cpuUse
}

// cpuUse is the CPU time of this process (replicas and clients) and of its finished children
// (the git server's programs).
type cpuUse struct{ self, children time.Duration }

func cpuTimes() cpuUse {
	get := func(who int) time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return cpuUse{self: get(syscall.RUSAGE_SELF), children: get(syscall.RUSAGE_CHILDREN)}
}

func (c cpuUse) minus(b cpuUse) cpuUse { return cpuUse{c.self - b.self, c.children - b.children} }

func (m measured) rate() float64 { return float64(len(m.lat)) / m.wall.Seconds() }

func (m measured) String() string {
	batch := 0.0
	if landed := m.stats.Pushes - m.stats.Refused; landed > 0 {
		batch = float64(m.stats.Commits) / float64(landed)
	}
	per := func(d time.Duration) string { return ms(d / time.Duration(max(len(m.lat), 1))) }
	return fmt.Sprintf("%d tenants x 10 jobs, %d replica(s): %.2f creates/s, p50 %s, p99 %s (%d creates from %d clients in %s; %d pushes, %d refused, %.1f writes a push; "+
		"CPU a create: %s in the replicas, %s in git, %.2f cores busy; %s)",
		m.size, m.replicas, m.rate(), ms(quantile(m.lat, 0.5)), ms(quantile(m.lat, 0.99)), len(m.lat), benchLoad.clients,
		m.wall.Round(time.Millisecond), m.stats.Pushes, m.stats.Refused, batch,
		per(m.cpu.self), per(m.cpu.children), (m.cpu.self+m.cpu.children).Seconds()/m.wall.Seconds(), m.split)
}

// measureCreates runs the load against `replicas` replicas (each its own clone) over a fleet of
// size tenants x 10 jobs served over smart HTTP, and times each create from its request until
// its answer, which comes after the inputs' push and the tenant's push.
func measureCreates(t *testing.T, size, replicas int, l createLoad, inputs inputsrepo.Options, race bool) measured {
	gs := gitserver.Start(t, "bench-token")
	r := apitest.Remotes{Server: gs}
	url, tenants := apitest.FleetFromCache(t, r, size, 10, l.tenants)
	inputs.URL = url
	if os.Getenv("INFERPLANE_BENCH_API_DEBUG") != "" { // the writers' batches and pushes on stderr
		inputs.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var reps []apitest.Replica
	o := productapi.Options{PeerToken: "bench-peer-token"} // writes handed to the last writer
	if race {
		o = productapi.Options{} // every replica pushes its own writes
	}
	ctx := context.Background()
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	t.Cleanup(func() { stop(); running.Wait() })
	for range replicas {
		rep := apitest.StartReplicaWith(t, r, inputs, fleetTokens{}, o)
		running.Go(func() { _ = rep.Server.Run(runCtx) }) // its refresh loop, as api serve runs it
		reps = append(reps, rep)
	}
	for i, rep := range reps { // warm: each replica has loaded the recipes and rendered once
		_, err := client.New(rep.URL, client.StaticToken("dev-"+tenants[i])).CreateJob(ctx, tenants[i],
			apiv1.JobCreate{Name: fmt.Sprintf("warm-%d", i), Model: "Qwen/Qwen3-32B"}, client.WriteOptions{})
		require.NoError(t, err)
	}
	before := stats(reps)
	split := make([]phases, len(reps))
	for i, rep := range reps {
		split[i] = readPhases(t, rep)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	cpu0 := cpuTimes()
	start := time.Now()
	for c := range l.clients {
		wg.Go(func() {
			for i := range l.each {
				tenant := tenants[(c+i*l.clients)%l.tenants]
				cl := client.New(reps[(c+i)%replicas].URL, client.StaticToken("dev-"+tenant))
				cl.HTTP = &http.Client{Timeout: 5 * time.Minute}
				s := time.Now()
				w, err := cl.CreateJob(ctx, tenant, apiv1.JobCreate{Name: fmt.Sprintf("c%02d-%03d", c, i), Model: "Qwen/Qwen3-32B"},
					client.WriteOptions{IdempotencyKey: fmt.Sprintf("c%02d-%03d", c, i)})
				d := time.Since(s)
				if !assert.NoError(t, err) || !assert.True(t, w.Write.Rendered, w.Write.RenderError) {
					continue
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	m := measured{size: size, replicas: replicas, wall: time.Since(start), lat: lat, stats: stats(reps).minus(before)}
	m.cpu = cpuTimes().minus(cpu0)
	var parts []string
	for i, rep := range reps {
		parts = append(parts, readPhases(t, rep).since(split[i]))
	}
	m.split = strings.Join(parts, "; ")
	require.Len(t, lat, l.clients*l.each, "every create answered 2xx")
	return m
}

// stats sums the replicas' writer counts.
func stats(reps []apitest.Replica) statsSum {
	var s statsSum
	for _, r := range reps {
		st := r.Server.InputsStats()
		s.Batches += st.Batches
		s.Pushes += st.Pushes
		s.Refused += st.Refused
		s.Commits += st.Commits
	}
	return s
}

type statsSum inputsrepo.Stats

func (s statsSum) minus(b statsSum) inputsrepo.Stats {
	return inputsrepo.Stats{Batches: s.Batches - b.Batches, Pushes: s.Pushes - b.Pushes, Refused: s.Refused - b.Refused, Commits: s.Commits - b.Commits}
}

// The goals of issue 33, in one run: creates per second and p50/p99 through 1 and 3 replicas at
// 200, 2,000 and 20,000 tenants x 10 jobs, then the ratios: 3 replicas / 1 at each size, and
// p99 at 20,000 / 200 for each count of replicas.
func TestBenchCreates(t *testing.T) {
	enabled(t)
	sizes := []int{200, 2000, 20000}
	if v := os.Getenv("INFERPLANE_BENCH_API_SIZES"); v != "" { // a quicker run: e.g. 200,2000
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "INFERPLANE_BENCH_API_SIZES")
			sizes = append(sizes, n)
		}
	}
	res := map[[2]int]measured{}
	for _, size := range sizes {
		start := time.Now()
		apitest.FleetCache(t, size, 10)
		if d := time.Since(start); d > time.Second {
			report(t, "the fixture of %d tenants x 10 jobs built into the cache in %s (once)", size, d.Round(time.Second))
		}
		for _, replicas := range []int{1, 3} {
			if os.Getenv("ONLY") != "" && os.Getenv("ONLY") != strconv.Itoa(replicas) {
				continue
			}
			m := measureCreates(t, size, replicas, benchLoad, inputsrepo.Options{}, false)
			res[[2]int{size, replicas}] = m
			report(t, "%s", m)
		}
	}
	var ratios []string
	for _, size := range sizes {
		ratios = append(ratios, fmt.Sprintf("%d tenants %.2fx", size, res[[2]int{size, 3}].rate()/res[[2]int{size, 1}].rate()))
	}
	report(t, "creates/s, 3 replicas / 1: %s (goal: >= 1.5x)", strings.Join(ratios, ", "))
	report(t, "%s", ceilings(sizes, res))
	p99 := func(size, replicas int) time.Duration { return quantile(res[[2]int{size, replicas}].lat, 0.99) }
	if !slices.Contains(sizes, 200) || !slices.Contains(sizes, 20000) {
		return
	}
	report(t, "create p99, 20,000 tenants / 200: 1 replica %.2fx (%s / %s), 3 replicas %.2fx (%s / %s) (goal: <= 1.2x, under 1 s)",
		float64(p99(20000, 1))/float64(p99(200, 1)), ms(p99(20000, 1)), ms(p99(200, 1)),
		float64(p99(20000, 3))/float64(p99(200, 3)), ms(p99(20000, 3)), ms(p99(200, 3)))
}

// ceilings says how far three replicas sharing this machine's cores with one replica's clients
// and git server could write faster than one, whatever the design: the cores, divided by the
// cores one replica's measurement kept busy (a second and third replica costing nothing), and
// by the CPU a create through three replicas as measured.
func ceilings(sizes []int, res map[[2]int]measured) string {
	cores := float64(runtime.NumCPU())
	var parts []string
	for _, size := range sizes {
		one, three := res[[2]int{size, 1}], res[[2]int{size, 3}]
		busy := (one.cpu.self + one.cpu.children).Seconds() / one.wall.Seconds()
		per3 := (three.cpu.self + three.cpu.children).Seconds() / float64(max(len(three.lat), 1))
		parts = append(parts, fmt.Sprintf("%d tenants %.2fx (%.2fx at three replicas' CPU a create)", size, cores/busy, cores/per3/one.rate()))
	}
	return fmt.Sprintf("ceiling of 3 replicas / 1 on these %d cores (cores / cores one replica kept busy): %s", runtime.NumCPU(), strings.Join(parts, ", "))
}

// The write designs measured side by side (docs/design.md): every replica pushing its own writes
// (each write its own push and checked again on every new head, as before group commit; group
// commit checking again on every new head; group commit carrying a write over when its tenant
// did not change), and writes handed to the replica that pushed last (the design chosen);
// through 1 and 3 replicas at 2,000 tenants x 10 jobs. make bench-api-designs.
func TestBenchWriteDesigns(t *testing.T) {
	if os.Getenv("INFERPLANE_BENCH_API_DESIGNS") != "1" {
		t.Skip("SKIPPED: a benchmark; run it with make bench-api-designs (INFERPLANE_BENCH_API_DESIGNS=1)")
	}
	designs := []struct {
		name string
		opts inputsrepo.Options
		race bool
	}{
		{"every replica pushes, one write a push, checked again on a new head", inputsrepo.Options{MaxBatch: 1, CheckAgain: true}, true},
		{"every replica pushes, group commit, checked again on a new head", inputsrepo.Options{CheckAgain: true}, true},
		{"every replica pushes, group commit, carried over", inputsrepo.Options{}, true},
		{"writes handed to the last writer, group commit, carried over (chosen)", inputsrepo.Options{}, false},
	}
	for _, d := range designs {
		var rate [2]float64
		for i, replicas := range []int{1, 3} {
			m := measureCreates(t, 2000, replicas, benchLoad, d.opts, d.race)
			rate[i] = m.rate()
			report(t, "%s: %s", d.name, m)
		}
		report(t, "%s: 3 replicas / 1: %.2fx", d.name, rate[1]/rate[0])
	}
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
