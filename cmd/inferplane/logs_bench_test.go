package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/e2e/proc"
	"github.com/inferplane/inferplane/joblogs"
	apiclient "github.com/inferplane/inferplane/productapi/client"
)

// TestBenchLogs measures the log path on logsWorld (a real kube-apiserver, the kubelet
// STAND-IN, the product API in a process of its own), for `make bench-logs`:
//
//   - a line appended to a VM's console until `inferplane jobs logs -f` prints it, p50 and
//     p99 over paced lines (goal: p99 under 1 s), beside what a user would run instead on the
//     same API server: client-go's GetLogs follow of the pod (kubectl's path), and `kubectl
//     logs -f` itself when kubectl is installed;
//   - the API process's memory (Go heap in use, RSS) and goroutines, idle, with 100 follows
//     open on a VM that prints nothing, and with 100 follows open while it prints 10,000 lines
//     a second.
//
// It runs only with INFERPLANE_BENCH_LOGS=1 and prints its figures with the load average.
func TestBenchLogs(t *testing.T) {
	if os.Getenv("INFERPLANE_BENCH_LOGS") != "1" {
		t.Skip("SKIPPED: a benchmark; run it with make bench-logs (INFERPLANE_BENCH_LOGS=1)")
	}
	w := startLogsWorld(t, true)
	w.writer.status(guestlog.Status{Stage: guestlog.StageLoadingModel, Since: time.Now()})
	latency(t, w)
	memory(t, w)
}

func benchReport(t *testing.T, format string, args ...any) {
	line := fmt.Sprintf(format, args...) + fmt.Sprintf("   [load %s]", loadAvg())
	fmt.Println("bench-logs: " + line)
	t.Log(line)
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func quantileOf(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

func msOf(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// stamped records when each marked line ("bench-line <n>") was first seen.
type stamped struct {
	mu   sync.Mutex
	seen map[int]time.Time
}

func (s *stamped) see(line string, at time.Time) {
	i := strings.Index(line, "bench-line ")
	if i < 0 {
		return
	}
	n, err := strconv.Atoi(strings.Fields(line[i+len("bench-line "):])[0])
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[n]; !ok {
		s.seen[n] = at
	}
}

func (s *stamped) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// latency paces marked lines into the console and measures each reader's delay.
func latency(t *testing.T, w *logsWorld) {
	const n, pace = 300, 20 * time.Millisecond
	ours := &stamped{seen: map[int]time.Time{}}
	out, stop := startCLI("jobs", "logs", "acme/"+logsJob, "-f", "--tail", "0")
	out.onLine = ours.see

	// client-go's follow of the pod's log through the same API server: kubectl's path.
	direct := &stamped{seen: map[int]time.Time{}}
	kc, err := kubernetes.NewForConfig(w.env.Config)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tail := int64(0)
	rc, err := kc.CoreV1().Pods("acme").GetLogs(w.pod, &corev1.PodLogOptions{Container: joblogs.Container, Follow: true, TailLines: &tail}).Stream(ctx)
	require.NoError(t, err)
	go func() {
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			direct.see(sc.Text(), time.Now())
		}
	}()
	readers := map[string]*stamped{"jobs logs -f (through the product API)": ours, "client-go GetLogs follow (kubectl's path)": direct}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		k := &stamped{seen: map[int]time.Time{}}
		cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", w.kc, "--context", "acme", "logs", "-f", "--tail", "0", "-n", "acme", w.pod, "-c", joblogs.Container)
		pipe, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		defer func() { cancel(); _ = cmd.Wait() }()
		go func() {
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				k.see(sc.Text(), time.Now())
			}
		}()
		readers["kubectl logs -f (the same path, a process)"] = k
	} else {
		benchReport(t, "kubectl is not installed: its figures were not measured")
	}
	time.Sleep(3 * time.Second) // every reader connected
	written := map[int]time.Time{}
	for i := range n {
		written[i] = time.Now()
		w.writer.line(guestlog.Stdout, fmt.Sprintf("bench-line %d INFO request finished", i))
		time.Sleep(pace)
	}
	require.Eventually(t, func() bool {
		for _, r := range readers {
			if r.count() < n {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "every reader saw every line")
	err, errOut := stop()
	require.NoError(t, err, errOut)
	results := map[string][2]time.Duration{}
	for name, r := range readers {
		var d []time.Duration
		for i, at := range written {
			d = append(d, r.seen[i].Sub(at))
		}
		results[name] = [2]time.Duration{quantileOf(d, 0.5), quantileOf(d, 0.99)}
	}
	ourP := results["jobs logs -f (through the product API)"]
	benchReport(t, "a line appended to the console -> shown, %d lines paced every %s:", n, pace)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range results {
			if !yield(k) {
				return
			}
		}
	}) {
		r := results[name]
		benchReport(t, "  %-45s p50 %s, p99 %s; ratio of jobs logs -f to it: p50 %.2f, p99 %.2f", name, msOf(r[0]), msOf(r[1]),
			float64(ourP[0])/float64(r[0]), float64(ourP[1])/float64(r[1]))
	}
	benchReport(t, "  jobs logs -f p99 %s against the goal of 1 s: ratio %.2f", msOf(ourP[1]), float64(ourP[1])/float64(time.Second))
}

// cpuSeconds is the CPU time the API process has used so far (user and system).
func cpuSeconds(t *testing.T, w *logsWorld) float64 {
	f, ok := proc.StatFields(fmt.Sprintf("/proc/%d", w.api.Pid()))
	require.True(t, ok)
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // clock ticks
}

// apiMemory is what the API process uses now: its Go heap in use and goroutines (its
// /metrics) and its resident set (/proc).
type apiMemory struct {
	heap, rss  float64 // bytes
	goroutines float64
}

func (m apiMemory) String() string {
	return fmt.Sprintf("heap %.1f MiB, RSS %.1f MiB, %d goroutines", m.heap/(1<<20), m.rss/(1<<20), int(m.goroutines))
}

func readMemory(t *testing.T, w *logsWorld) apiMemory {
	var m apiMemory
	resp, err := http.Get(w.apiURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "go_memstats_heap_inuse_bytes":
			m.heap = v
		case "go_goroutines":
			m.goroutines = v
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.api.Pid()))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			m.rss = kb * 1024
		}
	}
	return m
}

// getJob times one GET of the job (its stages read the agent's status: a console-log read
// through the tenant cluster's API server) and one GET /me (the API's own work only).
func getJob(t *testing.T, c *apiclient.Client) [2]time.Duration {
	start := time.Now()
	_, err := c.GetJob(context.Background(), "acme", logsJob)
	require.NoError(t, err)
	job := time.Since(start)
	start = time.Now()
	_, err = c.Me(context.Background())
	require.NoError(t, err)
	return [2]time.Duration{job, time.Since(start)}
}

// column is one of getJob's timings over the samples.
func column(d [][2]time.Duration, i int) []time.Duration {
	var out []time.Duration
	for _, x := range d {
		out = append(out, x[i])
	}
	return out
}

// memory opens 100 follows on the VM, first while it prints nothing, then while it prints
// 10,000 lines a second, and samples the API process.
func memory(t *testing.T, w *logsWorld) {
	const follows, rate, burst = 100, 10_000, 20 * time.Second
	time.Sleep(2 * time.Second) // the latency's follow has ended
	idle := readMemory(t, w)
	benchReport(t, "the API process, no follow open: %s", idle)
	c := apiclient.New(w.apiURL, apiclient.StaticToken("dana"))
	var idleGets [][2]time.Duration
	for range 40 {
		idleGets = append(idleGets, getJob(t, c))
	}

	ctx, cancel := context.WithCancel(context.Background())
	var lines atomic.Int64
	var wg sync.WaitGroup
	// Each follow counts the lines it gets without decoding them: the bench's own CPU goes
	// to the machine the API shares, and should be as little as a client can spend.
	for range follows {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.apiURL+"/api/v1/tenants/acme/jobs/"+logsJob+"/logs?follow=true&tail=0", nil)
			req.Header.Set("Authorization", "Bearer dana")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := resp.Body.Read(buf)
				lines.Add(int64(bytes.Count(buf[:n], []byte("\n"))))
				if err != nil {
					return
				}
			}
		})
	}
	time.Sleep(5 * time.Second)
	quiet := readMemory(t, w)
	benchReport(t, "%d follows open, the VM printing nothing: %s; per follow: %.1f KiB of heap, %.1f goroutines",
		follows, quiet, (quiet.heap-idle.heap)/follows/1024, (quiet.goroutines-idle.goroutines)/follows)

	// The VM prints 10,000 lines a second (100 every 10 ms) for the burst.
	stopWriting := make(chan struct{})
	var written atomic.Int64
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		line := strings.Repeat("x", 80)
		for i := 0; ; i++ {
			select {
			case <-stopWriting:
				return
			case <-tick.C:
			}
			batch := make([]string, 0, rate/100)
			for j := range rate / 100 {
				batch = append(batch, fmt.Sprintf("INFO %d.%d %s", i, j, line))
			}
			w.writer.lines(guestlog.Stdout, batch)
			written.Add(rate / 100)
		}
	}()
	var peak apiMemory
	var heaps []string
	var during [][2]time.Duration
	start, before, cpu0 := time.Now(), lines.Load(), cpuSeconds(t, w)
	next := start.Add(5 * time.Second)
	for time.Since(start) < burst {
		time.Sleep(500 * time.Millisecond)
		m := readMemory(t, w)
		peak.heap, peak.rss, peak.goroutines = max(peak.heap, m.heap), max(peak.rss, m.rss), max(peak.goroutines, m.goroutines)
		if time.Now().After(next) {
			heaps = append(heaps, fmt.Sprintf("%.0f", m.heap/(1<<20)))
			next = next.Add(5 * time.Second)
		}
		during = append(during, getJob(t, c))
	}
	close(stopWriting)
	shown := lines.Load() - before
	took := time.Since(start).Seconds()
	cpu := (cpuSeconds(t, w) - cpu0) / took
	benchReport(t, "%d follows open, the VM printing %d lines/s for %s (%d written): peak %s; %.0f lines/s shown over all follows (%.0f per follow)",
		follows, rate, burst, written.Load(), peak, float64(shown)/took, float64(shown)/took/follows)
	benchReport(t, "  the API process used %.2f CPU-seconds a second; heap every 5 s (MiB): %s; peak heap against idle: ratio %.2f; against %d quiet follows: ratio %.2f",
		cpu, strings.Join(heaps, ", "), peak.heap/idle.heap, follows, peak.heap/quiet.heap)
	for i, what := range []string{"GET the job (reads the VM's status through the cluster)", "GET /me (the API's own work)"} {
		d, idle := column(during, i), column(idleGets, i)
		benchReport(t, "  %s meanwhile: p50 %s, p99 %s; with no follow open: p50 %s, p99 %s; ratio of p50s %.2f", what,
			msOf(quantileOf(d, 0.5)), msOf(quantileOf(d, 0.99)), msOf(quantileOf(idle, 0.5)), msOf(quantileOf(idle, 0.99)),
			float64(quantileOf(d, 0.5))/float64(quantileOf(idle, 0.5)))
	}
	cancel()
	wg.Wait()
}
