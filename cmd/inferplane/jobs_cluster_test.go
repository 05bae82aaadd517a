package main

import (
	"encoding/json"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	return addr
}

// jobs list and detail against a host and a tenant API server where nothing is synced yet,
// with globex's cluster unreachable: acme's jobs are syncing (exit 3), globex's unknown with
// an error naming its cluster (exit 1); detail as JSON; unknown jobs and missing contexts
// (with --tenant-clusters auto, a missing tenant context sends it to the registry, empty here).
func TestJobsListDetailAndUnreachableClusters(t *testing.T) {
	host, tenant := clusters.Get(t, "host"), clusters.Get(t, "tenant")
	tr := newJobsTree(t)
	out, err := tr.run(t, "generate")
	require.NoError(t, err, out)
	down := closedAddr(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, kubeenv.WriteKubeconfig(kc, "host", map[string]*rest.Config{
		"host": host.Config, "acme": tenant.Config, "globex": {Host: "https://" + down}}))
	gw := "http://" + closedAddr(t)
	run := func(args ...string) (string, error) {
		return tr.run(t, append(args, "--kubeconfig", kc, "--server", gw, "--domain", "models.example.com")...)
	}

	out, err = run("jobs", "list")
	require.Error(t, err)
	assert.Equal(t, 1, exitCode(err))
	assert.Contains(t, err.Error(), "cluster of tenant globex (https://"+down+"): list VirtualMachines in namespace globex")
	assert.Regexp(t, `acme\s+qwen3-32b\s+vllm\s+Qwen/Qwen3-32B\s+2\s+syncing\s+-\s+no Argo CD Application`, out)
	assert.Regexp(t, `globex\s+kimi-k2\s+vllm\s+moonshotai/Kimi-K2-Instruct\s+1\s+unknown\s+-\s+clusters not read`, out)
	assert.NotContains(t, out, "initech", "a tenant without jobs has no rows")

	out, err = run("jobs", "list", "--tenant", "acme")
	assert.Equal(t, exitOnItsWay, exitCode(err), "%v\n%s", err, out)
	assert.Contains(t, out, "transcribe")

	out, err = run("jobs", "detail", "acme/qwen3-32b", "-o", "json")
	assert.Equal(t, exitOnItsWay, exitCode(err), "%v", err)
	var d jobDetail
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, "syncing", string(d.Stage))
	assert.Len(t, d.Replicas, 2)
	assert.Equal(t, "https://qwen3-32b.acme.models.example.com", d.Endpoint.URL)
	assert.Equal(t, masterView{Name: "qwen3-32b-h100", Runtime: "vllm", Model: "Qwen/Qwen3-32B", Image: "vllm/vllm-openai:v0.27.1", ImagePinned: true,
		Args: []string{"--tensor-parallel-size", "1", "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
			"--max-model-len", "32768"}, PerReplicaGPUCount: 1, NodesPerReplica: 1, GPUsPerNode: 1, NodeType: "metal3.gpu-h100"}, d.Master)
	assert.Contains(t, d.GatewayError, "connection refused", "the gateway could not be asked, and the detail says so")

	out, err = run("jobs", "detail", "acme/qwen3-32b", "-o", "yaml")
	assert.Equal(t, exitOnItsWay, exitCode(err))
	assert.Contains(t, out, "stage: syncing\n")

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"jobs", "detail", "globex/llama-70b"}, 1, "cluster of tenant globex (https://" + down + ")"},
		{[]string{"jobs", "restart", "globex/llama-70b"}, 1, "cluster of tenant globex (https://" + down + "): list VirtualMachines"},
		{[]string{"jobs", "detail", "acme/qwen3-23b"}, 1, `tenant acme has no job "qwen3-23b"; did you mean qwen3-32b?`},
		{[]string{"jobs", "detail", "acme/qwen3-32b", "--tenant-context", "vc-{tenant}", "--tenant-clusters", "kubeconfig"}, 1, `the cluster of tenant acme: no context "vc-acme" in kubeconfig`},
		{[]string{"jobs", "detail", "acme/qwen3-32b", "--tenant-context", "vc-{tenant}"}, 1, `- kubeconfig: no context "vc-acme" in kubeconfig`},
		{[]string{"jobs", "detail", "acme/qwen3-32b", "--context", "mgmt"}, 1, `the host cluster: no context "mgmt"`},
		{[]string{"jobs", "detail", "acme/qwen3-32b", "-o", "wide"}, 2, `-o "wide": expected table, json or yaml`},
		{[]string{"jobs", "restart", "acme/qwen3-32b"}, 1, "no VirtualMachines of acme/qwen3-32b in namespace acme: has Argo CD synced the job?"},
	} {
		_, err := run(tc.args...)
		require.Error(t, err, tc.args)
		assert.Equal(t, tc.code, exitCode(err), "%v", err)
		assert.Contains(t, err.Error(), tc.want)
	}
}
