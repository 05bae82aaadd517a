package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/joblogs"
)

// The whole log path once, end to end, on the real parts that run here (logsWorld): what the
// agent writes to a VM's console reaches a real kube-apiserver's pods/log (kubectl's path:
// the API server dials the kubelet STAND-IN at the Node's InternalIP over TLS, checked
// against --kubelet-certificate-authority), the real product API reads it from there, and
// `inferplane jobs logs -f` (the CLI's command, signed in to the API) shows each line as it
// is appended to the console; `jobs detail` shows the agent's stages, and a crash record
// turns the stage to crash-looping with the last line (exit status 4). The operator's files
// path (jobs logs and jobs detail with the kubeconfig) reads the same. The console's writer is
// a stand-in for the inference agent, so that the API server's stop falls between two lines;
// TestJobLogsRealAgentEndToEndKubeletStandIn runs the real agent.
func TestJobLogsEndToEndKubeletStandIn(t *testing.T) {
	w := startLogsWorld(t, false)
	ctx := context.Background()
	w.writer.raw("[    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org)", "Cloud-init v. 22.4.2 running 'modules:final'")
	w.writer.status(guestlog.Status{Stage: guestlog.StageDownloadingWeights, Since: time.Now(),
		Detail: "mistralai/Mistral-Small-24B-Instruct-2501", Progress: &guestlog.Progress{Done: 12_400_000_000, Total: 48_000_000_000, Unit: "bytes"}})
	w.writer.line(guestlog.Stderr, "INFO 12-03 07:00:01 [api_server.py:1] vLLM API server version 0.11.0")

	// kubectl's path first: the API server's pods/log serves the console, records and all.
	kc, err := kubernetes.NewForConfig(w.env.Config)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, err := kc.CoreV1().Pods("acme").GetLogs(w.pod, &corev1.PodLogOptions{Container: joblogs.Container}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), "vLLM API server version 0.11.0") && strings.Contains(string(b), "Linux version")
	}, 30*time.Second, 50*time.Millisecond, "pods/log through the API server reaches the kubelet stand-in; it asked: %v", w.kubelet.Requests())

	// The stage from the agent, through the API.
	out, errOut, err := execCLI(ctx, "jobs", "detail", "acme/"+logsJob)
	assert.Equal(t, exitOnItsWay, exitCode(err), "%v\n%s%s", err, out, errOut)
	assert.Contains(t, out, "Stage:      downloading-weights")
	assert.Contains(t, out, "downloading the weights (12.4 GB of 48.0 GB, 25%): mistralai/Mistral-Small-24B-Instruct-2501")

	// jobs logs -f through the API: each line as it is appended.
	live, stop := startCLI("jobs", "logs", "acme/"+logsJob, "-f")
	live.waitFor(t, "[r0/n0] INFO 12-03 07:00:01 [api_server.py:1] vLLM API server version 0.11.0", time.Minute)
	live.waitFor(t, "[r0/n0] (status) downloading-weights: downloading the weights (12.4 GB of 48.0 GB, 25%)", time.Minute)
	w.writer.status(guestlog.Status{Stage: guestlog.StageLoadingModel, Since: time.Now(), Detail: "Loading safetensors checkpoint shards: 3/8"})
	w.writer.line(guestlog.Stderr, "Loading safetensors checkpoint shards:  38% Completed | 3/8 [00:04<00:07,  1.43s/it]")
	live.waitFor(t, "[r0/n0] Loading safetensors checkpoint shards:  38% Completed | 3/8", 30*time.Second)

	// The tenant cluster's API server goes away mid-follow and comes back: the follow resumes
	// where it stopped (at the second of its last line) and shows each line once.
	require.NoError(t, w.env.StopAPIServer())
	w.writer.line(guestlog.Stderr, "Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:06<00:05,  1.41s/it]")
	w.writer.line(guestlog.Stderr, "Loading safetensors checkpoint shards:  62% Completed | 5/8 [00:07<00:04,  1.40s/it]")
	require.NoError(t, w.env.StartAPIServer())
	live.waitFor(t, "[r0/n0] Loading safetensors checkpoint shards:  62% Completed | 5/8", 2*time.Minute)
	w.writer.raw("[   97.211044] nvidia-uvm: Loaded the UVM driver, major device number 236.")
	w.writer.line(guestlog.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB")
	w.writer.line(guestlog.Agent, "the model server exited with code 1 after 42s: the GPU ran out of memory (CUDA out of memory, trying to allocate 2.00 GiB): the model and its KV cache do not fit the GPUs with these arguments; restarting it in 10s")
	now := time.Now()
	w.writer.status(guestlog.Status{Stage: guestlog.StageCrashLooping, Since: now, Restarts: 1, LastExit: &guestlog.Exit{Code: 1, After: 42 * time.Second, At: now,
		LastLines: []string{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB"}}})
	live.waitFor(t, "[r0/n0] (agent) the model server exited with code 1 after 42s: the GPU ran out of memory (CUDA out of memory, trying to allocate 2.00 GiB): the model and its KV cache do not fit the GPUs with these arguments; restarting it in 10s", 30*time.Second)
	live.waitFor(t, `[r0/n0] (status) crash-looping: exit 1 after 42 s, 1 restart; last line: "torch.OutOfMemoryError: CUDA out of memory.`, 30*time.Second)
	err, errOut = stop()
	require.NoError(t, err, errOut)
	followed := live.String()
	assert.NotContains(t, followed, "Linux version", "the kernel's lines are no records")
	for _, once := range []string{"vLLM API server version", "38% Completed", "50% Completed", "62% Completed"} {
		assert.Equal(t, 1, strings.Count(followed, once), "no line twice: %q in\n%s", once, followed)
	}
	assert.Contains(t, followed, "(notice) the console log stream of mistral-small-r0-n0 was cut (unexpected EOF); resuming where it stopped")
	t.Logf("inferplane jobs logs acme/%s -f (through the product API):\n%s", logsJob, followed)

	// The crash in jobs detail, through the API (whose reads of the agent's status stand a
	// few seconds: joblogs.StatusCache).
	require.Eventually(t, func() bool {
		out, errOut, err = execCLI(ctx, "jobs", "detail", "acme/"+logsJob)
		return exitCode(err) == exitFailed
	}, 30*time.Second, 500*time.Millisecond, "jobs detail says crash-looping (exit 4); last:\n%s%s", out, errOut)
	assert.Contains(t, out, "Stage:      crash-looping")
	assert.Contains(t, out, `Reason:     exit 1 after 42 s, 1 restart; last line: "torch.OutOfMemoryError: CUDA out of memory.`)
	t.Logf("inferplane jobs detail acme/%s (through the product API):\n%s", logsJob, out)

	// The operator's path: the files and the kubeconfig, no API.
	out, err = w.tree.run(t, "jobs", "logs", "acme/"+logsJob, "--kubeconfig", w.kc, "--tail", "-1", "--search", "outofmemory")
	require.NoError(t, err, out)
	assert.Contains(t, out, "[r0/n0] torch.OutOfMemoryError: CUDA out of memory.")
	assert.NotContains(t, out, "vLLM API server version", "--search keeps the matching lines")
	out, err = w.tree.run(t, "jobs", "detail", "acme/"+logsJob, "--kubeconfig", w.kc, "--server", "http://"+closedAddr(t))
	assert.Equal(t, exitFailed, exitCode(err), "%v\n%s", err, out)
	assert.Contains(t, out, "crash-looping")
	assert.Contains(t, out, `exit 1 after 42 s, 1 restart; last line: "torch.OutOfMemoryError`)

	// A user of another tenant is refused.
	_, _, err = execCLI(ctx, "jobs", "logs", "globex/llama-3-3-70b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "403")
}
