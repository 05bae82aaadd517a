package agent

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/redact"
	"github.com/inferplane/inferplane/e2e/modelserverstandin/transcript"
)

// TestServesThenStopsStandIn runs the stand-in model server printing vLLM's real start-up
// under the agent (process runtime): every line reaches the console in order with its
// stream, the stages follow the lines and the health check, and SIGTERM stops the server
// gracefully (uvicorn's shutdown lines come through) before the agent returns.
func TestServesThenStopsStandIn(t *testing.T) {
	addr := freeAddr(t)
	r := startAgent(t, Config{Spec: standin(addr, "--script", transcriptPath("vllm-serve.log"), "--speed", "200"),
		HealthURL: "http://" + addr + "/health"})
	r.waitFor("serving", isStage(guestlog.StageServing))
	require.NoError(t, r.stop())
	recs := r.records()

	assert.Equal(t, []guestlog.Stage{guestlog.StagePullingImage, guestlog.StageStarting,
		guestlog.StageDownloadingWeights, guestlog.StageLoadingModel, guestlog.StageServing, guestlog.StageStopping}, stages(recs), r.dump())
	var lines []string
	for _, rec := range recs {
		if rec.Kind == guestlog.KindLine && rec.Stream != guestlog.Agent {
			lines = append(lines, string(rec.Stream)+" "+rec.Line)
		}
	}
	// A redrawn bar is forwarded once, as it ends; the rest line by line, in order.
	want := []string{
		"stderr config.json: 100%|██████████| 728/728 [00:00<00:00, 5.37MB/s]",
		"stdout (EngineCore_DP0 pid=283) INFO 12-03 07:00:31 [weight_utils.py:280] Using model weights format ['*.safetensors']",
		"stderr Loading safetensors checkpoint shards:  53% Completed | 9/17 [00:09<00:08,  1.02s/it]",
		"stdout (EngineCore_DP0 pid=283) INFO 12-03 07:02:11 [gpu_model_runner.py:2910] Model loading took 61.0344 GiB memory and 18.419732 seconds",
		"stderr (APIServer pid=1) INFO:     Application startup complete.",
		"stderr INFO:     Shutting down",
		"stderr INFO:     Application shutdown complete.",
	}
	i := 0
	for _, l := range lines {
		if i < len(want) && l == want[i] {
			i++
		}
	}
	assert.Equal(t, len(want), i, "lines in order: found up to %q in\n%s", want[min(i, len(want)-1)], r.dump())

	var shards []guestlog.Progress
	for _, rec := range recs {
		if rec.Kind == guestlog.KindStatus && rec.Status.Progress != nil && rec.Status.Progress.Unit == "files" {
			shards = append(shards, *rec.Status.Progress)
		}
	}
	require.NotEmpty(t, shards, "the shards' progress reached the status")
	assert.Equal(t, int64(17), shards[len(shards)-1].Total)
	last := recs[len(recs)-1]
	require.Equal(t, guestlog.KindStatus, last.Kind)
	assert.Equal(t, guestlog.StageStopping, last.Status.Stage)
	require.NotNil(t, last.Status.LastExit)
	assert.Equal(t, 0, last.Status.LastExit.Code, "SIGTERM: a graceful exit")
	assert.Regexp(t, `^INFO:     Finished server process \[\d+\]$`, last.Status.LastExit.LastLines[len(last.Status.LastExit.LastLines)-1])
	assertSeqs(t, recs)
}

// assertSeqs: Seq counts every record once, from 1, with no gap.
func assertSeqs(t *testing.T, recs []guestlog.Record) {
	t.Helper()
	for i, r := range recs {
		require.Equal(t, uint64(i+1), r.Seq, "record %d", i)
	}
}

// TestCrashLoopBacksOffStandIn: a server that fails to load (vLLM's CUDA out of memory,
// upstream's lines) is restarted again and again, the waits doubling up to the cap; the
// stage says crash-looping with the exit code, the cause its lines named and its last lines.
func TestCrashLoopBacksOffStandIn(t *testing.T) {
	addr := freeAddr(t)
	r := startAgent(t, Config{Spec: standin(addr, "--script", transcriptPath("vllm-oom.log"), "--speed", "0"),
		HealthURL: "http://" + addr + "/health", BackoffInitial: 100 * time.Millisecond, BackoffMax: 400 * time.Millisecond})
	r.waitFor("after four restarts", func(rec guestlog.Record) bool {
		return rec.Kind == guestlog.KindStatus && rec.Status.Restarts >= 4 && rec.Status.Stage == guestlog.StageCrashLooping
	})
	require.NoError(t, r.stop())

	delays := regexp.MustCompile(`^exited with code 1 after [^:]+: the GPU ran out of memory \(CUDA out of memory, trying to allocate 1\.96 GiB\): [^;]+; restarting in (\S+) \((\d+) exits in a row\)$`)
	var waits []string
	for _, rec := range r.records() {
		if rec.Kind != guestlog.KindStatus || rec.Status.Stage != guestlog.StageCrashLooping {
			continue
		}
		m := delays.FindStringSubmatch(rec.Status.Detail)
		require.NotNil(t, m, rec.Status.Detail)
		waits = append(waits, m[1])
		ex := rec.Status.LastExit
		require.NotNil(t, ex)
		assert.Equal(t, 1, ex.Code)
		assert.True(t, slices.ContainsFunc(ex.LastLines, func(l string) bool {
			return regexp.MustCompile(`torch\.OutOfMemoryError: CUDA out of memory`).MatchString(l)
		}), "the last lines hold the error: %q", ex.LastLines)
		// Two pipes: the order between stdout and stderr is the reads', not the writes'.
		assert.True(t, slices.ContainsFunc(ex.LastLines, func(l string) bool {
			return regexp.MustCompile(`RuntimeError: Engine core initialization failed`).MatchString(l)
		}), "%q", ex.LastLines)
	}
	require.GreaterOrEqual(t, len(waits), 4)
	assert.Equal(t, []string{"100ms", "200ms", "400ms", "400ms"}, waits[:4], "doubling, capped")
}

// TestBackoffResetsAfterServingStandIn: a server that serves for the healthy period before
// it crashes is restarted after the first wait every time.
func TestBackoffResetsAfterServingStandIn(t *testing.T) {
	addr := freeAddr(t)
	r := startAgent(t, Config{Spec: standin(addr, "--script", transcriptPath("vllm-serve.log"), "--speed", "0",
		"--exit-after", "1200ms", "--exit-code", "137"),
		HealthURL: "http://" + addr + "/health", BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second,
		HealthyPeriod: 300 * time.Millisecond})
	r.waitFor("three restarts", func(rec guestlog.Record) bool {
		return rec.Kind == guestlog.KindStatus && rec.Status.Restarts >= 3
	})
	require.NoError(t, r.stop())
	n := 0
	for _, rec := range r.records() {
		if rec.Kind == guestlog.KindStatus && rec.Status.Stage == guestlog.StageCrashLooping {
			assert.Regexp(t, `^exited with code 137 after \S+; restarting in 100ms \(1 exits in a row\)$`, rec.Status.Detail)
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 3)
	assert.Equal(t, []guestlog.Stage{guestlog.StagePullingImage, guestlog.StageStarting,
		guestlog.StageDownloadingWeights, guestlog.StageLoadingModel, guestlog.StageServing, guestlog.StageCrashLooping,
		guestlog.StagePullingImage}, stages(r.records())[:7], "each run goes all the way to serving")
}

// TestStopKillsAfterTheGraceStandIn: a server that ignores SIGTERM (stuck in its start-up) is
// killed once the stop grace is over.
func TestStopKillsAfterTheGraceStandIn(t *testing.T) {
	addr := freeAddr(t)
	r := startAgent(t, Config{Spec: standin(addr, "--script", transcriptPath("vllm-serve.log"), "--speed", "0", "--hang"),
		HealthURL: "http://" + addr + "/health", StopGrace: 300 * time.Millisecond})
	r.waitFor("loading", isStage(guestlog.StageLoadingModel))
	require.NoError(t, r.stop())
	r.waitFor("a kill", lineContains(guestlog.Agent, "stopped the model server: exit code 137"))
	for _, rec := range r.records() {
		assert.False(t, isStage(guestlog.StageServing)(rec), "a hung server never serves")
	}
}

// TestRedactsSecretsStandIn: the stand-in prints the token it was given, in a line, in a
// header, split across two writes inside a carriage-return progress line, and a secret env
// value in a dict: none of them reaches the console.
func TestRedactsSecretsStandIn(t *testing.T) {
	const (
		token  = "hf_QmTyxZbWvKcNpRsLdJfGhEaUoIiYtRwXqZk"
		secret = "wandb-5f0c1d2e3a4b5c6d7e8f90a1b2c3d4e5"
	)
	addr := freeAddr(t)
	spec := standin(addr, "--print-secret", "--script", transcriptPath("vllm-serve.log"), "--speed", "0")
	spec.Env = []string{"HF_TOKEN=" + token, "STANDIN_SECRET=" + secret}
	r := startAgent(t, Config{Spec: spec, HealthURL: "http://" + addr + "/health", Redactor: redact.New(token, secret)})
	r.waitFor("the secrets printed", lineContains(guestlog.Stdout, "secrets printed"))
	require.NoError(t, r.stop())
	all := r.console.buf.String()
	for _, s := range []string{token, token[:len(token)/2], token[len(token)/2:], secret, secret[6:20]} {
		assert.NotContains(t, all, s)
	}
	r.waitFor("the token masked", lineContains(guestlog.Stdout, "HF_TOKEN="+redact.Mask))
	r.waitFor("the header masked", lineContains(guestlog.Stdout, "Authorization: Bearer "+redact.Mask))
	r.waitFor("the dict masked", lineContains(guestlog.Stdout, "'wandb_key': '"+redact.Mask+"'"))
	r.waitFor("the progress line as it ended", lineContains(guestlog.Stderr, "Fetching 4 files:  50%|█████     | 2/4"))
}

// TestFloodNeverBlocksTheServerStandIn: the stand-in prints 20,000 lines as fast as it can
// while the console takes nothing at all; the agent keeps reading (the server finishes its
// start-up and answers /health while the console is still blocked), drops what the console
// cannot take, and says how many it dropped: every line is written or counted.
func TestFloodNeverBlocksTheServerStandIn(t *testing.T) {
	const n = 20000
	addr := freeAddr(t)
	r := startAgent(t, Config{Spec: standin(addr, "--flood", strconv.Itoa(n), "--script", transcriptPath("vllm-serve.log"), "--speed", "0"),
		HealthURL: "http://" + addr + "/health", QueueLines: 256})
	r.console.mu.Lock()
	r.console.gate = make(chan struct{})
	r.console.mu.Unlock()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 20*time.Millisecond, "the server got through its flood and start-up with the console blocked")
	r.console.mu.Lock()
	close(r.console.gate)
	r.console.gate = nil
	r.console.mu.Unlock()
	r.waitFor("serving", isStage(guestlog.StageServing))
	require.NoError(t, r.stop())

	// What the stand-in printed: the flood, the transcript's lines, uvicorn's four on SIGTERM.
	steps, err := transcript.Read(transcriptPath("vllm-serve.log"))
	require.NoError(t, err)
	printed := n + len(transcript.Lines(steps, 1)) + len(transcript.Lines(steps, 2)) + 4

	notice := regexp.MustCompile(`^dropped (\d+) lines of the model server's output`)
	written, flood, dropped := 0, 0, 0
	for _, rec := range r.records() {
		switch {
		case rec.Kind != guestlog.KindLine:
		case rec.Stream == guestlog.Agent:
			if m := notice.FindStringSubmatch(rec.Line); m != nil {
				d, _ := strconv.Atoi(m[1])
				dropped += d
			}
		default:
			written++
			if regexp.MustCompile(`^standin line \d+ of 20000$`).MatchString(rec.Line) {
				flood++
			}
		}
	}
	assert.Positive(t, dropped)
	assert.Less(t, flood, n, "the console could not have taken the whole flood")
	assert.Equal(t, printed, written+dropped, "every line written or counted")
}
