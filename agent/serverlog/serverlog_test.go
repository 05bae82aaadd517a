package serverlog

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/e2e/modelserverstandin/transcript"
)

// seen is what the agent learns from a whole transcript: the stages in the order they first
// show, the last progress of each unit, whether the model loaded, the causes.
type seen struct {
	stages   []guestlog.Stage
	progress map[string]guestlog.Progress
	details  []string
	loaded   bool
	cause    string // the last specific cause, else the first generic one
}

func replay(t *testing.T, name string) seen {
	t.Helper()
	steps, err := transcript.Read(filepath.Join("testdata", name))
	require.NoError(t, err)
	s := seen{progress: map[string]guestlog.Progress{}}
	generic := ""
	// In the order written; in these transcripts a step never ends inside a segment.
	for _, st := range steps {
		for _, seg := range strings.FieldsFunc(st.Text, func(r rune) bool { return r == '\r' || r == '\n' }) {
			ev := Parse(seg)
			if ev.Stage != "" && !slices.Contains(s.stages, ev.Stage) {
				s.stages = append(s.stages, ev.Stage)
			}
			if ev.Progress != nil {
				s.progress[ev.Progress.Unit] = *ev.Progress
			}
			if ev.Detail != "" {
				s.details = append(s.details, ev.Detail)
			}
			s.loaded = s.loaded || ev.Loaded
			switch {
			case ev.Cause == "":
			case ev.Generic && generic == "":
				generic = ev.Cause
			case !ev.Generic:
				s.cause = ev.Cause // a later, more detailed line of the same error wins
			}
		}
	}
	if s.cause == "" {
		s.cause = generic
	}
	return s
}

// TestTranscripts replays upstream's own lines (testdata/PROVENANCE.md) through the parser.
func TestTranscripts(t *testing.T) {
	for _, tc := range []struct {
		file     string
		stages   []guestlog.Stage
		progress map[string]guestlog.Progress
		details  []string
		loaded   bool
		cause    string
	}{
		{file: "vllm-serve.log",
			stages: []guestlog.Stage{guestlog.StageDownloadingWeights, guestlog.StageLoadingModel},
			progress: map[string]guestlog.Progress{
				"bytes": {Done: 11_400_000, Total: 11_400_000, Unit: "bytes"},
				"files": {Done: 17, Total: 17, Unit: "files"},
			},
			details: []string{
				"downloading tokenizer.json: 46% of 11.4MB",
				"fetching the weights (['*.safetensors'])",
				"downloaded the weights of Qwen/Qwen3-32B in 81 s",
				"loading Qwen/Qwen3-32B into the GPUs",
				"Loading safetensors checkpoint shards: 9/17",
				"read the weights in 17 s",
				"model loaded (61.0 GiB in 18 s); preparing the KV cache",
				"starting the API server on http://0.0.0.0:8000",
				"the HTTP server is up; waiting for /health",
			},
			loaded: true},
		{file: "vllm-oom.log",
			stages:   []guestlog.Stage{guestlog.StageDownloadingWeights, guestlog.StageLoadingModel},
			progress: map[string]guestlog.Progress{"files": {Done: 12, Total: 17, Unit: "files"}},
			cause:    "the GPU ran out of memory (CUDA out of memory, trying to allocate 1.96 GiB): the model and its KV cache do not fit the GPUs with these arguments"},
		{file: "vllm-gated.log", progress: map[string]guestlog.Progress{},
			cause: "the Hugging Face repository meta-llama/Llama-3.1-8B-Instruct is gated: the token (the tenant's Hugging Face token Secret) must belong to an account that was granted access"},
		{file: "vllm-notfound.log", progress: map[string]guestlog.Progress{},
			cause: "the Hugging Face repository Qwen/Qwen3-33B was not found (a wrong model id, or a private repository the token cannot read)"},
		{file: "vllm-revision.log", progress: map[string]guestlog.Progress{},
			cause: "the Hugging Face repository Qwen/Qwen3-32B has no revision v9.9"},
		{file: "parakeet-serve.log",
			stages:   []guestlog.Stage{guestlog.StageDownloadingWeights, guestlog.StageLoadingModel},
			progress: map[string]guestlog.Progress{"bytes": {Done: 2_510_000_000, Total: 2_510_000_000, Unit: "bytes"}},
			details: []string{
				"downloading parakeet-tdt-0.6b-v3.nemo: 63% of 2.51GB",
				"restoring the model (tokenizer SentencePieceTokenizer ready)",
				"restored EncDecRNNTBPEModel; starting the server",
				"the HTTP server is up; waiting for /health",
			},
			loaded: true},
		{file: "parakeet-xet.log",
			stages:   []guestlog.Stage{guestlog.StageDownloadingWeights},
			progress: map[string]guestlog.Progress{"bytes": {Done: 2_510_000_000, Total: 2_510_000_000, Unit: "bytes"}},
			details:  []string{"downloading parakeet-tdt-0.6b-v3.nemo: 40% of 2.51GB"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := replay(t, tc.file)
			assert.Equal(t, tc.stages, s.stages)
			assert.Equal(t, tc.progress, s.progress)
			for _, d := range tc.details {
				assert.Contains(t, s.details, d)
			}
			assert.Equal(t, tc.loaded, s.loaded)
			assert.Equal(t, tc.cause, s.cause)
		})
	}
}

// Lines that look alike but say nothing about the stage or a download.
func TestParseIgnores(t *testing.T) {
	for _, line := range []string{
		"Capturing CUDA graphs (mixed prefill-decode, FULL):  10%|█         | 7/67 [00:01<00:10,  5.66it/s]",
		"(APIServer pid=1) INFO:     127.0.0.1:53422 - \"GET /health HTTP/1.1\" 200 OK",
		"(APIServer pid=1) ",
		"INFO:     Started server process [1]",
		"",
		"(",
		"(EngineCore_DP0 pid=283) (RayWorkerWrapper pid=9) ",
	} {
		assert.Equal(t, Event{}, Parse(line), "%q", line)
	}
}

func TestParseUnderRayPrefixes(t *testing.T) {
	ev := Parse("(EngineCore_DP0 pid=7) (RayWorkerWrapper pid=9) INFO 12-18 06:00:10 [gpu_model_runner.py:2904] Model loading took 14.0020 GiB and 5.929397 seconds")
	assert.True(t, ev.Loaded)
	assert.Equal(t, "model loaded (14.0 GiB in 5.9 s); preparing the KV cache", ev.Detail)
}

func BenchmarkParse(b *testing.B) {
	lines := []string{
		"(APIServer pid=1) INFO 12-03 07:03:04 [launcher.py:74] Route: /v1/chat/completions, Methods: POST",
		"(EngineCore_DP0 pid=283) \rLoading safetensors checkpoint shards:  53% Completed | 9/17 [00:09<00:08,  1.02s/it]",
		"INFO:     127.0.0.1:53422 - \"GET /health HTTP/1.1\" 200 OK",
	}
	for b.Loop() {
		for _, l := range lines {
			Parse(l)
		}
	}
}
