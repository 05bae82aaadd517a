// Package e2e runs the meter against a real kube-apiserver: its cluster registry (Argo CD
// cluster Secrets) and the tenants' VMIs, rendered by the generator and moved through their
// phases by the test, which plays KubeVirt's part (no VM runs here).
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/e2e/argocd"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/internal/manifest"
	"github.com/inferplane/inferplane/metering"
)

var env *kubeenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.FromSlogHandler(slog.Default().Handler()))
	os.Exit(kubeenv.Main(m, &env))
}

// clock is the meter's clock, set by the test: "exact to the second" without sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// world is the API server standing in for the host cluster and both tenants' clusters, with the
// VMIs KubeVirt would make from the generator's VMs.
type world struct {
	t    *testing.T
	ctx  context.Context
	vmis map[string]*kubevirtv1.VirtualMachineInstance // by namespace/name, as rendered
}

// rendered are the VMIs of the rendered VMs: labels and annotations from the VM's template, as
// KubeVirt copies them.
func rendered(t *testing.T, tps ...plan.TenantPlan) map[string]*kubevirtv1.VirtualMachineInstance {
	out := map[string]*kubevirtv1.VirtualMachineInstance{}
	for _, tp := range tps {
		files, err := render.Tenant(tp, render.Options{})
		require.NoError(t, err)
		for name, data := range files {
			if !strings.HasPrefix(name, "jobs/") {
				continue
			}
			objs, err := manifest.Decode(data)
			require.NoError(t, err, name)
			for _, u := range objs {
				if u.GetKind() != "VirtualMachine" {
					continue
				}
				var vm kubevirtv1.VirtualMachine
				require.NoError(t, k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vm), name)
				out[vm.Namespace+"/"+vm.Name] = &kubevirtv1.VirtualMachineInstance{
					ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: vm.Namespace,
						Labels: vm.Spec.Template.ObjectMeta.Labels, Annotations: vm.Spec.Template.ObjectMeta.Annotations},
					Spec: vm.Spec.Template.Spec,
				}
			}
		}
	}
	return out
}

// create makes a VMI (a new one, with a new UID, for a VM that restarts) and returns its UID.
func (w *world) create(key string) string {
	vmi := w.vmis[key].DeepCopy()
	require.NoError(w.t, env.Client.Create(w.ctx, vmi), key)
	return string(vmi.UID)
}

type transition struct {
	phase kubevirtv1.VirtualMachineInstancePhase
	at    time.Time
}

// phases writes the VMI's status as KubeVirt does: its phase and every transition's time.
func (w *world) phases(key string, ts ...transition) {
	ns, name, _ := strings.Cut(key, "/")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var vmi kubevirtv1.VirtualMachineInstance
		if err := env.Client.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name}, &vmi); err != nil {
			return err
		}
		for _, tr := range ts {
			vmi.Status.Phase = tr.phase
			vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
				kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: tr.phase, PhaseTransitionTimestamp: metav1.NewTime(tr.at)})
		}
		return env.Client.Update(w.ctx, &vmi)
	})
	require.NoError(w.t, err, key)
}

// remove deletes a VMI and returns the deletion time the API server stamped on it (while the
// meter's finalizer holds it), or the zero time when it went at once.
func (w *world) remove(key string) time.Time {
	ns, name, _ := strings.Cut(key, "/")
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	require.NoError(w.t, env.Client.Delete(w.ctx, vmi), key)
	if err := env.Client.Get(w.ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil || vmi.DeletionTimestamp == nil {
		return time.Time{}
	}
	return vmi.DeletionTimestamp.Time.UTC()
}

// gone waits until the VMI is no longer in the API server: the meter released it.
func (w *world) gone(key string) {
	ns, name, _ := strings.Cut(key, "/")
	require.Eventually(w.t, func() bool {
		err := env.Client.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name}, &kubevirtv1.VirtualMachineInstance{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 50*time.Millisecond, "%s released by the meter and gone", key)
}

// held waits until every VMI that holds GPUs carries the meter's finalizer.
func (w *world) held(keys ...string) {
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		require.Eventually(w.t, func() bool {
			var vmi kubevirtv1.VirtualMachineInstance
			if err := env.Client.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name}, &vmi); err != nil {
				return false
			}
			return len(vmi.Finalizers) == 1 && vmi.Finalizers[0] == metering.Finalizer
		}, 30*time.Second, 50*time.Millisecond, "%s held by the meter", key)
	}
}

// meter is one run of the meter over the store in dir.
type meter struct {
	svc  *metering.Service
	stop func()
}

func startMeter(t *testing.T, dir string, c *clock) *meter {
	reg := &clusters.Registry{Config: env.Config, Logger: slog.Default()}
	svc, err := metering.New(metering.Config{Dir: dir, Registry: reg, Now: c.Now, Tick: make(chan time.Time)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	require.Eventually(t, svc.Ready, 60*time.Second, 50*time.Millisecond, "the meter reads both tenant clusters")
	m := &meter{svc: svc}
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-done, "the meter stops cleanly, its last records and checkpoint written")
		})
	}
	t.Cleanup(m.stop)
	return m
}

// waitFor waits until the meter's account of the VMI with uid satisfies ok.
func (m *meter) waitFor(t *testing.T, what, uid string, ok func(metering.VMIState) bool) {
	require.Eventually(t, func() bool {
		for _, st := range m.svc.States() {
			if st.UID == uid {
				return ok(st)
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, what)
}

func started(at time.Time) func(metering.VMIState) bool {
	return func(st metering.VMIState) bool { return st.Start.Equal(at) }
}

func ended(at time.Time) func(metering.VMIState) bool {
	return func(st metering.VMIState) bool { return st.End.Equal(at) && st.EndObserved }
}

// records reads every record the store holds.
func records(t *testing.T, dir string) []metering.Event {
	paths, err := filepath.Glob(filepath.Join(dir, "events", "*.jsonl"))
	require.NoError(t, err)
	var out []metering.Event
	for _, p := range paths {
		f, err := os.Open(p)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e metering.Event
			require.NoError(t, json.Unmarshal(sc.Bytes(), &e), p)
			out = append(out, e)
		}
		f.Close()
	}
	return out
}

// TestMeterExactAcrossRestarts drives the VMIs of two tenants (five jobs: single-GPU replicas,
// Parakeet, a full H200 node, a two-node replica) through Running, a VM restart (a new VMI),
// ends with and without a terminal phase, and deletions while the meter is down, restarting the
// meter twice in the middle. Every VMI's GPU-seconds in the records are exact to the second
// against the times the test wrote into the VMIs (and, for a VMI deleted without a terminal
// phase, the deletion time the API server stamped), no record id appears twice, no record spans
// two hours, and every record carries the rendered objects' billing labels.
func TestMeterExactAcrossRestarts(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	w := &world{t: t, ctx: ctx, vmis: rendered(t, rendertest.Acme(), rendertest.Globex())}
	require.NoError(t, env.EnsureNamespace(ctx, clusters.ArgoCDNamespace))
	for _, tenant := range []string{"acme", "globex"} {
		require.NoError(t, env.EnsureNamespace(ctx, tenant))
		s, err := argocd.ClusterSecret(clusters.ArgoCDNamespace, tenant, env.Config)
		require.NoError(t, err)
		require.NoError(t, env.Client.Create(ctx, s))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	}
	const (
		qwen0, qwen1, transcribe = "acme/qwen-r0-n0", "acme/qwen-r1-n0", "acme/transcribe-r0-n0"
		llama, kimi0, kimi1      = "globex/llama-r0-n0", "globex/kimi-r0-n0", "globex/kimi-r0-n1"
	)
	require.Len(t, w.vmis, 6)
	// The test's times lie in the past of the API server's clock, which stamps deletions: the
	// last part of the test moves the meter's clock to the API server's time.
	t0 := time.Now().UTC().Truncate(time.Hour).Add(-6 * time.Hour)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	c := &clock{t: t0}
	dir := t.TempDir()
	uid := map[string]string{}
	for key := range w.vmis {
		uid[key] = w.create(key)
	}

	// Meter A: every VM starts; one VM restarts.
	a := startMeter(t, dir, c)
	c.Set(at(41 * time.Minute))
	w.phases(qwen0, transition{kubevirtv1.Scheduled, at(5 * time.Minute)}, transition{kubevirtv1.Running, at(6*time.Minute + 30*time.Second)})
	w.phases(qwen1, transition{kubevirtv1.Running, at(10 * time.Minute)})
	w.phases(transcribe, transition{kubevirtv1.Running, at(20 * time.Minute)})
	w.phases(llama, transition{kubevirtv1.Running, at(30 * time.Minute)})
	w.phases(kimi0, transition{kubevirtv1.Running, at(40 * time.Minute)})
	w.phases(kimi1, transition{kubevirtv1.Running, at(40 * time.Minute)})
	for key, start := range map[string]time.Duration{qwen0: 5 * time.Minute, qwen1: 10 * time.Minute, transcribe: 20 * time.Minute,
		llama: 30 * time.Minute, kimi0: 40 * time.Minute, kimi1: 40 * time.Minute} {
		a.waitFor(t, key+" starts", uid[key], started(at(start)))
	}
	require.NoError(t, a.svc.Flush(ctx))
	w.held(qwen0, qwen1, transcribe, llama, kimi0, kimi1)

	c.Set(at(time.Hour + 16*time.Minute + 30*time.Second))
	w.phases(qwen0, transition{kubevirtv1.Succeeded, at(time.Hour + 15*time.Minute)})
	oldQwen0 := uid[qwen0]
	w.remove(qwen0)
	w.gone(qwen0) // released once its end is written: the VM may restart
	uid[qwen0] = w.create(qwen0)
	w.phases(qwen0, transition{kubevirtv1.Running, at(time.Hour + 16*time.Minute)})
	a.waitFor(t, "the restarted qwen0 starts", uid[qwen0], started(at(time.Hour+16*time.Minute)))
	c.Set(at(time.Hour + 30*time.Minute))
	a.stop()

	// While no meter runs: transcribe fails and is deleted; the meter's finalizer keeps it.
	w.phases(transcribe, transition{kubevirtv1.Failed, at(2*time.Hour + 10*time.Minute)})
	w.remove(transcribe)

	// Meter B: reads transcribe's end and lets it go; qwen1 ends while it watches.
	c.Set(at(3*time.Hour + 5*time.Minute))
	b := startMeter(t, dir, c)
	w.gone(transcribe)
	c.Set(at(3*time.Hour + 20*time.Minute))
	w.phases(qwen1, transition{kubevirtv1.Succeeded, at(3*time.Hour + 20*time.Minute)})
	w.remove(qwen1)
	w.gone(qwen1)
	c.Set(at(3*time.Hour + 50*time.Minute))
	b.stop()

	// While no meter runs: llama is deleted without a terminal phase (a force deletion).
	deleted := w.remove(llama)
	require.False(t, deleted.IsZero(), "the meter's finalizer holds the deleted VMI")

	// Meter C, on the API server's clock: llama ends at its deletion; the rest end now.
	c.Set(time.Now().UTC().Truncate(time.Second))
	cm := startMeter(t, dir, c)
	w.gone(llama)
	end := time.Now().UTC().Truncate(time.Second)
	c.Set(end)
	for _, key := range []string{qwen0, kimi0, kimi1} {
		w.phases(key, transition{kubevirtv1.Succeeded, end})
		w.remove(key)
		w.gone(key)
	}
	c.Set(end.Add(2 * time.Minute))
	// The last deletions reach the meter's cache a moment after the API server: flush until the
	// meter has seen every VMI go and recorded it.
	require.Eventually(t, func() bool {
		require.NoError(t, cm.svc.Flush(ctx))
		return len(cm.svc.States()) == 0
	}, 30*time.Second, 50*time.Millisecond, "every VMI is gone and fully recorded")

	// The records.
	want := map[string]int64{
		oldQwen0:        1 * int64(at(time.Hour+15*time.Minute).Sub(at(5*time.Minute))/time.Second),
		uid[qwen0]:      1 * int64(end.Sub(at(time.Hour+16*time.Minute))/time.Second),
		uid[qwen1]:      1 * int64(at(3*time.Hour+20*time.Minute).Sub(at(10*time.Minute))/time.Second),
		uid[transcribe]: 1 * int64(at(2*time.Hour+10*time.Minute).Sub(at(20*time.Minute))/time.Second),
		uid[llama]:      8 * int64(deleted.Sub(at(30*time.Minute))/time.Second),
		uid[kimi0]:      8 * int64(end.Sub(at(40*time.Minute))/time.Second),
		uid[kimi1]:      8 * int64(end.Sub(at(40*time.Minute))/time.Second),
	}
	recs := records(t, dir)
	got := map[string]int64{}
	ids := map[string]bool{}
	for _, e := range recs {
		require.NoError(t, e.Check())
		assert.False(t, ids[e.ID], "record id %s written twice", e.ID)
		ids[e.ID] = true
		assert.Equal(t, e.Time.Truncate(time.Hour), e.Data.PeriodEnd.Add(-time.Second).Truncate(time.Hour), "a record lies within one hour: %+v", e)
		assert.Equal(t, e.Data.Seconds*int64(e.Data.GPUs), e.Data.GPUSeconds)
		got[e.Data.VMI] += e.Data.GPUSeconds
	}
	assert.Equal(t, want, got, "GPU-seconds per VMI, exact to the second")

	// Every record carries the labels the rendered objects carry.
	labels := map[string]metering.Labels{
		"qwen":       {Tenant: "acme", Tier: "h100-dedicated", Job: "qwen", NodeType: rendertest.H100},
		"transcribe": {Tenant: "acme", Tier: "h100-dedicated", Job: "transcribe", NodeType: rendertest.H100},
		"llama":      {Tenant: "globex", Tier: "h200-dedicated", Job: "llama", NodeType: rendertest.H200},
		"kimi":       {Tenant: "globex", Tier: "h200-dedicated", Job: "kimi", NodeType: rendertest.H200},
	}
	for _, e := range recs {
		l := e.Data.Labels
		vmi := w.vmis[l.Tenant+"/"+l.VM]
		require.NotNil(t, vmi, l.VM)
		wantL := labels[l.Job]
		wantL.Model, wantL.Replica, wantL.VM = vmi.Annotations["inferplane.io/model"], vmi.Labels["inferplane.io/replica"], vmi.Name
		assert.Equal(t, wantL, l)
		assert.NotEmpty(t, l.Model)
		assert.Equal(t, l.Tenant, e.Subject)
	}

	// The usage query and the export agree with the records.
	rep := cm.svc.Usage("globex", t0, end.Add(time.Hour), metering.ByJob)
	assert.Equal(t, []metering.Group{
		{Key: "kimi", Usage: metering.Usage{GPUSeconds: uint64(want[uid[kimi0]] + want[uid[kimi1]])}},
		{Key: "llama", Usage: metering.Usage{GPUSeconds: uint64(want[uid[llama]])}},
	}, rep.Groups)
	assert.Zero(t, rep.OpenGPUSeconds)
	srv := httptest.NewServer(cm.svc.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + metering.EventsPath + "?to=" + end.Add(time.Hour).Format(time.RFC3339))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, len(recs), strings.Count(string(body), "\n"))
	cm.stop()
}
