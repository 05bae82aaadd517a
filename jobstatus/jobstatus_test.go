package jobstatus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/jobstatus"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

// tenantPlan is a planned tenant with jobs of the given replicas (and nodes per replica).
func tenantPlan(name string, spec v1alpha1.TenantSpec, jobs ...plan.JobPlan) *plan.TenantPlan {
	tp := &plan.TenantPlan{Tenant: v1alpha1.Tenant{Spec: spec}, Jobs: jobs}
	tp.Tenant.Name = name
	return tp
}

func jobPlan(name string, replicas, nodes int32) plan.JobPlan {
	jp := plan.JobPlan{NodesPerReplica: nodes}
	jp.Job.Name, jp.Job.Spec.Replicas = name, replicas
	return jp
}

func TestTenant(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec v1alpha1.TenantSpec
		want cluster.Tenant
	}{
		{"defaults", v1alpha1.TenantSpec{},
			cluster.Tenant{Name: "acme", Cluster: "acme", Namespace: "acme", ArgoCDNamespace: "argocd"}},
		{"its own destination and Argo CD namespace", v1alpha1.TenantSpec{ArgoCD: v1alpha1.TenantArgoCD{Destination: "vc-acme", Namespace: "gitops"}},
			cluster.Tenant{Name: "acme", Cluster: "vc-acme", Namespace: "acme", ArgoCDNamespace: "gitops"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, jobstatus.Tenant(tenantPlan("acme", tc.spec)))
		})
	}
}

func TestJobs(t *testing.T) {
	tp := tenantPlan("acme", v1alpha1.TenantSpec{}, jobPlan("chat", 2, 1), jobPlan("big", 1, 2))
	for _, tc := range []struct {
		only string
		want []lifecycle.Job
	}{
		{"", []lifecycle.Job{{Tenant: "acme", Name: "chat", Replicas: 2, NodesPerReplica: 1}, {Tenant: "acme", Name: "big", Replicas: 1, NodesPerReplica: 2}}},
		{"big", []lifecycle.Job{{Tenant: "acme", Name: "big", Replicas: 1, NodesPerReplica: 2}}},
		{"none", nil},
	} {
		t.Run(tc.only, func(t *testing.T) { assert.Equal(t, tc.want, jobstatus.Jobs(tp, tc.only)) })
	}
}

func TestGatewayView(t *testing.T) {
	chat := &lifecycle.Rotation{Known: true, Ready: 1, Total: 2}
	for _, tc := range []struct {
		name    string
		rot     map[string]*lifecycle.Rotation
		err     error
		want    *lifecycle.Rotation
		wantErr string
	}{
		{"the gateway's endpoint", map[string]*lifecycle.Rotation{"chat": chat}, nil, chat, ""},
		{"no such endpoint yet", map[string]*lifecycle.Rotation{"other": chat}, nil, &lifecycle.Rotation{}, ""},
		{"not asked", nil, errors.New("gateway http://127.0.0.1:1: refused"), nil, "gateway http://127.0.0.1:1: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gotErr := jobstatus.GatewayView(tc.rot, tc.err, "chat")
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantErr, gotErr)
		})
	}
}

func TestUnknown(t *testing.T) {
	st := jobstatus.Unknown(lifecycle.Job{Tenant: "acme", Name: "big", Replicas: 2, NodesPerReplica: 2}, "no host cluster")
	assert.Equal(t, lifecycle.StageUnknown, st.Stage)
	assert.Equal(t, "no host cluster", st.Reason)
	require.Len(t, st.Replicas, 2)
	for r, rs := range st.Replicas {
		assert.Equal(t, lifecycle.StageUnknown, rs.Stage)
		assert.Equal(t, []lifecycle.NodeInfo{{VM: fmt.Sprintf("big-r%d-n0", r)}, {VM: fmt.Sprintf("big-r%d-n1", r)}}, rs.Nodes)
	}
	none := jobstatus.Unknown(lifecycle.Job{Tenant: "acme", Name: "chat"}, "why")
	assert.NotNil(t, none.Replicas, "an empty list, not null, in JSON")
}

func TestSettled(t *testing.T) {
	want := map[lifecycle.Stage]bool{lifecycle.StageServing: true, lifecycle.StageFailed: true, lifecycle.StageCrashLooping: true}
	for _, s := range lifecycle.Stages() {
		assert.Equal(t, want[s], jobstatus.Settled(s), s)
	}
}

// The sources of Read are in memory here: what the clusters hold is read from a real API
// server in lifecycle/cluster's tests; this one checks how Read joins the three sources.
type objects struct {
	objs *cluster.Objects
	err  error
}

func (o objects) Objects(context.Context, cluster.Tenant) (*cluster.Objects, error) {
	return o.objs, o.err
}

type rotations struct {
	rot   map[string]*lifecycle.Rotation
	err   error
	asked *int
}

func (g rotations) Rotations(context.Context, string) (map[string]*lifecycle.Rotation, error) {
	*g.asked++
	return g.rot, g.err
}

// logs reaches no cluster's logs: it counts the tenants asked for.
type logs struct{ asked *[]string }

func (l logs) GuestLogs(_ context.Context, t cluster.Tenant) (joblogs.Cluster, error) {
	*l.asked = append(*l.asked, t.Name)
	return nil, errors.New("no console logs here")
}

func TestReadJoinsClustersGatewayAndLogsInMemory(t *testing.T) {
	tp := tenantPlan("acme", v1alpha1.TenantSpec{}, jobPlan("chat", 1, 1), jobPlan("asr", 1, 1))
	app := func(job string) *lifecycle.Application {
		a := &lifecycle.Application{Status: lifecycle.ApplicationStatus{Sync: lifecycle.SyncStatus{Status: lifecycle.SyncOutOfSync}}}
		a.Name = "acme-" + job
		return a
	}
	running := func(job string) kubevirtv1.VirtualMachineInstance {
		vmi := kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running}}
		vmi.Name, vmi.Labels = job+"-r0-n0", map[string]string{v1alpha1.LabelJob: job}
		return vmi
	}
	// Each job's VM runs and no gateway has it: its agent's report would count.
	objs := &cluster.Objects{Apps: map[string]*lifecycle.Application{"chat": app("chat"), "asr": app("asr")},
		VMIs: []kubevirtv1.VirtualMachineInstance{running("chat"), running("asr")}}
	for _, tc := range []struct {
		name       string
		cluster    objects
		gw         rotations
		only       string
		wantJobs   []string
		wantErr    string
		wantAsked  int
		wantGwErr  string
		wantAgents []string
	}{
		{name: "every job: the tenant's logs are reached once", cluster: objects{objs: objs}, gw: rotations{rot: map[string]*lifecycle.Rotation{}},
			wantJobs: []string{"chat", "asr"}, wantAsked: 1, wantAgents: []string{"acme"}},
		{name: "one job", cluster: objects{objs: objs}, gw: rotations{}, only: "asr",
			wantJobs: []string{"asr"}, wantAsked: 1, wantAgents: []string{"acme"}},
		{name: "the gateway does not answer", cluster: objects{objs: objs}, gw: rotations{err: errors.New("refused")}, only: "chat",
			wantJobs: []string{"chat"}, wantAsked: 1, wantGwErr: "refused", wantAgents: []string{"acme"}},
		{name: "no VM runs: no log is read", cluster: objects{objs: &cluster.Objects{Apps: objs.Apps}}, gw: rotations{},
			wantJobs: []string{"chat", "asr"}, wantAsked: 1},
		{name: "the clusters cannot be read: the gateway is not asked", cluster: objects{err: errors.New("no kubeconfig")},
			gw: rotations{}, wantErr: "no kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked, agentsAsked := 0, []string(nil)
			tc.gw.asked = &asked
			r := jobstatus.Reader{Cluster: tc.cluster, Gateway: tc.gw, Logs: logs{&agentsAsked}}
			sts, err := r.Read(t.Context(), tp, tc.only)
			assert.Equal(t, tc.wantAsked, asked, "gateway calls")
			assert.Equal(t, tc.wantAgents, agentsAsked)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var jobs []string
			for _, st := range sts {
				jobs = append(jobs, st.Job)
				assert.Equal(t, lifecycle.StageSyncing, st.Stage, "the Application is OutOfSync")
				assert.Equal(t, tc.wantGwErr, st.GatewayError)
				assert.Equal(t, tc.wantGwErr == "", st.Gateway != nil)
			}
			assert.Equal(t, tc.wantJobs, jobs)
		})
	}
	t.Run("without logs", func(t *testing.T) {
		asked := 0
		sts, err := jobstatus.Reader{Cluster: objects{objs: objs}, Gateway: rotations{asked: &asked}}.Read(t.Context(), tp, "chat")
		require.NoError(t, err)
		require.Len(t, sts, 1)
	})
}

// reading is one answer of a job's read in TestWait.
type reading struct {
	stage lifecycle.Stage
	err   error
}

func TestWait(t *testing.T) {
	failed := errors.New("403 forbidden")
	for _, tc := range []struct {
		name      string
		readings  []reading // the last repeats
		timeout   time.Duration
		want      lifecycle.Stage
		wantErr   error
		wantSaid  []string
		wantReads int // at least
	}{
		{name: "until it serves, saying each change once", timeout: time.Minute,
			readings: []reading{{stage: lifecycle.StageSyncing}, {stage: lifecycle.StageSyncing}, {stage: lifecycle.StageBooting}, {stage: lifecycle.StageServing}},
			want:     lifecycle.StageServing, wantSaid: []string{"syncing", "booting", "serving"}, wantReads: 4},
		{name: "a crash loop settles", timeout: time.Minute,
			readings: []reading{{stage: lifecycle.StageLoadingModel}, {stage: lifecycle.StageCrashLooping}},
			want:     lifecycle.StageCrashLooping, wantSaid: []string{"loading-model", "crash-looping"}, wantReads: 2},
		{name: "a read's error stops it", timeout: time.Minute,
			readings: []reading{{stage: lifecycle.StageBooting}, {err: failed}},
			want:     "", wantErr: failed, wantSaid: []string{"booting"}, wantReads: 2},
		{name: "the timeout: read once more without it", timeout: 30 * time.Millisecond,
			readings: []reading{{stage: lifecycle.StageLoadingModel}},
			want:     lifecycle.StageLoadingModel, wantSaid: []string{"loading-model"}, wantReads: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			read := func(context.Context) (reading, error) {
				r := tc.readings[min(reads, len(tc.readings)-1)]
				reads++
				return r, r.err
			}
			var said []string
			got, err := jobstatus.Wait(t.Context(), time.Millisecond, tc.timeout, read,
				func(r reading) (lifecycle.Stage, string) { return r.stage, "" },
				func(r reading) { said = append(said, string(r.stage)) })
			assert.Equal(t, tc.want, got.stage)
			assert.ErrorIs(t, err, tc.wantErr)
			if tc.wantErr == nil {
				assert.NoError(t, err)
			}
			assert.Equal(t, tc.wantSaid, said)
			assert.GreaterOrEqual(t, reads, tc.wantReads)
		})
	}
	t.Run("the caller's context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := jobstatus.Wait(ctx, time.Millisecond, time.Minute,
			func(ctx context.Context) (reading, error) { return reading{stage: lifecycle.StageBooting}, ctx.Err() },
			func(r reading) (lifecycle.Stage, string) { return r.stage, "" }, func(reading) {})
		assert.ErrorIs(t, err, context.Canceled)
	})
}
