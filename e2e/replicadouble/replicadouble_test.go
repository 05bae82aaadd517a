package replicadouble

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func start(t *testing.T, opts Options) (*Double, openai.Client) {
	t.Helper()
	d, err := Start(opts)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	client := openai.NewClient(option.WithBaseURL(d.URL()+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return d, client
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The double must speak the protocol of the official client: every test goes through it.

func TestChatWithOpenAIClient(t *testing.T) {
	d, client := start(t, Options{Name: "r0", Model: "qwen"})
	ctx := ctxT(t)
	var resp *http.Response
	out, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("be brief"),
			openai.UserMessage("hello there"),
		},
	}, option.WithResponseInto(&resp))
	require.NoError(t, err)
	assert.Equal(t, "r0", resp.Header.Get(ReplicaHeader))
	require.Len(t, out.Choices, 1)
	assert.Equal(t, "Replica r0 heard: hello there", out.Choices[0].Message.Content)
	assert.Equal(t, "stop", out.Choices[0].FinishReason)
	assert.Equal(t, "qwen", out.Model)
	assert.EqualValues(t, 4, out.Usage.PromptTokens, "be brief hello there")
	assert.EqualValues(t, 5, out.Usage.CompletionTokens)
	assert.EqualValues(t, 9, out.Usage.TotalTokens)

	cut, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "qwen", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a b c d")},
		MaxTokens: openai.Int(2),
	})
	require.NoError(t, err)
	assert.Equal(t, "Replica r0", cut.Choices[0].Message.Content)
	assert.Equal(t, "length", cut.Choices[0].FinishReason)
	assert.Equal(t, 2, d.RequestsTo("/v1/chat/completions"))
}

func TestChatStreamingWithOpenAIClient(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		t.Run(map[bool]string{false: "without usage", true: "with include_usage"}[includeUsage], func(t *testing.T) {
			_, client := start(t, Options{Name: "r1", ChunkDelay: time.Millisecond})
			params := openai.ChatCompletionNewParams{
				Model:    "m",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream this please")},
			}
			if includeUsage {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			stream := client.Chat.Completions.NewStreaming(ctxT(t), params)
			acc := openai.ChatCompletionAccumulator{}
			chunks := 0
			var usageChunks int
			for stream.Next() {
				c := stream.Current()
				acc.AddChunk(c)
				chunks++
				if c.Usage.TotalTokens > 0 {
					usageChunks++
					assert.Empty(t, c.Choices, "the usage chunk has no choices")
				}
			}
			require.NoError(t, stream.Err())
			assert.Greater(t, chunks, 5)
			require.Len(t, acc.Choices, 1)
			assert.Equal(t, "Replica r1 heard: stream this please", acc.Choices[0].Message.Content)
			assert.Equal(t, "stop", acc.Choices[0].FinishReason)
			if includeUsage {
				assert.Equal(t, 1, usageChunks)
				assert.EqualValues(t, 3, acc.Usage.PromptTokens)
				assert.EqualValues(t, 6, acc.Usage.CompletionTokens)
			} else {
				assert.Zero(t, usageChunks)
			}
		})
	}
}

func TestCompletionsModelsEmbeddings(t *testing.T) {
	d, client := start(t, Options{Name: "r2", Model: "llama"})
	ctx := ctxT(t)

	c, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:  "llama",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon")},
	})
	require.NoError(t, err)
	assert.Equal(t, "Replica r2 heard: once upon", c.Choices[0].Text)
	assert.EqualValues(t, 2, c.Usage.PromptTokens)

	stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: "llama", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x y")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var usage int64
	for stream.Next() {
		ch := stream.Current()
		for _, choice := range ch.Choices {
			text.WriteString(choice.Text)
		}
		usage += ch.Usage.TotalTokens
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "Replica r2 heard: x y", text.String())
	assert.EqualValues(t, 7, usage)

	models, err := client.Models.List(ctx)
	require.NoError(t, err)
	require.Len(t, models.Data, 1)
	assert.Equal(t, "llama", models.Data[0].ID)

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "llama",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a b", "c"}},
	})
	require.NoError(t, err)
	require.Len(t, emb.Data, 2)
	assert.Len(t, emb.Data[1].Embedding, 8)
	assert.EqualValues(t, 3, emb.Usage.PromptTokens)
	assert.Equal(t, 4, d.Requests())
}

func TestTranscriptionWithOpenAIClient(t *testing.T) {
	d, client := start(t, Options{Name: "asr0", Model: "nvidia/parakeet-tdt-0.6b-v3"})
	audio := bytes.Repeat([]byte{0x52, 0x49, 0x46, 0x46}, 1000) // 4000 bytes of "audio"
	var resp *http.Response
	out, err := client.Audio.Transcriptions.New(ctxT(t), openai.AudioTranscriptionNewParams{
		File:  openai.File(bytes.NewReader(audio), "meeting.wav", "audio/wav"),
		Model: "nvidia/parakeet-tdt-0.6b-v3",
	}, option.WithResponseInto(&resp))
	require.NoError(t, err)
	assert.Equal(t, "asr0", resp.Header.Get(ReplicaHeader))
	assert.Equal(t, "Replica asr0 heard 4000 bytes of meeting.wav.", out.Text)
	assert.EqualValues(t, 41, out.Usage.InputTokens)
	assert.Equal(t, 1, d.RequestsTo("/v1/audio/transcriptions"))
}

// Subtitles as a Parakeet server writes them (one cue over the 2.5 s of "audio"), and, standing
// in for vLLM, its refusal of them.
func TestTranscriptionSubtitles(t *testing.T) {
	post := func(d *Double, format string) (*http.Response, string) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, err := mw.CreateFormFile("file", "talk.wav")
		require.NoError(t, err)
		_, _ = fw.Write(make([]byte, 80000))
		require.NoError(t, mw.WriteField("model", "m"))
		require.NoError(t, mw.WriteField("response_format", format))
		require.NoError(t, mw.Close())
		resp, err := http.Post(d.URL()+"/v1/audio/transcriptions", mw.FormDataContentType(), &body)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	parakeet, _ := start(t, Options{Name: "asr0"})
	resp, body := post(parakeet, "srt")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Equal(t, "1\n00:00:00,000 --> 00:00:02,500\nReplica asr0 heard 80000 bytes of talk.wav.\n\n", body)
	_, body = post(parakeet, "vtt")
	assert.Equal(t, "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nReplica asr0 heard 80000 bytes of talk.wav.\n\n", body)

	vllm, _ := start(t, Options{Name: "whisper0", Runtime: RuntimeVLLM})
	resp, body = post(vllm, "srt")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "Currently only support response_format: `text`, `json` or `verbose_json`")
	resp, _ = post(vllm, "verbose_json")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestHealthSwitchAndErrors(t *testing.T) {
	d, client := start(t, Options{})
	get := func(path string) int {
		resp, err := http.Get(d.URL() + path)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, 200, get("/health"))
	d.SetHealthy(false)
	assert.Equal(t, 503, get("/health"))
	d.SetHealthy(true)
	assert.Equal(t, 200, get("/health"))
	assert.Equal(t, 3, d.HealthChecks())
	assert.Zero(t, d.Requests(), "health checks are not model requests")
	assert.Equal(t, 404, get("/v1/secret"))
	assert.Equal(t, 405, get("/v1/chat/completions"))

	_, err := client.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "m"})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 400, apiErr.StatusCode)
	assert.Contains(t, apiErr.Message, "at least one message")

	resp, err := http.Post(d.URL()+"/v1/completions", "application/json", strings.NewReader("{nope"))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 400, resp.StatusCode)
	assert.Contains(t, string(body), `"type":"invalid_request_error"`)
}

func TestDoublesShareAPortOnLoopbackAddresses(t *testing.T) {
	a, err := Start(Options{Name: "a", Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer a.Close()
	b, err := Start(Options{Name: "b", Addr: "127.0.0.2:" + strconv.Itoa(a.Port())})
	if err != nil {
		t.Skipf("SKIPPED: this machine does not route 127.0.0.2 to loopback: %v", err)
	}
	defer b.Close()
	resp, err := http.Get(b.URL() + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "b", resp.Header.Get(ReplicaHeader))
	assert.Equal(t, a.Port(), b.Port())
}

// Observe sees every model request, with the headers it came with, and no health check.
func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	_, client := start(t, Options{Name: "r0", Observe: func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("X-Inferplane-Key-Id"))
	}})
	ctx := ctxT(t)
	_, err := client.Models.List(ctx, option.WithHeader("X-Inferplane-Key-Id", "3f9a1c0e5b7d2a41"))
	require.NoError(t, err)
	d, _ := start(t, Options{})
	resp, err := http.Get(d.URL() + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"/v1/models 3f9a1c0e5b7d2a41"}, seen)
}
