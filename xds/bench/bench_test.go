package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/internal/kubestub"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
	"github.com/inferplane/inferplane/xds/resources"
	"github.com/inferplane/inferplane/xds/server"
)

const (
	jobs     = 2000
	perJob   = 5 // 10,000 endpoints
	tenants  = 50
	sessions = 100

	childEnv      = "INFERPLANE_XDS_BENCH_CHILD"
	childMode     = "INFERPLANE_XDS_BENCH_MODE"
	childBudget   = "INFERPLANE_XDS_BENCH_BUDGET"
	childClusters = "INFERPLANE_XDS_BENCH_CLUSTERS" // file listing the stubbed tenant clusters

	// clusterTenants is the number of tenant clusters of the multi-cluster variants: each
	// tenant its own cluster, 20 jobs x 5 replicas in it (the same 10,000 endpoints).
	clusterTenants = 100

	// memLimit is the soft memory limit of the GOMEMLIMIT variants; clusterMemLimit that of the
	// multi-cluster variant (about twice its heap in use, as docs/xds.md advises).
	memLimit            = "150MiB"
	memLimitName        = "gomemlimit=150MiB"
	clusterMemLimit     = "250MiB"
	clusterMemLimitName = "gomemlimit=250MiB"
	// modeOurs is inferplane's server: one encoded configuration shared by every node, its
	// EndpointCache, and the budget of bytes in flight.
	modeOurs = "ours"
	// modeUnbounded is the same server without the budget (every node's initial sync at once).
	modeUnbounded = "unbounded"
	// modeLinear is the same server with go-control-plane's LinearCache for endpoints.
	modeLinear = "linear"
	// modeSnapshot is the baseline: one go-control-plane snapshot cache for every type.
	modeSnapshot = "snapshot"
	// modeClusters is inferplane's server whose replicas come from 100 tenant clusters through
	// discovery.Clusters, each cluster's VMIs watched by discovery.Kube over HTTP from a stub
	// of its API server (xds/internal/kubestub) in the benchmark process.
	modeClusters = "clusters"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild(os.Getenv(childMode)))
	}
	os.Exit(m.Run())
}

// fleet is the benchmark's replicas: 2,000 jobs of 5 replicas in 50 tenants.
func fleet() []discovery.Replica { return fleetOf(tenants) }

// fleetOf is the fleet spread over n tenants (job j in tenant t<j mod n>).
func fleetOf(n int) []discovery.Replica {
	out := make([]discovery.Replica, 0, jobs*perJob)
	for j := range jobs {
		tenant := "t" + strconv.Itoa(j%n)
		job := "job" + strconv.Itoa(j)
		for r := range perJob {
			n := j*perJob + r + 1
			out = append(out, discovery.Replica{
				Tenant: tenant, Job: job, Runtime: "vllm", RequireAPIKey: true, Index: strconv.Itoa(r),
				Namespace: tenant, Name: fmt.Sprintf("%s-r%d-n0", job, r), Running: true, Ready: true,
				Address: fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255), Port: 8000,
			})
		}
	}
	return out
}

// nullProber: the benchmark makes the health decisions itself.
type nullProber struct{}

func (nullProber) SetTargets([]health.Target) {}

// snapshotPublisher is the baseline a user would reach for: go-control-plane's snapshot cache
// for every type, endpoints included, one snapshot for all nodes. Every change is a new
// snapshot, and every node is sent every endpoint set again.
type snapshotPublisher struct {
	cache   cachev3.SnapshotCache
	set     *resources.Set
	cla     map[string]types.Resource
	version int
}

type allNodes struct{}

func (allNodes) ID(*corev3.Node) string { return "all" }

func toResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
}

func (p *snapshotPublisher) publish(ctx context.Context) error {
	p.version++
	clas := make([]types.Resource, 0, len(p.set.LoadAssignments))
	for _, c := range p.set.LoadAssignments {
		clas = append(clas, p.cla[c.ClusterName])
	}
	snap, err := cachev3.NewSnapshot(strconv.Itoa(p.version), map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: toResources(p.set.Listeners),
		resourcev3.RouteType:    toResources(p.set.Routes),
		resourcev3.ClusterType:  toResources(p.set.Clusters),
		resourcev3.EndpointType: clas,
	})
	if err != nil {
		return err
	}
	return p.cache.SetSnapshot(ctx, "all", snap)
}

func (p *snapshotPublisher) SetConfig(ctx context.Context, set *resources.Set) error {
	p.set = set
	p.cla = map[string]types.Resource{}
	for _, c := range set.LoadAssignments {
		p.cla[c.ClusterName] = c
	}
	return p.publish(ctx)
}

func (p *snapshotPublisher) UpdateLoadAssignments(clas ...*endpointv3.ClusterLoadAssignment) error {
	for _, c := range clas {
		p.cla[c.ClusterName] = c
	}
	return p.publish(context.Background())
}

// runChild is the server process: it serves ADS on loopback, publishes the fleet, then takes
// commands on stdin: "flip <replica key> up|down" and "mem" (answers "mem <heap> <rss>").
func runChild(mode string) int {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := grpc.NewServer(xds.GRPCServerOptions()...)
	peak := watchPeakHeap()
	pub, err := childPublisher(ctx, mode, g, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctrl, err := xds.NewController(xds.ControllerConfig{Resources: resources.DefaultConfig("bench.example.com"), Logger: log}, pub, nullProber{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = g.Serve(lis) }()
	byKey, err := publishFleet(ctx, mode, ctrl, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if dir := os.Getenv("INFERPLANE_XDS_BENCH_PPROF"); dir != "" {
		f, _ := os.Create(dir + "/cpu.pprof")
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("ready %s\n", lis.Addr())
	childCommands(ctrl, byKey, peak)
	return 0
}

// childPublisher is the server of a mode, registered on g.
func childPublisher(ctx context.Context, mode string, g *grpc.Server, log *slog.Logger) (xds.Publisher, error) {
	switch mode {
	case modeOurs, modeLinear, modeUnbounded, modeClusters:
		opts := server.Options{Logger: log}
		if mode == modeLinear {
			opts.Endpoints = adstest.NewLinearStore()
		}
		if mode == modeUnbounded {
			opts.ResponseBudget = -1
		} else if v := os.Getenv(childBudget); v != "" {
			// For experiments: INFERPLANE_XDS_BENCH_BUDGET=<bytes> sets the budget.
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", childBudget, err)
			}
			opts.ResponseBudget = n
		}
		srv := server.New(ctx, opts)
		srv.Register(g)
		return srv, nil
	case modeSnapshot:
		cache := cachev3.NewSnapshotCache(true, allNodes{}, nil)
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, cache, nil))
		return &snapshotPublisher{cache: cache}, nil
	}
	return nil, fmt.Errorf("unknown mode %s", mode)
}

// publishFleet feeds the controller the fleet (straight, or through the tenant clusters'
// watches), marks every replica healthy and waits for the first configuration.
func publishFleet(ctx context.Context, mode string, ctrl *xds.Controller, log *slog.Logger) (map[string]discovery.Replica, error) {
	reps := fleet()
	updates := make(chan discovery.Update)
	go ctrl.Run(ctx, updates)
	if mode == modeClusters {
		reps = fleetOf(clusterTenants)
		src, err := stubbedClusters(log)
		if err != nil {
			return nil, err
		}
		go func() { _ = src.Run(ctx, updates) }()
		// The health events count only once the controller knows the replicas.
		for known := 0; known < len(reps); time.Sleep(10 * time.Millisecond) {
			known = 0
			ctrl.EachReplicaCount(func(_, _ string, _, total int) { known += total })
		}
	} else {
		updates <- discovery.Update{Replicas: reps}
	}
	for _, r := range reps {
		ctrl.HealthChanged(health.Event{Target: health.Target{Key: r.Key(), URL: r.HealthURL("/health")}, Healthy: true})
	}
	for !ctrl.Ready() {
		time.Sleep(10 * time.Millisecond)
	}
	byKey := map[string]discovery.Replica{}
	for _, r := range reps {
		byKey[r.Key()] = r
	}
	return byKey, nil
}

// stubbedCluster is one tenant cluster of the multi-cluster variants, as the parent serves it.
type stubbedCluster struct {
	Tenant string `json:"tenant"`
	URL    string `json:"url"`
}

// staticRegistry is a registry that never changes (the registry's own watch is not what the
// benchmark measures).
type staticRegistry clusters.Snapshot

func (r staticRegistry) Run(ctx context.Context, out chan<- clusters.Snapshot) error {
	select {
	case out <- clusters.Snapshot(r):
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}

// stubbedClusters is the source of the tenant clusters the parent lists in $childClusters.
func stubbedClusters(log *slog.Logger) (*discovery.Clusters, error) {
	b, err := os.ReadFile(os.Getenv(childClusters))
	if err != nil {
		return nil, err
	}
	var list []stubbedCluster
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, err
	}
	var snap clusters.Snapshot
	for _, c := range list {
		snap.Clusters = append(snap.Clusters, clusters.Cluster{Tenant: c.Tenant, Kind: clusters.KindArgoCD, Secret: "argocd/" + c.Tenant,
			Server: c.URL, Config: &rest.Config{Host: c.URL, QPS: 50, Burst: 100}, Fingerprint: c.URL})
	}
	slices.SortFunc(snap.Clusters, func(a, b clusters.Cluster) int { return strings.Compare(a.Tenant, b.Tenant) })
	return &discovery.Clusters{Registry: staticRegistry(snap), SyncTimeout: 5 * time.Minute, Logger: log}, nil
}

// childCommands answers the parent's commands until stdin closes.
func childCommands(ctrl *xds.Controller, byKey map[string]discovery.Replica, peak *atomic.Uint64) {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 3 && f[0] == "flip":
			r := byKey[f[1]]
			ctrl.HealthChanged(health.Event{Target: health.Target{Key: r.Key(), URL: r.HealthURL("/health")}, Healthy: f[2] == "up"})
		case len(f) == 1 && f[0] == "mem":
			// Twice: pooled buffers (gRPC's) survive one collection in sync.Pool's victim cache.
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Printf("mem %d %d %d %d %d %d\n", ms.HeapInuse, rss("VmRSS:"), ms.HeapAlloc, ms.StackInuse, rss("VmHWM:"), peak.Load())
			if dir := os.Getenv("INFERPLANE_XDS_BENCH_PPROF"); dir != "" {
				f, _ := os.Create(dir + "/heap.pprof")
				_ = pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
	}
}

// watchPeakHeap samples the bytes of heap objects (live and not yet swept) every 10 ms and
// keeps the highest; with INFERPLANE_XDS_BENCH_PPROF set, it writes a heap profile
// (peak-heap.pprof: the live objects of the last collection) each time the peak grows by a
// tenth, so the profile shows what the peak is made of.
func watchPeakHeap() *atomic.Uint64 {
	var peak atomic.Uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	dir := os.Getenv("INFERPLANE_XDS_BENCH_PPROF")
	go func() {
		var written uint64
		for range time.Tick(10 * time.Millisecond) {
			metrics.Read(sample)
			v := sample[0].Value.Uint64()
			if v <= peak.Load() {
				continue
			}
			peak.Store(v)
			if dir != "" && v > written+written/10 {
				written = v
				if f, err := os.Create(dir + "/peak-heap.pprof"); err == nil {
					_ = pprof.WriteHeapProfile(f)
					f.Close()
				}
			}
		}
	}()
	return &peak
}

// rss reads this process's resident set size (VmRSS) or its peak (VmHWM) from /proc (0 where
// there is none).
func rss(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// child is a running server process.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	addr string
}

func startChild(b *testing.B, mode string, env ...string) *child {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"=1", childMode+"="+mode), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	line := c.line(b)
	addr, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		b.Fatalf("child: %q", line)
	}
	c.addr = addr
	return c
}

func (c *child) line(b *testing.B) string {
	if !c.out.Scan() {
		b.Fatalf("child ended: %v", c.out.Err())
	}
	return c.out.Text()
}

// memory is the server process's memory after two garbage collections, in MiB.
type memory struct{ heapInuse, rss, peakRSS, peakHeap float64 }

func (c *child) mem(b *testing.B) memory {
	fmt.Fprintln(c.in, "mem")
	f := strings.Fields(c.line(b))
	mib := func(i int) float64 {
		v, _ := strconv.ParseFloat(f[i], 64)
		return v / (1 << 20)
	}
	return memory{heapInuse: mib(1), rss: mib(2), peakRSS: mib(5), peakHeap: mib(6)}
}

// flip is the change every session waits for.
type flip struct {
	cluster string
	want    int // endpoints in the new set
	start   time.Time
	left    atomic.Int32
	done    chan time.Time
}

// variant is one row of the benchmark.
type variant struct {
	name  string
	mode  string
	delta bool
	flips int
	env   []string // of the server process
	// viaWatch flips a replica's VMI Ready condition in its tenant cluster's (stubbed) API
	// server instead of its health probe: the change goes through the cluster's watch.
	viaWatch bool
}

// BenchmarkHealthFlip measures, with 10,000 endpoints over 2,000 jobs and 100 ADS sessions,
// the time from one replica's health change reaching the controller until all 100 sessions
// have the job's new endpoint set, and the server process's memory.
func BenchmarkHealthFlip(b *testing.B) {
	for _, tc := range []variant{
		{name: "inferplane/delta", mode: modeOurs, delta: true, flips: 300},
		{name: "inferplane/sotw", mode: modeOurs, flips: 300},
		// The Go runtime's soft memory limit, as a Deployment would set it (docs/xds.md): the
		// collector runs earlier as the heap nears it, trading CPU for the peak.
		{name: "inferplane-" + memLimitName + "/delta", mode: modeOurs, delta: true, flips: 300, env: []string{"GOMEMLIMIT=" + memLimit}},
		{name: "inferplane-" + memLimitName + "/sotw", mode: modeOurs, flips: 300, env: []string{"GOMEMLIMIT=" + memLimit}},
		// The same fleet in 100 tenant clusters, each watched on its own (docs/xds.md).
		{name: "inferplane-clusters=100/delta", mode: modeClusters, delta: true, flips: 300},
		{name: "inferplane-clusters=100/sotw", mode: modeClusters, flips: 300},
		{name: "inferplane-clusters=100-" + clusterMemLimitName + "/delta", mode: modeClusters, delta: true, flips: 300,
			env: []string{"GOMEMLIMIT=" + clusterMemLimit}},
		{name: "inferplane-clusters=100-ready-flip/delta", mode: modeClusters, delta: true, flips: 100, viaWatch: true},
		{name: "inferplane-unbounded/delta", mode: modeUnbounded, delta: true, flips: 100},
		{name: "inferplane-unbounded/sotw", mode: modeUnbounded, flips: 100},
		{name: "baseline=linear-cache/sotw", mode: modeLinear, flips: 30},
		{name: "baseline=snapshot-cache/sotw", mode: modeSnapshot, flips: 10},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				runFlips(b, tc)
			}
		})
	}
	printSummary()
}

// startStubs serves the fleet's tenant clusters (kubestub) and lists them in a file for the
// server process.
func startStubs(b *testing.B) (map[string]*kubestub.Server, string) {
	byTenant := map[string][]*kubevirtv1.VirtualMachineInstance{}
	for _, r := range fleetOf(clusterTenants) {
		idx, _ := strconv.Atoi(r.Index)
		v := vmitest.VMI(vmitest.Node{Tenant: r.Tenant, Job: r.Job, Runtime: "vllm", Replica: idx, ServingPort: int(r.Port), RequireAPIKey: true})
		kubestub.Running(v, r.Address)
		byTenant[r.Tenant] = append(byTenant[r.Tenant], v)
	}
	stubs := map[string]*kubestub.Server{}
	var list []stubbedCluster
	for tenant, vmis := range byTenant {
		s, err := kubestub.Start(vmis)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		stubs[tenant] = s
		list = append(list, stubbedCluster{Tenant: tenant, URL: s.URL})
	}
	data, _ := json.Marshal(list)
	path := filepath.Join(b.TempDir(), "clusters.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	return stubs, path
}

// connectSessions opens the ADS sessions and waits for their initial sync; each session
// counts the current flip once it has the flip's endpoint set.
func connectSessions(b *testing.B, ctx context.Context, conn *grpc.ClientConn, delta bool, current *atomic.Pointer[flip]) time.Duration {
	seen := make([]atomic.Pointer[flip], sessions) // the last flip each session counted
	agents := make([]*adstest.Agent, sessions)
	connectStart := time.Now()
	for i := range sessions {
		a := &adstest.Agent{NodeID: fmt.Sprintf("envoy-%03d", i), Delta: delta, Discard: true,
			OnEndpoints: func(cluster string, addrs []string, at time.Time) {
				f := current.Load()
				if f == nil || cluster != f.cluster || len(addrs) != f.want || seen[i].Load() == f {
					return
				}
				seen[i].Store(f)
				if f.left.Add(-1) == 0 {
					f.done <- at
				}
			}}
		if err := adstest.Start(ctx, conn, a); err != nil {
			b.Fatal(err)
		}
		agents[i] = a
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, a := range agents {
		for {
			if _, n := a.Counts(); n >= jobs {
				break
			}
			if time.Now().After(deadline) {
				_, n := a.Counts()
				b.Fatalf("%s: only %d load assignments after 5 minutes", a.NodeID, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return time.Since(connectStart)
}

func runFlips(b *testing.B, tc variant) {
	b.StopTimer()
	var stubs map[string]*kubestub.Server
	env := tc.env
	if tc.mode == modeClusters {
		var list string
		stubs, list = startStubs(b)
		env = append(slices.Clone(env), childClusters+"="+list)
	}
	c := startChild(b, tc.mode, env...)
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var current atomic.Pointer[flip]
	initial := connectSessions(b, ctx, conn, tc.delta, &current)
	time.Sleep(2 * time.Second) // let the last ACKs of the initial sync settle
	before := c.mem(b)

	n := tenants
	if tc.mode == modeClusters {
		n = clusterTenants
	}
	var lat []time.Duration
	down := map[string]bool{}
	b.StartTimer()
	for i := range tc.flips {
		j := (i * 7919) % jobs // spread over the jobs
		tenant, vmi := "t"+strconv.Itoa(j%n), fmt.Sprintf("job%d-r%d-n0", j, i%perJob)
		key := tenant + "/" + vmi
		up := down[key]
		down[key] = !up
		want := perJob - 1
		if up {
			want = perJob
		}
		f := &flip{cluster: tenant + "/job" + strconv.Itoa(j), want: want, done: make(chan time.Time, 1)}
		f.left.Store(sessions)
		current.Store(f)
		f.start = time.Now()
		if tc.viaWatch {
			err := stubs[tenant].Update(tenant, vmi, func(v *kubevirtv1.VirtualMachineInstance) { kubestub.SetReady(v, up) })
			if err != nil {
				b.Fatal(err)
			}
		} else {
			fmt.Fprintf(c.in, "flip %s %s\n", key, map[bool]string{true: "up", false: "down"}[up])
		}
		select {
		case at := <-f.done:
			lat = append(lat, at.Sub(f.start))
		case <-time.After(60 * time.Second):
			b.Fatalf("flip %d (%s): %d sessions still without the update after 60 s", i, key, f.left.Load())
		}
	}
	b.StopTimer()
	report(b, lat, before, c.mem(b), initial)
}

// report adds one variant's figures to the benchmark output and the summary.
func report(b *testing.B, lat []time.Duration, before, after memory, initial time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(len(lat)), "flips")
	heap := max(before.heapInuse, after.heapInuse)
	b.ReportMetric(heap, "heap-MiB")
	b.ReportMetric(after.rss, "rss-MiB")
	b.ReportMetric(after.peakRSS, "peak-rss-MiB")
	b.ReportMetric(after.peakHeap, "peak-heap-MiB")
	b.ReportMetric(initial.Seconds(), "initial-sync-s")
	results = append(results, result{name: b.Name(), flips: len(lat), p50: pct(0.50), p99: pct(0.99),
		max: float64(lat[len(lat)-1].Microseconds()) / 1000, heap: heap, rss: after.rss, peak: after.peakRSS,
		peakHeap: after.peakHeap, sync: initial.Seconds()})
}

type result struct {
	name                                 string
	flips                                int
	p50, p99, max, heap, rss, peak, sync float64
	peakHeap                             float64
}

// results collects the sub-benchmarks for the summary.
var results []result

func printSummary() {
	if len(results) == 0 {
		return
	}
	fmt.Printf("\nxDS health flip: %d endpoints over %d jobs, %d ADS sessions over gRPC on loopback; "+
		"server in its own process (memory after GC; RSS after the flips, and its peak during the initial sync;\n"+
		"peak heap: heap objects sampled every 10 ms); clusters=100: the same fleet in 100 tenant clusters, each watched over HTTP\n"+
		"from a stub of its API server in the benchmark process (xds/internal/kubestub)\n",
		jobs*perJob, jobs, sessions)
	fmt.Printf("%-46s %6s %8s %8s %8s %9s %8s %9s %9s %8s\n", "variant", "flips", "p50 ms", "p99 ms", "max ms", "heap MiB", "RSS MiB", "peak RSS", "peak heap", "sync s")
	by := map[string]result{}
	for _, r := range results {
		short := r.name
		if i := strings.Index(r.name, "/"); i >= 0 {
			short = r.name[i+1:] // drop "BenchmarkHealthFlip/"
		}
		short = strings.TrimSuffix(short, "-"+strconv.Itoa(runtime.GOMAXPROCS(0)))
		by[short] = r
		fmt.Printf("%-46s %6d %8.1f %8.1f %8.1f %9.1f %8.1f %9.1f %9.1f %8.1f\n", short, r.flips, r.p50, r.p99, r.max, r.heap, r.rss, r.peak, r.peakHeap, r.sync)
	}
	ours := by["inferplane/sotw"]
	for _, base := range []string{"baseline=snapshot-cache/sotw", "baseline=linear-cache/sotw"} {
		if b, ok := by[base]; ok && ours.p99 > 0 {
			fmt.Printf("state of the world, %s vs inferplane: p50 %.1fx, p99 %.1fx slower\n", strings.TrimPrefix(base, "baseline="), b.p50/ours.p50, b.p99/ours.p99)
		}
	}
	if d, ok := by["inferplane/delta"]; ok && ours.p99 > 0 {
		fmt.Printf("inferplane, delta vs state of the world: p50 %.1fx, p99 %.1fx faster\n", ours.p50/d.p50, ours.p99/d.p99)
	}
	for _, proto := range []string{"delta", "sotw"} {
		one, okOne := by["inferplane/"+proto]
		many, okMany := by["inferplane-clusters=100/"+proto]
		if okOne && okMany && one.p99 > 0 {
			fmt.Printf("%s, 100 tenant clusters vs one cluster: p50 %.2fx, p99 %.2fx, peak RSS %.2fx\n", proto, many.p50/one.p50, many.p99/one.p99, many.peak/one.peak)
		}
	}
	fmt.Println("goal: p99 < 100 ms; memory < 200 MiB with one cluster, < 300 MiB with 100 tenant clusters")
	fmt.Println("the ready-flip row goes through a tenant cluster's watch: its two debounces (discovery.Kube's 50 ms and discovery.Clusters' 20 ms) are part of it")
}
