package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
)

func report(s guestlog.Status) *AgentReport { return &AgentReport{Status: s, At: t3} }

// What the agent in a running VM reports turns into the replica's stage and reason, more
// precise than the VMI's phase: the image pull and the download with their progress, the
// load with the server's words, and a crash loop with its exit, run time, restarts and last
// line, which wins even over a /health that passed once.
func TestStagesFromTheAgent(t *testing.T) {
	job := Job{Tenant: "acme", Name: "chat", Replicas: 1, NodesPerReplica: 1}
	vms := []kubevirtv1.VirtualMachine{vm("chat-r0-n0", kubevirtv1.VirtualMachineStatusRunning)}
	bound := []corev1.PersistentVolumeClaim{pvc("chat-r0-n0-model-cache", corev1.ClaimBound)}
	crash := guestlog.Status{Stage: guestlog.StageCrashLooping, Since: t2, Restarts: 5, LastExit: &guestlog.Exit{Code: 1, After: 42 * time.Second, At: t2,
		LastLines: []string{"Loading safetensors checkpoint shards: 100%", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}}}
	cases := []struct {
		name   string
		status guestlog.Status
		cond   kubevirtv1.VirtualMachineInstanceCondition
		stage  Stage
		since  time.Time
		reason string
	}{
		{"starting", guestlog.Status{Stage: guestlog.StageStarting, Since: t2}, notReady, StageBooting, t2,
			"running on gpu-node-7; the agent is starting the model server"},
		{"pulling the image", guestlog.Status{Stage: guestlog.StagePullingImage, Since: t2, Detail: "vllm/vllm-openai:v0.11.0",
			Progress: &guestlog.Progress{Done: 3_200_000_000, Total: 9_800_000_000, Unit: "bytes"}}, notReady, StagePullingImage, t2,
			"pulling the model server's image (3.2 GB of 9.8 GB, 32%): vllm/vllm-openai:v0.11.0"},
		{"downloading the weights", guestlog.Status{Stage: guestlog.StageDownloadingWeights, Since: t2,
			Progress: &guestlog.Progress{Done: 3, Total: 17, Unit: "files"}}, notReady, StageDownloadingWeights, t2,
			"downloading the weights (3 of 17 files)"},
		{"loading", guestlog.Status{Stage: guestlog.StageLoadingModel, Since: t3, Detail: "Loading safetensors checkpoint shards: 3/8", Restarts: 1},
			notReady, StageLoadingModel, t3, "loading the model: Loading safetensors checkpoint shards: 3/8; 1 restart so far"},
		{"up, /health not passing yet", guestlog.Status{Stage: guestlog.StageServing, Since: t3}, notReady, StageLoadingModel, t2,
			"running on gpu-node-7; the agent says the model server is up, but /health does not pass yet: HTTP probe failed with statuscode: 503"},
		{"crash-looping", crash, notReady, StageCrashLooping, t2,
			`exit 1 after 42 s, 5 restarts; last line: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"`},
		{"crash-looping though /health passed once", crash, ready, StageCrashLooping, t2, `exit 1 after 42 s, 5 restarts; last line:`},
		{"an older agent's report of a ready node", guestlog.Status{Stage: guestlog.StageLoadingModel, Since: t1}, ready, StageServing, t3, "in the gateway's rotation"},
		{"a stage this reader does not know", guestlog.Status{Stage: "defragmenting", Since: t2}, notReady, StageLoadingModel, t2,
			"/health does not pass yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := Observed{App: synced(), VMs: vms, PVCs: bound, Gateway: inRotation,
				VMIs:  []kubevirtv1.VirtualMachineInstance{vmi("chat-r0-n0", true, kubevirtv1.Running, tc.cond)},
				Agent: map[string]*AgentReport{"chat-r0-n0": report(tc.status)}}
			if tc.cond.Status != corev1.ConditionTrue {
				obs.Gateway = &Rotation{Known: true, Status: "unhealthy", Total: 1, InRotation: map[string]bool{}}
			}
			st := Compute(job, obs)
			r := st.Replicas[0]
			assert.Equal(t, tc.stage, r.Stage, r.Reason)
			assert.Equal(t, tc.since, r.Since)
			assert.Contains(t, r.Reason, tc.reason)
			assert.Equal(t, tc.stage, st.Stage, "a one-replica job is its replica")
			assert.Equal(t, tc.status, r.Nodes[0].Agent.Status, "the report is shown with the node")
		})
	}
}

// A job is as ready as its least ready replica, and a crash loop is less ready than anything
// but a failure.
func TestCrashLoopingRanks(t *testing.T) {
	assert.Less(t, StageFailed.Rank(), StageCrashLooping.Rank())
	assert.Less(t, StageCrashLooping.Rank(), StageUnknown.Rank())
	for _, s := range []Stage{StageBooting, StagePullingImage, StageDownloadingWeights, StageLoadingModel, StageServing} {
		assert.Less(t, StageCrashLooping.Rank(), s.Rank(), s)
	}
	assert.Less(t, StageBooting.Rank(), StagePullingImage.Rank())
	assert.Less(t, StagePullingImage.Rank(), StageDownloadingWeights.Rank())
	assert.Less(t, StageDownloadingWeights.Rank(), StageLoadingModel.Rank())
}

// The agent is read only where it changes the answer: running VMs of replicas the gateway
// does not serve.
func TestAgentWanted(t *testing.T) {
	job := Job{Tenant: "acme", Name: "chat", Replicas: 3, NodesPerReplica: 2}
	vmis := []kubevirtv1.VirtualMachineInstance{
		vmi("chat-r0-n0", true, kubevirtv1.Running, ready), vmi("chat-r0-n1", false, kubevirtv1.Running),
		vmi("chat-r1-n0", true, kubevirtv1.Running, notReady), vmi("chat-r1-n1", false, kubevirtv1.Scheduled),
		vmi("chat-r2-n0", true, kubevirtv1.Scheduled),
	}
	named := &Rotation{Known: true, Ready: 1, Total: 3, InRotation: map[string]bool{"chat-r0-n0": true}}
	assert.Equal(t, []string{"chat-r1-n0"}, AgentWanted(job, Observed{VMIs: vmis, Gateway: named}))
	counted := &Rotation{Known: true, Ready: 1, Total: 3}
	assert.Equal(t, []string{"chat-r1-n0"}, AgentWanted(job, Observed{VMIs: vmis, Gateway: counted}),
		"without names, a replica whose serving nodes are all ready is taken to be in rotation")
	assert.Equal(t, []string{"chat-r0-n0", "chat-r0-n1", "chat-r1-n0"}, AgentWanted(job, Observed{VMIs: vmis}),
		"without the gateway, every running VM")
	assert.Empty(t, AgentWanted(job, Observed{}))
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		s    guestlog.Status
		want string
	}{
		{guestlog.Status{Stage: guestlog.StageCrashLooping, Restarts: 1}, "the model server keeps exiting, 1 restart"},
		{guestlog.Status{Stage: guestlog.StageCrashLooping, Restarts: 2, LastExit: &guestlog.Exit{Code: 137, After: 3*time.Minute + 12*time.Second}},
			"exit 137 after 3 min 12 s, 2 restarts"},
		{guestlog.Status{Stage: guestlog.StageCrashLooping, Restarts: 12, LastExit: &guestlog.Exit{Code: 1, After: 2377 * time.Millisecond, LastLines: []string{"RuntimeError: Engine core initialization failed."}},
			Detail: "exited with code 1 after 2.377s: the GPU ran out of memory (CUDA out of memory, trying to allocate 1.96 GiB); restarting in 1s (10 exits in a row)"},
			`exit 1 after 2 s, 12 restarts; last line: "RuntimeError: Engine core initialization failed."; the GPU ran out of memory (CUDA out of memory, trying to allocate 1.96 GiB); restarting in 1s (10 exits in a row)`},
		{guestlog.Status{Stage: guestlog.StageCrashLooping, Restarts: 1, LastExit: &guestlog.Exit{Code: 137, After: time.Minute},
			Detail: "exited with code 137 after 1m0s; restarting in 5s (1 exits in a row)"}, "exit 137 after 1 min 0 s, 1 restart; restarting in 5s (1 exits in a row)"},
		{guestlog.Status{Stage: guestlog.StageCrashLooping, Restarts: 1, LastExit: &guestlog.Exit{Code: 2}, Detail: "waiting"}, "exit 2 after 0 s, 1 restart; waiting"},
		{guestlog.Status{Stage: guestlog.StagePullingImage, Progress: &guestlog.Progress{Done: 512_000_000, Unit: "bytes"}}, "pulling the model server's image (512.0 MB)"},
		{guestlog.Status{Stage: guestlog.StageServing, Restarts: 3}, "the model server is up"},
	} {
		assert.Equal(t, tc.want, Describe(&tc.s))
	}
	long := string(make([]byte, 300))
	assert.Equal(t, "é"+long[:198]+"…", clip("é"+long, 200), "at most 200 bytes, cut on a rune boundary")
	assert.Equal(t, "abc…", clip("abcé", 4), "never inside a rune")
}
