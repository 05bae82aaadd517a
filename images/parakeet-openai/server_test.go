// Package parakeetopenai holds the test of the Parakeet runtime image's server (server.py),
// which this project cannot build into an image (no PyPI here): the server runs on Debian's
// Python with a STAND-IN for NeMo (testdata/nemo), and OpenAI's Go client talks to it.
package parakeetopenai

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServerWithNeMoStandIn: /health says 503 while the model loads and 200 after; the
// transcription answers OpenAI's client (json), and the text, verbose_json, srt and vtt formats
// carry the model's text and segments; a wrong format is refused.
func TestServerWithNeMoStandIn(t *testing.T) {
	python := "/usr/bin/python3" // Debian's: the standard library is all server.py needs here
	if _, err := os.Stat(python); err != nil {
		t.Skipf("SKIPPED: no %s", python)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(python, "server.py")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PYTHONPATH=testdata", "PYTHONDONTWRITEBYTECODE=1", fmt.Sprintf("PARAKEET_PORT=%d", port), "STANDIN_LOAD_SECONDS=2"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	seen503 := false
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		seen503 = seen503 || resp.StatusCode == http.StatusServiceUnavailable
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "server log:\n%s", &out)
	assert.True(t, seen503, "/health answered 503 while the model loaded")

	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("unused"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File: openai.File(bytes.NewReader(make([]byte, 4000)), "talk.wav", "audio/wav"), Model: "nvidia/parakeet-tdt-0.6b-v3",
	})
	require.NoError(t, err)
	assert.Equal(t, "stand-in heard 4000 bytes", res.Text)

	for format, want := range map[string]string{
		"text":         "stand-in heard 4000 bytes\n",
		"verbose_json": `"segments": [{"id": 0, "start": 0.0, "end": 1.25, "text": "stand-in heard"}`,
		"srt":          "1\n00:00:00,000 --> 00:00:01,250\nstand-in heard\n\n2\n00:00:01,250 --> 00:00:02,500\n4000 bytes\n",
		"vtt":          "WEBVTT\n\n00:00:00.000 --> 00:00:01.250\nstand-in heard\n",
	} {
		code, body := post(t, base, format)
		assert.Equal(t, http.StatusOK, code, format)
		assert.Contains(t, body, want, format)
	}
	code, body := post(t, base, "mp3")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "response_format 'mp3'")
	assert.True(t, strings.Contains(out.String(), "loaded: serving"), out.String())
}

func post(t *testing.T, base, format string) (int, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", "talk.wav")
	require.NoError(t, err)
	_, _ = fw.Write(make([]byte, 4000))
	require.NoError(t, mw.WriteField("model", "nvidia/parakeet-tdt-0.6b-v3"))
	require.NoError(t, mw.WriteField("response_format", format))
	require.NoError(t, mw.Close())
	resp, err := http.Post(base+"/v1/audio/transcriptions", mw.FormDataContentType(), &body)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
