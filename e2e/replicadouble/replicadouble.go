// Package replicadouble is a TEST DOUBLE of one model replica: a small OpenAI-compatible HTTP
// server that stands in for a vLLM or Parakeet server in tests, since no GPU, model or VM runs
// here. It answers like the real servers do on the wire (the official openai-go client reads
// it) but its "model" only echoes: replies are made of fixed words, and a token is a
// whitespace-separated word.
//
// It serves GET /health (switchable to failing), GET /v1/models, POST /v1/chat/completions and
// /v1/completions (plain or SSE streaming, with a final usage chunk when
// stream_options.include_usage is set), POST /v1/embeddings and POST /v1/audio/transcriptions
// (multipart; every response_format a Parakeet server answers: json, text, verbose_json, srt
// and vtt, the last two as one subtitle cue over the audio's length, or, standing in for vLLM,
// vLLM's refusal of srt and vtt). Every answer carries the X-Inferplane-Replica header naming the double, so
// tests can see which replica a proxy picked, and the usage of each response, so usage
// accounting can be checked.
package replicadouble

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ReplicaHeader names the replica that answered.
const ReplicaHeader = "X-Inferplane-Replica"

// Options configure a Double.
type Options struct {
	// Name identifies the replica in ReplicaHeader and in its replies (default "replica").
	Name string
	// Model is the model id it serves (default "double-model").
	Model string
	// Addr is the listen address (default 127.0.0.1:0). Loopback addresses other than
	// 127.0.0.1 (127.0.0.2, ...) let several doubles share a port, like replicas on one port.
	Addr string
	// ChunkDelay is the pause between two SSE chunks, to make streams last.
	ChunkDelay time.Duration
	// Observe, when set, sees every request but /health before it is answered (tests check
	// what reached the replica: its headers, e.g. the identity the gateway adds).
	Observe func(*http.Request)
	// Runtime is the model server it stands in for where they differ: RuntimeParakeet (the
	// default) or RuntimeVLLM, which refuses transcripts as subtitles.
	Runtime string
}

// The model servers a double stands in for.
const (
	RuntimeParakeet = "parakeet"
	RuntimeVLLM     = "vllm"
)

// Double is a running replica double.
type Double struct {
	opts    Options
	srv     *http.Server
	lis     net.Listener
	healthy atomic.Bool

	mu     sync.Mutex
	counts map[string]int // by path, model requests answered (not /health)
	checks int
}

// Start listens and serves until Close.
func Start(opts Options) (*Double, error) {
	opts.Name = cmp.Or(opts.Name, "replica")
	opts.Model = cmp.Or(opts.Model, "double-model")
	lis, err := net.Listen("tcp", cmp.Or(opts.Addr, "127.0.0.1:0"))
	if err != nil {
		return nil, fmt.Errorf("replica double %s: %w", opts.Name, err)
	}
	d := &Double{opts: opts, lis: lis, counts: map[string]int{}}
	d.healthy.Store(true)
	d.srv = &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.srv.Serve(lis) }()
	return d, nil
}

// Addr is host:port of the listener.
func (d *Double) Addr() string { return d.lis.Addr().String() }

// Host and Port split Addr.
func (d *Double) Host() string { return d.lis.Addr().(*net.TCPAddr).IP.String() }
func (d *Double) Port() int    { return d.lis.Addr().(*net.TCPAddr).Port }

// URL is the base URL (http://host:port).
func (d *Double) URL() string { return "http://" + d.Addr() }

// Name is the replica's name.
func (d *Double) Name() string { return d.opts.Name }

// SetHealthy switches /health between 200 and 503 (model requests are still answered, as
// with a real server whose health check fails first).
func (d *Double) SetHealthy(ok bool) { d.healthy.Store(ok) }

// Requests counts the model requests answered, all paths together.
func (d *Double) Requests() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.counts {
		n += c
	}
	return n
}

// RequestsTo counts the model requests answered on one path.
func (d *Double) RequestsTo(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[path]
}

// HealthChecks counts the /health requests.
func (d *Double) HealthChecks() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checks
}

// Close stops the server at once, dropping open connections (a replica that dies).
func (d *Double) Close() error { return d.srv.Close() }

// Shutdown stops the server after open requests finish.
func (d *Double) Shutdown(ctx context.Context) error { return d.srv.Shutdown(ctx) }

// Handler is the double's HTTP handler, for use without a listener.
func (d *Double) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", d.health)
	mux.HandleFunc("/v1/models", d.models)
	mux.HandleFunc("/v1/chat/completions", d.chat)
	mux.HandleFunc("/v1/completions", d.completions)
	mux.HandleFunc("/v1/embeddings", d.embeddings)
	mux.HandleFunc("/v1/audio/transcriptions", d.transcriptions)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ReplicaHeader, d.opts.Name)
		if d.opts.Observe != nil && r.URL.Path != "/health" {
			d.opts.Observe(r)
		}
		mux.ServeHTTP(w, r)
	})
}

func (d *Double) count(path string) {
	d.mu.Lock()
	d.counts[path]++
	d.mu.Unlock()
}

func (d *Double) health(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.checks++
	d.mu.Unlock()
	if !d.healthy.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// apiError writes an OpenAI-style error.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": nil, "code": code,
	}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func method(w http.ResponseWriter, r *http.Request, m string) bool {
	if r.Method != m {
		w.Header().Set("Allow", m)
		apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
		return false
	}
	return true
}

func (d *Double) models(w http.ResponseWriter, r *http.Request) {
	if !method(w, r, http.MethodGet) {
		return
	}
	d.count(r.URL.Path)
	writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": d.opts.Model, "object": "model", "created": 1700000000, "owned_by": "inferplane-replica-double",
	}}})
}

// Usage is what every answer reports.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Tokens counts tokens the double's way: whitespace-separated words.
func Tokens(s string) int { return len(strings.Fields(s)) }

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats is vLLM's: every chunk carries the usage so far.
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	MaxTokens     *int           `json:"max_tokens"`
	MaxCompTokens *int           `json:"max_completion_tokens"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text reads a message's content: a string or an array of parts of type text.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text + " ")
		}
	}
	return b.String()
}

// reply makes the double's answer to a prompt: fixed words plus an echo, cut at max tokens.
func (d *Double) reply(prompt string, max *int) (words []string, finish string) {
	words = append([]string{"Replica", d.opts.Name, "heard:"}, strings.Fields(prompt)...)
	if len(words) > 64 {
		words = words[:64]
	}
	finish = "stop"
	if max != nil && *max >= 0 && *max < len(words) {
		words, finish = words[:*max], "length"
	}
	return words, finish
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 8<<20))
	if err := dec.Decode(v); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_json", "request body: "+err.Error())
		return false
	}
	return true
}

func (d *Double) model(requested string) string { return cmp.Or(requested, d.opts.Model) }

func (d *Double) chat(w http.ResponseWriter, r *http.Request) {
	if !method(w, r, http.MethodPost) {
		return
	}
	var req chatRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.Messages) == 0 {
		apiError(w, http.StatusBadRequest, "invalid_messages", "messages: at least one message is required")
		return
	}
	d.count(r.URL.Path)
	var prompt strings.Builder
	last := ""
	for _, m := range req.Messages {
		t := m.text()
		prompt.WriteString(t + " ")
		if m.Role == "user" {
			last = t
		}
	}
	words, finish := d.reply(last, cmp.Or(req.MaxCompTokens, req.MaxTokens))
	usage := Usage{PromptTokens: Tokens(prompt.String()), CompletionTokens: len(words)}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	id := "chatcmpl-" + d.opts.Name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	created := time.Now().Unix()
	model := d.model(req.Model)
	if !req.Stream {
		writeJSON(w, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{
				"index": 0, "message": map[string]any{"role": "assistant", "content": strings.Join(words, " ")},
				"finish_reason": finish, "logprobs": nil,
			}},
			"usage": usage,
		})
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	continuous := req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats
	generated := 0
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		if includeUsage {
			c["usage"] = nil
		}
		if continuous {
			c["usage"] = Usage{PromptTokens: usage.PromptTokens, CompletionTokens: generated, TotalTokens: usage.PromptTokens + generated}
		}
		return c
	}
	var chunks []map[string]any
	chunks = append(chunks, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for i, word := range words {
		if i > 0 {
			word = " " + word
		}
		generated = i + 1
		chunks = append(chunks, chunk(map[string]any{"content": word}, nil))
	}
	chunks = append(chunks, chunk(map[string]any{}, finish))
	if includeUsage {
		chunks = append(chunks, map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": usage,
		})
	}
	d.stream(w, r, chunks)
}

// stream writes server-sent events, one per chunk, then [DONE].
func (d *Double) stream(w http.ResponseWriter, r *http.Request, chunks []map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	for i, c := range chunks {
		if i > 0 && d.opts.ChunkDelay > 0 {
			select {
			case <-time.After(d.opts.ChunkDelay):
			case <-r.Context().Done():
				return
			}
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
}

// stringOrList reads a string or a list of strings.
func stringOrList(raw json.RawMessage) ([]string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New("expected a string or a list of strings")
	}
	return list, nil
}

func (d *Double) completions(w http.ResponseWriter, r *http.Request) {
	if !method(w, r, http.MethodPost) {
		return
	}
	var req completionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	prompts, err := stringOrList(req.Prompt)
	if err != nil || len(prompts) == 0 {
		apiError(w, http.StatusBadRequest, "invalid_prompt", "prompt: expected a string or a list of strings")
		return
	}
	d.count(r.URL.Path)
	id := "cmpl-" + d.opts.Name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	created := time.Now().Unix()
	model := d.model(req.Model)
	var usage Usage
	var choices []any
	var texts []string
	var finishes []string
	for i, p := range prompts {
		words, finish := d.reply(p, req.MaxTokens)
		usage.PromptTokens += Tokens(p)
		usage.CompletionTokens += len(words)
		texts = append(texts, strings.Join(words, " "))
		finishes = append(finishes, finish)
		choices = append(choices, map[string]any{"index": i, "text": texts[i], "finish_reason": finish, "logprobs": nil})
	}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	if !req.Stream {
		writeJSON(w, map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": choices, "usage": usage})
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	var chunks []map[string]any
	for i, t := range texts {
		for j, word := range strings.Fields(t) {
			if j > 0 {
				word = " " + word
			}
			chunks = append(chunks, map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
				"choices": []any{map[string]any{"index": i, "text": word, "finish_reason": nil, "logprobs": nil}}})
		}
		chunks = append(chunks, map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": i, "text": "", "finish_reason": finishes[i], "logprobs": nil}}})
	}
	if includeUsage {
		chunks = append(chunks, map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{}, "usage": usage})
	}
	d.stream(w, r, chunks)
}

func (d *Double) embeddings(w http.ResponseWriter, r *http.Request) {
	if !method(w, r, http.MethodPost) {
		return
	}
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	inputs, err := stringOrList(req.Input)
	if err != nil || len(inputs) == 0 {
		apiError(w, http.StatusBadRequest, "invalid_input", "input: expected a string or a list of strings")
		return
	}
	d.count(r.URL.Path)
	var data []any
	tokens := 0
	for i, in := range inputs {
		tokens += Tokens(in)
		// A fixed, input-dependent vector: the double has no model.
		vec := make([]float64, 8)
		for j := range vec {
			vec[j] = float64((len(in)+j*7)%13) / 13
		}
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": vec})
	}
	writeJSON(w, map[string]any{"object": "list", "data": data, "model": d.model(req.Model),
		"usage": map[string]any{"prompt_tokens": tokens, "total_tokens": tokens}})
}

func (d *Double) transcriptions(w http.ResponseWriter, r *http.Request) {
	if !method(w, r, http.MethodPost) {
		return
	}
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_form", "expected a multipart/form-data body: "+err.Error())
		return
	}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		apiError(w, http.StatusBadRequest, "missing_file", "file: required")
		return
	}
	n, _ := io.Copy(io.Discard, f)
	f.Close()
	if r.FormValue("model") == "" {
		apiError(w, http.StatusBadRequest, "missing_model", "model: required")
		return
	}
	d.count(r.URL.Path)
	text := fmt.Sprintf("Replica %s heard %d bytes of %s.", d.opts.Name, n, hdr.Filename)
	// One input token per 100 bytes of audio, the double's stand-in for audio tokens.
	in := int(n/100) + 1
	switch r.FormValue("response_format") {
	case "", "json":
		writeJSON(w, map[string]any{"text": text, "usage": map[string]any{
			"type": "tokens", "input_tokens": in, "output_tokens": Tokens(text), "total_tokens": in + Tokens(text),
		}})
	case "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, text)
	case "verbose_json":
		writeJSON(w, map[string]any{"task": "transcribe", "language": cmp.Or(r.FormValue("language"), "en"),
			"duration": seconds(n), "text": text, "segments": []any{}})
	case "srt", "vtt":
		if d.opts.Runtime == RuntimeVLLM {
			// vLLM lists srt and vtt in its request schema but refuses them (its words).
			apiError(w, http.StatusBadRequest, "BadRequestError", "Currently only support response_format: `text`, `json` or `verbose_json`")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, subtitles(r.FormValue("response_format"), seconds(n), text))
	default:
		apiError(w, http.StatusBadRequest, "invalid_response_format", "response_format: expected json, text, verbose_json, srt or vtt")
	}
}

// seconds is the length of n bytes of audio, as 16 kHz, 16-bit mono PCM.
func seconds(n int64) float64 { return float64(n) / 32000 }

// subtitles is the transcript as one SubRip (srt) or WebVTT (vtt) cue from 0 to the end of the
// audio, as a Parakeet server writes each segment: a number, then "start --> end", then the
// text, then a blank line (srt); a WEBVTT header and cues without numbers (vtt).
func subtitles(format string, end float64, text string) string {
	stamp := func(s float64, sep string) string {
		ms := int64(s*1000 + 0.5)
		return fmt.Sprintf("%02d:%02d:%02d%s%03d", ms/3600000, ms/60000%60, ms/1000%60, sep, ms%1000)
	}
	if format == "srt" {
		return fmt.Sprintf("1\n%s --> %s\n%s\n\n", stamp(0, ","), stamp(end, ","), text)
	}
	return fmt.Sprintf("WEBVTT\n\n%s --> %s\n%s\n\n", stamp(0, "."), stamp(end, "."), text)
}
