package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/redact"
	"github.com/inferplane/inferplane/e2e/agentproc"
	"github.com/inferplane/inferplane/e2e/modelserverstandin/standinbin"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// Real-looking secrets fed through the model server's output: a Hugging Face token (hf_ and
// 34 letters, as huggingface.co issues them) and a value the master marks secret (secretKey).
const (
	agentE2EToken  = "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"
	agentE2ESecret = "wandb-7c1e2d3f4a5b6c7d8e9f0a1b2c3d4e5f"
)

// The log path end to end with the REAL inference agent: `inferplane agent` (go build of this
// command, the process runtime) supervises e2e/modelserverstandin, a STAND-IN for vLLM that
// prints vLLM's own lines of a model too large for its GPU (agent/serverlog/testdata/vllm-oom.log:
// torch.OutOfMemoryError, then exit 1), and prints the Hugging Face token and a secret as a
// careless server would. The agent's --console is a file standing in for the VM's serial console;
// the kubelet STAND-IN (e2e/kubeletstandin: virt-tail, the runtime and the kubelet, which cannot
// run here) serves it as pods/log of guest-console-log to a real kube-apiserver, and the customer
// reads through the real product API: `jobs logs -f` shows the server's lines, redacted, and the
// stage turning to crash-looping with the last line; `jobs detail` says the same. The agent is
// killed (SIGKILL) mid-way and started again: it writes the record it was writing again with
// the same Seq, which the readers skip; every record it numbered reaches the customer once.
func TestJobLogsRealAgentEndToEndKubeletStandIn(t *testing.T) {
	w := startLogsWorld(t, false)
	ctx := context.Background()
	a := newRealAgent(t, w.console)

	human, stopHuman := startCLI("jobs", "logs", "acme/"+logsJob, "-f")
	machine, stopMachine := startCLI("jobs", "logs", "acme/"+logsJob, "-f", "-o", "json")
	a.start()
	human.waitFor(t, "[r0/n0] (agent) started the model server", time.Minute)
	human.waitFor(t, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB.", time.Minute)
	human.waitFor(t, `(status) crash-looping: exit 1 after `, time.Minute)
	before := a.waitFor("crash-looping after 2 restarts", 0, crashLooping(2))

	// The agent dies (SIGKILL: no chance to finish anything) while the server's lines flow,
	// and systemd starts it again.
	a.waitFor("the next run's lines", before.Seq, func(r guestlog.Record) bool {
		return r.Kind == guestlog.KindLine && strings.HasPrefix(r.Line, "standin line 5 of")
	})
	require.Error(t, a.kill())
	killedAt := lastRecordSeq(a.consoleRecords(t))
	a.start()
	after := a.waitFor("crash-looping after 2 more restarts", killedAt, crashLooping(before.Status.Restarts+2)).Status
	human.waitFor(t, `restarts; last line: "`, time.Minute)

	// The stage through the API (its status reads stand a few seconds: joblogs.StatusCache).
	reason := regexp.MustCompile(`Reason:     exit 1 after \d+ s, (\d+) restarts; last line: "[^"]+`)
	var out, errOut string
	var err error
	require.Eventually(t, func() bool {
		out, errOut, err = execCLI(ctx, "jobs", "detail", "acme/"+logsJob)
		m := reason.FindStringSubmatch(out)
		n := 0
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		return exitCode(err) == exitFailed && n >= after.Restarts
	}, time.Minute, 500*time.Millisecond, "jobs detail says crash-looping (exit 4) with the restarts since the agent's restart; last:\n%s%s", out, errOut)
	assert.Contains(t, out, "Stage:      crash-looping")
	t.Logf("inferplane jobs detail acme/%s (through the product API):\n%s", logsJob, out)

	// The end of the log while the server waits to be started again (what the README shows).
	// The agent starts the server again after a backoff of a few seconds, so the crash is the
	// log's last line only in that window; a slow read may miss it: the crash with the OOM
	// before it is what matters.
	var tail string
	deadline := time.Now().Add(time.Minute)
	for {
		tail, errOut, err = execCLI(ctx, "jobs", "logs", "acme/"+logsJob, "--tail", "12")
		if err == nil && crashAfterOOM(tail) {
			break
		}
		// The values of the last try, not those of before the loop.
		require.True(t, time.Now().Before(deadline), "the log's end is the crash; last:\n%s%s(error: %v)", tail, errOut, err)
		time.Sleep(100 * time.Millisecond)
	}
	assert.Contains(t, tail, "torch.OutOfMemoryError: CUDA out of memory.")
	t.Logf("inferplane jobs logs acme/%s --tail 12 (through the product API):\n%s", logsJob, tail)

	// The agent stops on SIGTERM as systemd stops it; the follows see it, then end.
	require.NoError(t, a.stop(), "SIGTERM: the agent stops its server and exits 0")
	human.waitFor(t, "(status) stopping", time.Minute)
	machine.waitFor(t, `"stage":"stopping"`, time.Minute)
	err, errOut = stopHuman()
	require.NoError(t, err, errOut)
	err, errOut = stopMachine()
	require.NoError(t, err, errOut)
	followed := human.String()
	ls := strings.Split(strings.TrimSpace(followed), "\n")
	t.Logf("inferplane jobs logs acme/%s -f (through the product API), its last 30 of %d lines:\n%s", logsJob, len(ls),
		strings.Join(ls[max(len(ls)-30, 0):], "\n"))

	// The Seq contract: the console holds the record the killed agent was writing twice (the
	// same Seq, written again by the agent started after it); the records' numbers go on with
	// no gap across the restart; the customer's follow has each line record exactly once, in
	// the console's order, and no notice that the numbering started over.
	recs := a.consoleRecords(t)
	unique := assertConsoleSeq(t, recs, killedAt)
	var want []string
	for _, r := range unique {
		if r.Kind == guestlog.KindLine {
			want = append(want, string(r.Stream)+" "+r.Time.Format(time.RFC3339Nano)+" "+r.Line)
		}
	}
	assert.Equal(t, want, followedLines(t, machine.String()), "every line the agent wrote, once, in order")
	assert.NotContains(t, followed, "numbers its records from")

	// Secrets: masked on the console, so nowhere after it.
	human.waitFor(t, "HF_TOKEN="+redact.Mask, time.Second)
	human.waitFor(t, "Authorization: Bearer "+redact.Mask, time.Second)
	human.waitFor(t, "'wandb_key': '"+redact.Mask+"'", time.Second)
	kc, err := kubernetes.NewForConfig(w.env.Config)
	require.NoError(t, err)
	podLog, err := kc.CoreV1().Pods("acme").GetLogs(w.pod, &corev1.PodLogOptions{Container: joblogs.Container}).DoRaw(ctx)
	require.NoError(t, err)
	console, err := os.ReadFile(w.console)
	require.NoError(t, err)
	for what, text := range map[string]string{"the console": string(console), "pods/log": string(podLog),
		"jobs logs -f": followed, "jobs logs -f -o json": machine.String(), "jobs detail": out} {
		for _, s := range []string{agentE2EToken, agentE2EToken[:len(agentE2EToken)/2], agentE2EToken[len(agentE2EToken)/2:], agentE2ESecret} {
			assert.NotContains(t, text, s, "a secret in %s", what)
		}
	}
}

// realAgent is `inferplane agent` as the guest's unit runs it, its console a file.
type realAgent struct {
	agentproc.Agent
	t       *testing.T
	console string
}

func newRealAgent(t *testing.T, console string) *realAgent {
	dir := t.TempDir()
	standin, err := standinbin.Build(dir)
	require.NoError(t, err)
	bin, err := agentproc.Build(dir)
	require.NoError(t, err)
	tokenFile, secretFile := filepath.Join(dir, "hf-token"), filepath.Join(dir, "wandb-key")
	require.NoError(t, os.WriteFile(tokenFile, []byte(agentE2EToken+"\n"), 0o600))
	require.NoError(t, os.WriteFile(secretFile, []byte(agentE2ESecret), 0o600))
	transcript, err := filepath.Abs("../../agent/serverlog/testdata/vllm-oom.log")
	require.NoError(t, err)
	addr := freePort(t)
	a := &realAgent{t: t, console: console, Agent: agentproc.Agent{Bin: bin, Dir: dir,
		Env: []string{"PATH=" + os.Getenv("PATH"), "HF_TOKEN=" + agentE2EToken},
		Args: []string{"agent", "--engine", "process", "--console", console, "--state-dir", filepath.Join(dir, "state"),
			"--hf-token-file", tokenFile, "--env", "HF_TOKEN", "--secret-env", "STANDIN_SECRET=" + secretFile,
			"--health-url", "http://" + addr + "/health", "--health-interval", "200ms",
			"--restart-backoff", "2s", "--restart-backoff-max", "4s", "--stop-grace", "5s",
			// The server: numbered lines (to kill the agent while lines flow), the secrets, then
			// vLLM's own lines of a model too large for the GPU, paced ten times faster than
			// they were printed (about 2 s from start to exit 1).
			standin, "--addr", addr, "--flood", "20", "--every", "30ms", "--print-secret", "--script", transcript, "--speed", "10"}}}
	t.Cleanup(func() { a.Stop(10 * time.Second) })
	return a
}

func (a *realAgent) start() { require.NoError(a.t, a.Start()) }

// kill sends SIGKILL to the agent alone (its server, a child, dies with it) and waits.
func (a *realAgent) kill() error { return a.signal(syscall.SIGKILL) }

// stop sends SIGTERM, as systemd stops the unit, and waits.
func (a *realAgent) stop() error { return a.signal(syscall.SIGTERM) }

func (a *realAgent) signal(sig syscall.Signal) error {
	a.t.Helper()
	exit, err := a.Signal(sig, time.Minute)
	require.NoError(a.t, err)
	return exit
}

// consoleRecords decodes the agent's records on the console.
func (a *realAgent) consoleRecords(t *testing.T) []guestlog.Record {
	t.Helper()
	recs, err := agentproc.Records(a.console)
	require.NoError(t, err)
	return recs
}

// waitFor waits for a record numbered above afterSeq that ok accepts, and returns it.
func (a *realAgent) waitFor(what string, afterSeq uint64, ok func(guestlog.Record) bool) guestlog.Record {
	a.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, r := range a.consoleRecords(a.t) {
			if r.Seq > afterSeq && ok(r) {
				return r
			}
		}
	}
	a.t.Fatalf("no record %s on the console; the agent's log:\n%s", what, a.Tail(30))
	return guestlog.Record{}
}

// crashLooping accepts a crash-looping status of at least n restarts.
func crashLooping(n int) func(guestlog.Record) bool {
	return func(r guestlog.Record) bool {
		return r.Kind == guestlog.KindStatus && r.Status.Stage == guestlog.StageCrashLooping && r.Status.Restarts >= n
	}
}

func lastRecordSeq(recs []guestlog.Record) uint64 {
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Seq
}

// assertConsoleSeq checks the console's numbering across the agent's restart: records numbered
// 1, 2, 3, ... with no gap, the one at killedAt written twice (identical), nothing else twice.
// It returns the records once each, in order.
func assertConsoleSeq(t *testing.T, recs []guestlog.Record, killedAt uint64) []guestlog.Record {
	t.Helper()
	var unique []guestlog.Record
	var twice []uint64
	for _, r := range recs {
		if n := len(unique); n > 0 && r.Seq == unique[n-1].Seq {
			twice = append(twice, r.Seq)
			assert.Equal(t, unique[n-1], r, "Seq %d written again must be the same record", r.Seq)
			continue
		}
		require.Equal(t, uint64(len(unique)+1), r.Seq, "the records go on with no gap: %+v", r)
		unique = append(unique, r)
	}
	// The killed agent's last record, written again by the next (unless the kill fell between
	// the state's write and the console's: then the next agent writes it the first time).
	if assert.LessOrEqual(t, len(twice), 1, "records written twice: %v", twice) && len(twice) == 1 {
		assert.Equal(t, killedAt, twice[0], "the record written twice is the killed agent's last")
		t.Logf("the record written twice: %+v", unique[twice[0]-1])
	}
	t.Logf("the console: %d records (Seq 1 to %d), Seq %v written twice", len(recs), len(unique), twice)
	return unique
}

// followedLines are the line entries of `jobs logs -o json` as "stream time line".
func followedLines(t *testing.T, ndjson string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(ndjson), "\n") {
		var e apiv1.LogEntry
		require.NoError(t, json.Unmarshal([]byte(l), &e), "%q", l)
		if e.Kind == "line" {
			lines = append(lines, e.Stream+" "+e.Time.Format(time.RFC3339Nano)+" "+e.Line)
		}
	}
	return lines
}

// crashAfterOOM says a log's text has the agent's crash-looping status with the server's
// out-of-memory line before it.
func crashAfterOOM(text string) bool {
	oom := false
	for _, l := range strings.Split(text, "\n") {
		oom = oom || strings.Contains(l, "torch.OutOfMemoryError: CUDA out of memory.")
		if oom && strings.Contains(l, "(status) crash-looping: exit 1 after") {
			return true
		}
	}
	return false
}
