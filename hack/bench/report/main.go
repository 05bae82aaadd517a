// Command report renders 1,000 tenants x 5 jobs (generated in memory) with the generator's
// render and with Helm's template engine from the equivalent chart (package bench), in the same
// run and with the same number of workers, after checking on a sample that both produce the
// same objects, and prints the times and the ratio (make bench-generator). It asserts no
// timing: the figures are a report.
package main

import (
	"fmt"
	"log"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/hack/bench"
)

func main() {
	const nTenants, jobsPerTenant = 1000, 5
	tenants := rendertest.Many(nTenants, jobsPerTenant)
	workers := runtime.GOMAXPROCS(0)

	// Untimed preparation for Helm: the chart and each tenant's values.
	c, err := bench.Chart()
	if err != nil {
		log.Fatal(err)
	}
	values, err := bench.ValuesOf(tenants, render.Options{})
	if err != nil {
		log.Fatal(err)
	}

	sampled, sampleFiles := checkSample(c, tenants, values)

	// Warm both paths up (template parsing caches, allocator), then time each over all tenants.
	goRun := func(tp *plan.TenantPlan, _ int) (int, int, error) {
		files, err := render.Tenant(*tp, render.Options{})
		n := 0
		for _, b := range files {
			n += len(b)
		}
		return len(files), n, err
	}
	helmRun := func(tp *plan.TenantPlan, i int) (int, int, error) {
		out, err := bench.RenderHelm(c, values[i], tp.Tenant.Name)
		n := 0
		for _, s := range out {
			n += len(s)
		}
		return len(out), n, err
	}
	for i := range 50 {
		_, _, _ = goRun(&tenants[i], i)
		_, _, _ = helmRun(&tenants[i], i)
	}

	// Three rounds per side, each after a collection so that neither pays for the other's
	// garbage. Wall time is what the goal is about; CPU time (this process's, collector
	// included) is the steadier measure on a shared machine, where other programs take CPUs
	// away for seconds at a time. Best rounds are the least disturbed ones.
	const rounds = 3
	var goWall, helmWall, goCPU, helmCPU []time.Duration
	var goFiles, goBytes, helmBytes int
	for range rounds {
		runtime.GC()
		c := processCPU()
		d, f, b := timeAll(tenants, workers, goRun)
		goCPU = append(goCPU, processCPU()-c)
		goWall, goFiles, goBytes = append(goWall, d), f, b
		runtime.GC()
		c = processCPU()
		d, _, b = timeAll(tenants, workers, helmRun)
		helmCPU = append(helmCPU, processCPU()-c)
		helmWall, helmBytes = append(helmWall, d), b
	}

	jobs := nTenants * jobsPerTenant
	best := slices.Min[[]time.Duration]
	wallRatio := best(helmWall).Seconds() / best(goWall).Seconds()
	cpuRatio := best(helmCPU).Seconds() / best(goCPU).Seconds()
	fmt.Printf("generator benchmark: %d tenants x %d jobs = %d jobs, %d workers (GOMAXPROCS), %d CPUs, %d rounds each\n",
		nTenants, jobsPerTenant, jobs, workers, runtime.NumCPU(), rounds)
	fmt.Printf("  equivalence: %d sampled tenants, %d files: Helm and Go render the same objects\n", sampled, sampleFiles)
	fmt.Printf("  go render (generator/render):  wall best %7.3f s (median %7.3f s)  CPU best %7.3f s  %6.1f µs/job  %d files, %.1f MiB\n",
		best(goWall).Seconds(), median(goWall).Seconds(), best(goCPU).Seconds(),
		float64(best(goWall).Microseconds())/float64(jobs), goFiles, float64(goBytes)/(1<<20))
	fmt.Printf("  helm engine (same objects):    wall best %7.3f s (median %7.3f s)  CPU best %7.3f s  %6.1f µs/job  %.1f MiB\n",
		best(helmWall).Seconds(), median(helmWall).Seconds(), best(helmCPU).Seconds(),
		float64(best(helmWall).Microseconds())/float64(jobs), float64(helmBytes)/(1<<20))
	fmt.Printf("  ratio: the Go render is %.1fx faster than Helm in wall time, %.1fx in CPU time (best rounds)\n",
		wallRatio, cpuRatio)
	fmt.Printf("  goals: under 2 s for %d jobs: %s; at least 10x faster than Helm: %s (wall), %s (CPU)\n",
		jobs, verdict(best(goWall) < 2*time.Second), verdict(wallRatio >= 10), verdict(cpuRatio >= 10))
}

// checkSample is the fairness check: a sample spread over the run renders the same files and
// objects both ways. It returns the tenants and files compared.
func checkSample(c *chart.Chart, tenants []plan.TenantPlan, values []map[string]any) (sampled, files int) {
	for i := 0; i < len(tenants); i += len(tenants) / 20 {
		rendered, err := render.Tenant(tenants[i], render.Options{})
		if err != nil {
			log.Fatal(err)
		}
		goDocs, err := bench.RenderDocuments(rendered)
		if err != nil {
			log.Fatal(err)
		}
		out, err := bench.RenderHelm(c, values[i], tenants[i].Tenant.Name)
		if err != nil {
			log.Fatal(err)
		}
		helmDocs, err := bench.HelmDocuments(out)
		if err != nil {
			log.Fatal(err)
		}
		if diffs := bench.Equivalent(helmDocs, goDocs); len(diffs) > 0 {
			log.Fatalf("%s: the Helm chart does not render the same objects, the comparison would be unfair:\n%s",
				tenants[i].Tenant.Name, strings.Join(diffs, "\n"))
		}
		sampled++
		files += len(rendered)
	}
	return sampled, files
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// timeAll renders every tenant with workers goroutines and returns the wall time, files and
// bytes.
func timeAll(tenants []plan.TenantPlan, workers int,
	run func(*plan.TenantPlan, int) (int, int, error)) (time.Duration, int, int) {
	var next, files, bytes atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tenants) {
					return
				}
				f, b, err := run(&tenants[i], i)
				if err != nil {
					errs <- err
					return
				}
				files.Add(int64(f))
				bytes.Add(int64(b))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		log.Fatal(err)
	}
	return elapsed, int(files.Load()), int(bytes.Load())
}
