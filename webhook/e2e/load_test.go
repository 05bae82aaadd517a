package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

// Environment variables of the load test.
const (
	envLoad         = "INFERPLANE_WEBHOOK_LOAD"          // "1" runs it
	envLoadDuration = "INFERPLANE_WEBHOOK_LOAD_DURATION" // per run, default 30s
	envLoadWorkers  = "INFERPLANE_WEBHOOK_LOAD_WORKERS"  // comma-separated concurrencies, default "50,1"
)

// TestLoadThroughAPIServer measures what the webhook adds to API requests: workers send dry-run
// creates of a guarded VirtualMachine for the duration, without a webhook registered, then with
// a no-op webhook (the floor: what any webhook costs on the machine), then with ours, and it
// prints requests, p50/p99 and errors of each run and the differences. 50 workers is the
// issue's load; 1 worker shows the cost of one request without queueing. The
// time spent inside the webhook comes from its own histograms. It only runs with
// INFERPLANE_WEBHOOK_LOAD=1 (`make bench-webhook`): minutes are too long for `make test`. It
// asserts no errors, never a latency (that is what the printout is for).
func TestLoadThroughAPIServer(t *testing.T) {
	if os.Getenv(envLoad) != "1" {
		t.Skipf("SKIPPED: the load run takes minutes; set %s=1 (make bench-webhook) to run it", envLoad)
	}
	kubeenv.Require(t, env)
	duration := 30 * time.Second
	if d := os.Getenv(envLoadDuration); d != "" {
		var err error
		duration, err = time.ParseDuration(d)
		require.NoError(t, err, envLoadDuration)
	}
	concurrencies := []int{50, 1}
	if w := os.Getenv(envLoadWorkers); w != "" {
		concurrencies = nil
		for _, f := range strings.Split(w, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, envLoadWorkers)
			require.Positive(t, n, envLoadWorkers)
			concurrencies = append(concurrencies, n)
		}
	}
	applyPolicyData(t)

	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // no client-side rate limit: the API server is what is measured
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	vm := pt.VM("load", 0, 0, pt.Master("qwen-4", 4), pt.H100())
	// The same VM without inferplane's labels: the API server's object selector skips the
	// webhook for it, at no other difference in cost.
	plain := vm.DeepCopy()
	plain.Labels, plain.Spec.Template.ObjectMeta.Labels = nil, nil

	without := map[int]loadResult{}
	for _, w := range concurrencies {
		without[w] = loadRun(t, c, []client.Object{vm}, w, duration)[0]
	}
	// The floor: the same configuration pointing at a webhook that does nothing.
	floor := map[int]loadResult{}
	noop := startNoopWebhook(t)
	vwc := registerNoop(t, noop)
	for _, w := range concurrencies {
		floor[w] = loadRun(t, c, []client.Object{vm}, w, duration)[0]
	}
	unregisterNoop(t, noop, vwc)

	srv := startServer(t, webhook.ServeOptions{})
	register(t, "inferplane-policy-load", srv.URL, srv.CA)
	with := map[int]loadResult{}
	inside := map[int][2]time.Duration{}
	for _, w := range concurrencies {
		httpBefore, decideBefore := serverTimes(t)
		with[w] = loadRun(t, c, []client.Object{vm}, w, duration)[0]
		httpAfter, decideAfter := serverTimes(t)
		inside[w] = [2]time.Duration{httpAfter.meanSince(httpBefore), decideAfter.meanSince(decideBefore)}
	}
	// The runs above are minutes apart; on a shared machine the background load drifts between
	// them. This run alternates a guarded and an unguarded VM every 250ms, both under the same
	// load, the webhook registered.
	paired := loadRun(t, c, []client.Object{vm, plain}, concurrencies[0], duration)

	var b strings.Builder
	fmt.Fprintf(&b, "\nwebhook load: dry-run creates of a guarded VirtualMachine through the API server, %s per run\n", duration)
	fmt.Fprintf(&b, "  %-8s %-22s %9s %8s %10s %10s %7s\n", "workers", "run", "requests", "req/s", "p50", "p99", "errors")
	for _, w := range concurrencies {
		wo, wi, fl := without[w], with[w], floor[w]
		fmt.Fprintf(&b, "  %-8d %-22s %9d %8.0f %10s %10s %7d\n", w, "without the webhook", wo.n, wo.rate, wo.p50, wo.p99, wo.errors)
		fmt.Fprintf(&b, "  %-8d %-22s %9d %8.0f %10s %10s %7d\n", w, "with a no-op webhook", fl.n, fl.rate, fl.p50, fl.p99, fl.errors)
		fmt.Fprintf(&b, "  %-8d %-22s %9s %8s %10s %10s\n", w, "added by a no-op", "", "", fl.p50-wo.p50, fl.p99-wo.p99)
		fmt.Fprintf(&b, "  %-8d %-22s %9d %8.0f %10s %10s %7d\n", w, "with the webhook", wi.n, wi.rate, wi.p50, wi.p99, wi.errors)
		fmt.Fprintf(&b, "  %-8d %-22s %9s %8s %10s %10s\n", w, "added by the webhook", "", "", wi.p50-wo.p50, wi.p99-wo.p99)
		fmt.Fprintf(&b, "  %-8d %-22s mean %s in its HTTP handler, of which %s deciding\n", w, "inside the webhook",
			inside[w][0].Round(time.Microsecond), inside[w][1].Round(time.Microsecond))
	}
	w := concurrencies[0]
	fmt.Fprintf(&b, "  %-8d %-22s %9d %8.0f %10s %10s %7d\n", w, "interleaved, guarded", paired[0].n, paired[0].rate, paired[0].p50, paired[0].p99, paired[0].errors)
	fmt.Fprintf(&b, "  %-8d %-22s %9d %8.0f %10s %10s %7d\n", w, "interleaved, unlabelled", paired[1].n, paired[1].rate, paired[1].p50, paired[1].p99, paired[1].errors)
	fmt.Fprintf(&b, "  %-8d %-22s %9s %8s %10s %10s\n", w, "added by the webhook", "", "", paired[0].p50-paired[1].p50, paired[0].p99-paired[1].p99)
	fmt.Print(b.String()) // go test -v shows it as is; t.Log would indent it
	for k, r := range paired {
		require.Zero(t, r.errors, "errors in the interleaved run (%d): %v", k, r.firstErr)
	}
	for _, w := range concurrencies {
		require.Zero(t, without[w].errors, "errors without the webhook, %d workers: %v", w, without[w].firstErr)
		require.Zero(t, with[w].errors, "errors with the webhook, %d workers: %v", w, with[w].firstErr)
		require.Zero(t, floor[w].errors, "errors with the no-op webhook, %d workers: %v", w, floor[w].firstErr)
	}
	require.Positive(t, noop.calls.Load(), "the API server never called the no-op webhook")
}

// noopWebhook is the floor of the load measurement: a TLS server (HTTP/2, as controller-runtime's
// is) on the same paths that answers every AdmissionReview "allowed" after reading only its uid.
// What it adds is what any webhook costs on this machine: the API server encoding the request,
// the round trip, and decoding the answer, before any decoding or deciding of ours.
type noopWebhook struct {
	URL   string
	CA    []byte
	calls atomic.Int64
}

func startNoopWebhook(t *testing.T) *noopWebhook {
	t.Helper()
	b, err := webhook.SelfSigned([]string{"127.0.0.1"}, time.Now(), time.Hour)
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(b.Cert, b.Key)
	require.NoError(t, err)
	n := &noopWebhook{CA: b.CA}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			Request struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`, review.Request.UID)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	n.URL = srv.URL
	return n
}

// unregisterNoop deletes the no-op's configuration and waits until a request no longer
// reaches it.
func unregisterNoop(t *testing.T, n *noopWebhook, vwc *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	unregister(t, vwc)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		before := n.calls.Load()
		_ = env.DryRun(ctx, pt.VM("noop", 0, 0, pt.Master("qwen-4", 4), pt.H100()))
		return n.calls.Load() == before, nil
	})
	require.NoError(t, err, "the API server still calls the no-op webhook after its configuration was deleted")
}

// registerNoop registers the webhook configuration Manifests renders, pointed at the no-op
// server, and waits until the API server calls it.
func registerNoop(t *testing.T, n *noopWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	objs, err := install.Manifests(install.ManifestOptions{ConfigurationName: "inferplane-policy-noop", URL: n.URL, CABundle: n.CA})
	require.NoError(t, err)
	vwc := objs[0].(*admissionregistrationv1.ValidatingWebhookConfiguration)
	require.NoError(t, env.Client.Create(context.Background(), vwc))
	t.Cleanup(func() { unregister(t, vwc) })
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		before := n.calls.Load()
		_ = env.DryRun(ctx, pt.VM("noop", 0, 0, pt.Master("qwen-4", 4), pt.H100()))
		return n.calls.Load() > before, nil
	})
	require.NoError(t, err, "the API server never called the no-op webhook")
	return vwc
}

// histTotal is a histogram's running sum and count.
type histTotal struct {
	sum   float64
	count uint64
}

func (h histTotal) meanSince(before histTotal) time.Duration {
	if h.count <= before.count {
		return 0
	}
	return time.Duration((h.sum - before.sum) / float64(h.count-before.count) * float64(time.Second))
}

// serverTimes reads, from the webhook's registry in this process, controller-runtime's HTTP
// latency histogram and our decision histogram for VirtualMachines.
func serverTimes(t *testing.T) (httpTime, decide histTotal) {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			h := histTotal{m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()}
			switch {
			case f.GetName() == "controller_runtime_webhook_latency_seconds" && labels["webhook"] == "/validate/virtualmachines":
				httpTime = h
			case f.GetName() == "inferplane_webhook_decision_duration_seconds" && labels["kind"] == "VirtualMachine":
				decide = h
			}
		}
	}
	return httpTime, decide
}

type loadResult struct {
	n, errors int
	rate      float64
	p50, p99  time.Duration
	firstErr  error
}

// loadRun sends dry-run creates from workers goroutines for d (after a 2s warm-up) and
// returns one result per object. With two objects, all workers switch between them every
// 250ms, so both are measured under the same background load.
func loadRun(t *testing.T, c client.Client, objs []client.Object, workers int, d time.Duration) []loadResult {
	t.Helper()
	ctx := context.Background()
	const slice = 250 * time.Millisecond
	run := func(d time.Duration) ([][]time.Duration, []int, []error) {
		var mu sync.Mutex
		lat := make([][]time.Duration, len(objs))
		errs := make([]int, len(objs))
		firstErr := make([]error, len(objs))
		begin := time.Now()
		deadline := begin.Add(d)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				mine := make([][]time.Duration, len(objs))
				myErrs := make([]int, len(objs))
				myFirst := make([]error, len(objs))
				for {
					start := time.Now()
					if !start.Before(deadline) {
						break
					}
					k := int(start.Sub(begin)/slice) % len(objs)
					err := c.Create(ctx, objs[k].DeepCopyObject().(client.Object), client.DryRunAll)
					mine[k] = append(mine[k], time.Since(start))
					if err != nil {
						myErrs[k]++
						if myFirst[k] == nil {
							myFirst[k] = err
						}
					}
				}
				mu.Lock()
				defer mu.Unlock()
				for k := range objs {
					lat[k] = append(lat[k], mine[k]...)
					errs[k] += myErrs[k]
					if firstErr[k] == nil {
						firstErr[k] = myFirst[k]
					}
				}
			})
		}
		wg.Wait()
		return lat, errs, firstErr
	}
	run(2 * time.Second) // warm up connections and caches
	lat, errs, firstErr := run(d)
	out := make([]loadResult, len(objs))
	for k := range objs {
		l := lat[k]
		require.NotEmpty(t, l, "no request completed")
		slices.Sort(l)
		at := func(q float64) time.Duration {
			return l[min(len(l)-1, int(q*float64(len(l))))].Round(10 * time.Microsecond)
		}
		// Each object had about 1/len(objs) of the time.
		out[k] = loadResult{n: len(l), errors: errs[k], rate: float64(len(l)) / (d.Seconds() / float64(len(objs))),
			p50: at(0.5), p99: at(0.99), firstErr: firstErr[k]}
	}
	return out
}
