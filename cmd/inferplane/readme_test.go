package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/lifecycletest"
)

// apiKeyRE finds API keys, which are kept out of the test log.
var apiKeyRE = regexp.MustCompile(`ipk_[A-Za-z0-9_-]+`)

// readmeWalkthrough returns the commands of README's customer walkthrough block.
func readmeWalkthrough(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(data), "<!-- customer walkthrough:")
	require.True(t, ok, "README has no customer walkthrough block")
	_, rest, ok = strings.Cut(rest, "```sh\n")
	require.True(t, ok)
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// shellWords splits a README command line as a shell would for these simple lines: words,
// double-quoted words, and a final "> FILE" redirect.
func shellWords(t *testing.T, line string) (args []string, redirect string) {
	t.Helper()
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	require.False(t, quoted, "unbalanced quotes in %q", line)
	if inWord {
		args = append(args, cur.String())
	}
	if n := len(args); n >= 2 && args[n-2] == ">" {
		args, redirect = args[:n-2], args[n-1]
	}
	return args, redirect
}

// runLine runs one README line: `inferplane ...` in-process (stdout to the redirect file when
// there is one), or `export NAME=...` with the value the test chose for NAME.
func runLine(t *testing.T, line string, env map[string]string) (string, error) {
	t.Helper()
	if assignment, ok := strings.CutPrefix(line, "export "); ok {
		name, _, _ := strings.Cut(assignment, "=")
		v, ok := env[name]
		require.True(t, ok, "the walkthrough exports %s, which the test does not know", name)
		t.Setenv(name, v)
		return "", nil
	}
	args, redirect := shellWords(t, line)
	require.Equal(t, "inferplane", args[0], line)
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(args[1:])
	err := root.ExecuteContext(context.Background())
	if redirect != "" {
		require.NoError(t, os.WriteFile(redirect, out.Bytes(), 0o600))
	}
	t.Logf("$ %s\n%s", line, apiKeyRE.ReplaceAllString(out.String()+errOut.String(), "ipk_<redacted>"))
	return out.String() + errOut.String(), err
}

// TestREADMECustomerWalkthroughWithEnvoyStandIn runs every command of README's "What a customer does" against
// a host and a tenant API server (real kube-apiservers; the test writes the Application status
// Argo CD's controller would write, and the VMIs and status KubeVirt's controllers would
// write, since neither runs here), the real gateway (`xds serve`, watching the tenant
// cluster's VMIs and probing the replicas) and, in front of it, our stand-in for Envoy (no
// Envoy binary here; see envoyStandIn) calling its real key check. The replicas are replica
// doubles (no GPU or model here). `jobs detail` is run at every readiness stage.
func TestREADMECustomerWalkthroughWithEnvoyStandIn(t *testing.T) {
	lines := readmeWalkthrough(t)
	host, tenant := clusters.Get(t, "host"), clusters.Get(t, "tenant")
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "tenants"), os.DirFS("../../tenants")))
	recipes, err := filepath.Abs("../../recipes")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(recipes, filepath.Join(dir, "recipes")))
	kc, tenantKC := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "tenant.kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(kc, "host", map[string]*rest.Config{"host": host.Config, "acme": tenant.Config}))
	require.NoError(t, kubeenv.WriteKubeconfig(tenantKC, "acme", map[string]*rest.Config{"acme": tenant.Config}))
	t.Setenv("KUBECONFIG", kc)
	secret := writeKeySecret(t)
	secretValue, err := os.ReadFile(secret)
	require.NoError(t, err)
	t.Setenv("INFERPLANE_KEYS_SECRET", strings.TrimSpace(string(secretValue)))
	t.Setenv("INFERPLANE_KEYS_FILE", filepath.Join(dir, "keys.db"))

	// The gateway: xds serve watching the tenant cluster, and our Envoy stand-in before it.
	const domain = "models.example.com"
	admin, grpcAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := startServe(t, ctx, admin, "--source", "kube", "--kubeconfig", tenantKC, "--domain", domain,
		"--grpc-address", grpcAddr, "--admin-address", admin, "--log-level", "warn",
		"--keys-file", filepath.Join(dir, "keys.db"), "--secret-file", secret, "--probe-interval", "100ms", "--probe-timeout", "100ms")
	t.Cleanup(func() { cancel(); _ = waitServe(t, done) })
	t.Setenv("INFERPLANE_GATEWAY", startEnvoyStandIn(t, domain, "http://"+admin, grpcAddr))
	env := map[string]string{"INFERPLANE_DOMAIN": domain, "INFERPLANE_SERVER": "http://" + admin}
	t.Chdir(dir)

	w := &lifecycletest.World{Host: host, Cluster: tenant, Repo: filepath.Join(dir, "out", "acme"), Tenant: "acme"}
	var doubles []*replicadouble.Double
	for r := range 2 {
		d, err := replicadouble.Start(replicadouble.Options{Name: "chat-r" + strconv.Itoa(r), Model: "Qwen/Qwen3-32B"})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		doubles = append(doubles, d)
	}
	steps := walkthroughSteps(t, w, doubles)
	var ran []string
	for _, line := range lines {
		step, ok := steps[commandOf(line)]
		require.True(t, ok, "README runs %q, which this test has no step for", line)
		step(line, env)
		ran = append(ran, commandOf(line))
	}
	assert.Equal(t, []string{"export INFERPLANE_DOMAIN", "export INFERPLANE_SERVER", "jobs create", "jobs detail", "keys create",
		"chat", "jobs restart", "jobs delete"}, ran, "the walkthrough's commands, in order")
}

// commandOf names a README line by its command: "jobs create", "chat", "export NAME".
func commandOf(line string) string {
	f := strings.Fields(line)
	if f[0] == "export" {
		name, _, _ := strings.Cut(f[1], "=")
		return "export " + name
	}
	if len(f) > 2 && (f[1] == "jobs" || f[1] == "keys") {
		return f[1] + " " + f[2]
	}
	return f[1]
}

type step func(line string, env map[string]string)

// walkthroughSteps says, per README command, what the world looks like when it runs and what
// it must print.
func walkthroughSteps(t *testing.T, w *lifecycletest.World, doubles []*replicadouble.Double) map[string]step {
	run := func(line string, env map[string]string) string {
		out, err := runLine(t, line, env)
		require.NoError(t, err, out)
		return out
	}
	export := func(line string, env map[string]string) { run(line, env) }
	return map[string]step{
		"export INFERPLANE_DOMAIN": export,
		"export INFERPLANE_SERVER": export,
		"jobs create": func(line string, env map[string]string) {
			out := run(line, env)
			assert.Contains(t, out, "acme: created (")
			assert.FileExists(t, filepath.Join("tenants", "acme", "jobs", "chat.yaml"))
			assert.FileExists(t, filepath.Join(w.Repo, "jobs", "chat", "r1-n0-vm.yaml"))
		},
		"jobs detail": func(line string, env map[string]string) { detailThroughStages(t, w, doubles, line, env) },
		"keys create": func(line string, env map[string]string) {
			run(line, env)
			key, err := os.ReadFile("acme-chat.key")
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(key), "ipk_"))
		},
		"chat": func(line string, env map[string]string) {
			var out string
			require.Eventually(t, func() bool { // the gateway's file sync picks the new key up
				o, err := runLine(t, line, env)
				out = o
				return err == nil
			}, 10*time.Second, 200*time.Millisecond)
			assert.Regexp(t, `^Replica chat-r[01] heard: Write a haiku about GPUs\n`, out)
		},
		"jobs restart": func(line string, env map[string]string) {
			out := run(line, env)
			assert.Contains(t, out, "acme/chat: chat-r1-n0: deleted the VMI")
			assert.Contains(t, out, "the model-cache PVCs and Secrets stay")
			c := w.Cluster.Client
			err := c.Get(context.Background(), client.ObjectKey{Namespace: "acme", Name: "chat-r1-n0"}, &kubevirtv1.VirtualMachineInstance{})
			assert.True(t, apierrors.IsNotFound(err))
			require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "acme", Name: "chat-r1-n0-model-cache"}, &corev1.PersistentVolumeClaim{}))
		},
		"jobs delete": func(line string, env map[string]string) {
			out := run(line, env)
			assert.Contains(t, out, "its prune deletes Application acme-chat")
			assert.NoFileExists(t, filepath.Join("tenants", "acme", "jobs", "chat.yaml"))
			assert.NoDirExists(t, filepath.Join(w.Repo, "jobs", "chat"))
		},
	}
}

// detailThroughStages runs the README's `jobs detail` line at each readiness stage, moving the
// world on in between as Argo CD, the scheduler and KubeVirt would.
func detailThroughStages(t *testing.T, w *lifecycletest.World, doubles []*replicadouble.Double, line string, env map[string]string) {
	detail := func(want lifecycle.Stage, code int, reason string) string {
		t.Helper()
		out, err := runLine(t, line, env)
		assert.Equal(t, code, exitCode(err), "%v\n%s", err, out)
		assert.Contains(t, out, "Stage:      "+string(want), out)
		assert.Contains(t, out, reason)
		return out
	}
	now := time.Now().UTC().Truncate(time.Second)
	vms := []string{"chat-r0-n0", "chat-r1-n0"}
	each := func(set func(i int) func(*kubevirtv1.VirtualMachineInstance)) {
		for i, vm := range vms {
			w.PutVMI(t, vm, set(i))
		}
	}

	detail(lifecycle.StageSyncing, 3, "no Argo CD Application for acme/chat in the host cluster yet")
	w.Sync(t, "chat")
	w.SetApplication(t, "chat", lifecycle.ApplicationStatus{Sync: lifecycle.SyncStatus{Status: lifecycle.SyncOutOfSync},
		OperationState: &lifecycle.OperationState{Phase: lifecycle.PhaseRunning, StartedAt: metav1.NewTime(now),
			Message: "waiting for healthy state of /PersistentVolumeClaim/chat-r0-n0-model-cache"}})
	detail(lifecycle.StageSyncing, 3, "Application acme-chat is OutOfSync: waiting for healthy state of /PersistentVolumeClaim/chat-r0-n0-model-cache")

	w.SetApplication(t, "chat", lifecycletest.Synced(now, "5d41402abc4b"))
	w.ClaimEvent(t, "chat-r0-n0-model-cache", "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
	detail(lifecycle.StageWaitingForCapacity, 3, "PersistentVolumeClaim chat-r0-n0-model-cache is Pending: WaitForFirstConsumer")
	w.BindClaims(t, "chat")
	each(func(int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.All(lifecycletest.Phase(kubevirtv1.Scheduling, "", now),
			lifecycletest.Condition("PodScheduled", corev1.ConditionFalse, "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/GH100_H100_SXM5_80GB.", now))
	})
	detail(lifecycle.StageWaitingForCapacity, 3, "not scheduled: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/GH100_H100_SXM5_80GB.")

	nodes := []string{"gpu-h100-07", "gpu-h100-12"}
	each(func(i int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.All(lifecycletest.Phase(kubevirtv1.Scheduled, nodes[i], now),
			lifecycletest.Condition("PodScheduled", corev1.ConditionTrue, "", "", now))
	})
	detail(lifecycle.StageBooting, 3, "scheduled on gpu-h100-07; the guest is starting")

	// The replicas' model servers are the doubles: their address and port are what the VMIs
	// report, as virt-handler reports the guest's pod-network address.
	each(func(i int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.All(lifecycletest.Phase(kubevirtv1.Running, nodes[i], now), lifecycletest.Interface(doubles[i].Host()),
			lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "", "HTTP probe failed with statuscode: 503", now),
			func(v *kubevirtv1.VirtualMachineInstance) {
				v.Annotations[v1alpha1.AnnotationServingPort] = strconv.Itoa(doubles[i].Port())
			})
	})
	detail(lifecycle.StageLoadingModel, 3, "the model server's /health does not pass yet (downloading and loading the weights): HTTP probe failed with statuscode: 503")

	each(func(int) func(*kubevirtv1.VirtualMachineInstance) {
		return lifecycletest.Condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "", now)
	})
	var out string
	require.Eventually(t, func() bool { // the gateway's own probes take the replicas in
		o, err := runLine(t, line, env)
		out = o
		return err == nil
	}, 20*time.Second, 200*time.Millisecond)
	assert.Contains(t, out, "Stage:      serving")
	assert.Contains(t, out, "Endpoint:   https://chat.acme.models.example.com (API key required)")
	assert.Contains(t, out, "Gateway:    healthy, 2 of 2 replicas in rotation")
	assert.Regexp(t, `1\s+serving\s+\S+\s+1\s+gpu-h100-12\s+Running\s+127\.0\.0\.1\s+in the gateway's rotation`, out)
}
