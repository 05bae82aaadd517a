// Package serverlog turns what a model server prints into what the agent reports: the stage a
// line shows (downloading the weights, loading the model), the progress it counts (bytes of a
// download, checkpoint shards loaded) and the cause of a failure it names (CUDA out of memory,
// a gated or missing Hugging Face repository). It knows vLLM's lines, Parakeet's (NVIDIA NeMo's
// and uvicorn's) and huggingface_hub's download bars, as those projects print them
// (testdata/PROVENANCE.md). A line is one segment of output: the agent splits tqdm's
// carriage-return redraws before they get here.
//
// Serving is not read from lines: the server's /health answering decides it.
package serverlog

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/inferplane/inferplane/agent/guestlog"
)

// Event is what one line says. The zero Event says nothing.
type Event struct {
	// Stage the line shows the server in ("" for none): downloading-weights or loading-model.
	Stage guestlog.Stage
	// Detail says what the server is doing, in words, for the status.
	Detail string
	// Progress of a download (bytes) or of the checkpoint shards (files).
	Progress *guestlog.Progress
	// Loaded: the model is in the GPUs' memory. A node that serves no HTTP (a vLLM --headless
	// worker) has nothing more to show.
	Loaded bool
	// Cause names what made the server fail, in words for the customer. An error's later lines
	// say more than its first (a traceback's exception type, then its message): a later
	// specific cause replaces an earlier one.
	Cause string
	// Generic: the cause only points at an earlier line (vLLM's "See root cause above"); any
	// specific cause of the same run wins over it.
	Generic bool
}

// rule recognises one kind of line: needle must occur in it before re is tried (most lines
// match none, and a substring search is far cheaper than a regular expression).
type rule struct {
	needle string
	re     *regexp.Regexp
	event  func(m []string) Event
}

// Parse reads one line (one carriage-return segment, without its line end).
func Parse(line string) Event {
	line = trimProcessPrefix(line)
	for i := range rules {
		r := &rules[i]
		if !strings.Contains(line, r.needle) {
			continue
		}
		var m []string
		if r.re != nil {
			if m = r.re.FindStringSubmatch(line); m == nil {
				continue
			}
		}
		return r.event(m)
	}
	return Event{}
}

var rules = []rule{
	// vLLM: the weights' download. vLLM hides huggingface_hub's bars for it, so the start and
	// the end are all it says.
	{needle: "Using model weights format", re: regexp.MustCompile(`Using model weights format (.+)$`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageDownloadingWeights, Detail: "fetching the weights (" + m[1] + ")"}
		}},
	{needle: "Time spent downloading weights for", re: regexp.MustCompile(`downloading weights for (\S+): ([\d.]+) seconds`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageDownloadingWeights, Detail: "downloaded the weights of " + m[1] + " in " + seconds(m[2])}
		}},
	// vLLM: loading.
	{needle: "Starting to load model", re: regexp.MustCompile(`Starting to load model (\S+?)(?:\.\.\.)?$`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageLoadingModel, Detail: "loading " + m[1] + " into the GPUs"}
		}},
	{needle: "checkpoint shards:", re: regexp.MustCompile(`(Loading [\w ]+ checkpoint shards):\s+\d+% Completed \| (\d+)/(\d+)`),
		event: func(m []string) Event {
			done, _ := strconv.ParseInt(m[2], 10, 64)
			total, _ := strconv.ParseInt(m[3], 10, 64)
			return Event{Stage: guestlog.StageLoadingModel, Detail: m[1] + ": " + m[2] + "/" + m[3],
				Progress: &guestlog.Progress{Done: done, Total: total, Unit: "files"}}
		}},
	{needle: "Loading weights took", re: regexp.MustCompile(`Loading weights took ([\d.]+) seconds`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageLoadingModel, Detail: "read the weights in " + seconds(m[1])}
		}},
	{needle: "Model loading took", re: regexp.MustCompile(`Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageLoadingModel, Loaded: true,
				Detail: fmt.Sprintf("model loaded (%s GiB in %s); preparing the KV cache", gib(m[1]), seconds(m[2]))}
		}},
	{needle: "Starting vLLM API server", re: regexp.MustCompile(`Starting vLLM API server(?: \d+)? on (\S+)`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageLoadingModel, Loaded: true, Detail: "starting the API server on " + m[1]}
		}},
	// uvicorn (vLLM's API server and Parakeet's alike).
	{needle: "Application startup complete.", event: func([]string) Event {
		return Event{Detail: "the HTTP server is up; waiting for /health"}
	}},
	{needle: "Application startup failed. Exiting.", event: func([]string) Event {
		return Event{Cause: "the server's start-up failed (see the lines before)", Generic: true}
	}},
	// NeMo (Parakeet).
	{needle: "was successfully restored from", re: regexp.MustCompile(`Model (\S+) was successfully restored from`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageLoadingModel, Loaded: true, Detail: "restored " + m[1] + "; starting the server"}
		}},
	{needle: " initialized with ", re: regexp.MustCompile(`Tokenizer (\S+) initialized with (\d+) tokens`),
		event: func(m []string) Event {
			return Event{Stage: guestlog.StageLoadingModel, Detail: "restoring the model (tokenizer " + m[1] + " ready)"}
		}},
	// huggingface_hub's bars: a file's bytes (tqdm's default form, then the Xet form).
	{needle: "B/s", re: regexp.MustCompile(`^\s*(.+?):\s+(\d+)%\|[^|]*\|\s*([\d.]+[kMGTPEZ]?)/([\d.]+[kMGTPEZ]?) \[[^\]]*B/s`),
		event: download},
	{needle: "B / ", re: regexp.MustCompile(`^\s*(.+?)(?:: reconstructing file)?:\s+(\d+)%\|[^|]*\|\s*([\d.]+[kMGTPEZ]?)B / ([\d.]+[kMGTPEZ]?)B`),
		event: download},
	// Failures, the specific ones first.
	{needle: "CUDA out of memory", re: regexp.MustCompile(`CUDA out of memory\.(?: Tried to allocate ([\d.]+ [KMGT]iB))?`),
		event: func(m []string) Event {
			c := "the GPU ran out of memory"
			if m[1] != "" {
				c += " (CUDA out of memory, trying to allocate " + m[1] + ")"
			}
			return Event{Cause: c + ": the model and its KV cache do not fit the GPUs with these arguments"}
		}},
	{needle: "No available memory for the cache blocks", event: func([]string) Event {
		return Event{Cause: "no GPU memory was left for the KV cache once the model was loaded"}
	}},
	{needle: "Cannot access gated repo for url", re: regexp.MustCompile(`Cannot access gated repo for url https://[^/]+/(?:api/models/)?([^/\s]+/[^/\s]+)`),
		event: func(m []string) Event {
			return Event{Cause: "the Hugging Face repository " + m[1] + " is gated: the token (the tenant's Hugging Face token Secret) must belong to an account that was granted access"}
		}},
	{needle: "GatedRepoError", event: func([]string) Event {
		return Event{Cause: "the Hugging Face repository is gated: the token (the tenant's Hugging Face token Secret) must belong to an account that was granted access"}
	}},
	{needle: "Repository Not Found for url", re: regexp.MustCompile(`Repository Not Found for url: https://[^/]+/(?:api/models/)?([^/\s]+/[^/\s.?]+)`),
		event: func(m []string) Event {
			return Event{Cause: "the Hugging Face repository " + m[1] + " was not found (a wrong model id, or a private repository the token cannot read)"}
		}},
	{needle: "RepositoryNotFoundError", event: func([]string) Event {
		return Event{Cause: "the Hugging Face repository was not found (a wrong model id, or a private repository the token cannot read)"}
	}},
	{needle: "Revision Not Found for url", re: regexp.MustCompile(`Revision Not Found for url: https://[^/]+/api/models/([^/\s]+/[^/\s]+)/revision/([^/\s]+?)\.?$`),
		event: func(m []string) Event {
			return Event{Cause: "the Hugging Face repository " + m[1] + " has no revision " + m[2]}
		}},
	{needle: "RevisionNotFoundError", event: func([]string) Event {
		return Event{Cause: "the model's revision was not found on Hugging Face"}
	}},
	{needle: "Invalid credentials in Authorization header", event: func([]string) Event {
		return Event{Cause: "Hugging Face refused the token (Invalid credentials in Authorization header)"}
	}},
	{needle: "Engine core initialization failed", event: func([]string) Event {
		return Event{Cause: "vLLM's engine failed to start (see the lines before)", Generic: true}
	}},
}

// download reads a huggingface_hub bar: file, percent, done and total in tqdm's SI units.
func download(m []string) Event {
	done, total := size(m[3]), size(m[4])
	name := strings.TrimSpace(m[1])
	return Event{Stage: guestlog.StageDownloadingWeights,
		Detail:   fmt.Sprintf("downloading %s: %s%% of %sB", name, m[2], m[4]),
		Progress: &guestlog.Progress{Done: done, Total: total, Unit: "bytes"}}
}

// trimProcessPrefix drops the "(APIServer pid=1) " prefixes vLLM puts before every line of
// its processes (nested under Ray: "(EngineCore_DP0 pid=7) (RayWorkerWrapper pid=9) ").
func trimProcessPrefix(line string) string {
	for strings.HasPrefix(line, "(") {
		end := strings.Index(line, ") ")
		if end < 0 || !strings.Contains(line[:end], " pid=") {
			break
		}
		line = line[end+2:]
	}
	return line
}

// size reads tqdm's format_sizeof: a number and a power of 1000.
func size(s string) int64 {
	mult := 1.0
	if i := strings.IndexAny(s, "kMGTPEZ"); i >= 0 {
		mult = math.Pow(1000, float64(strings.IndexByte("kMGTPEZ", s[i])+1))
		s = s[:i]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return int64(f * mult)
}

// seconds words a count of seconds: "81 s", "17.1 s".
func seconds(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s + " s"
	}
	if f >= 10 {
		return strconv.FormatFloat(math.Round(f), 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " s"
}

func gib(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}
