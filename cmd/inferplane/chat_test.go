package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/replicadouble"
)

const testDomain = "models.example.test"

// gatedStream, once armed, holds a streamed answer after its first token until the client has
// printed it, which proves the client prints tokens as they arrive: a client that waited for
// the whole answer would never open the gate (the hold then times out and says so in
// timedOut).
type gatedStream struct {
	next     http.Handler
	gate     chan struct{}
	once     sync.Once
	timedOut bool
}

// arm makes the next stream wait at its first token, and returns the writer that opens it.
func (g *gatedStream) arm() *tokenWriter {
	g.gate, g.once = make(chan struct{}), sync.Once{}
	return &tokenWriter{g: g}
}

type gatedWriter struct {
	http.ResponseWriter
	g       *gatedStream
	flushes int
}

func (w *gatedWriter) Flush() {
	w.ResponseWriter.(http.Flusher).Flush()
	w.flushes++
	if w.flushes == 2 { // the role chunk, then the first token
		select {
		case <-w.g.gate:
		case <-time.After(10 * time.Second):
			w.g.timedOut = true
		}
	}
}

func (g *gatedStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.next.ServeHTTP(&gatedWriter{ResponseWriter: w, g: g}, r)
}

// tokenWriter records each write of the CLI's stdout and opens the gate at the first one.
type tokenWriter struct {
	mu     sync.Mutex
	writes []string
	g      *gatedStream
}

func (w *tokenWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, string(p))
	w.mu.Unlock()
	w.g.once.Do(func() { close(w.g.gate) })
	return len(p), nil
}

// serveReplica serves h on a loopback port, as a replica's model server.
func serveReplica(t *testing.T, h http.Handler) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

type gatewayFixture struct {
	url   string // the Envoy stand-in
	key   string // a key of acme
	other string // a key of globex
	gated *gatedStream
}

// startGatewayFixture runs `xds serve` (replicas from a file, API keys on) with these
// endpoints of tenant acme behind our Envoy stand-in: chat (vLLM, a replica double whose
// stream the test can hold), asr (Parakeet), down (its one replica fails /health), limited (a
// replica that answers 429, as a rate limit in front of a model server would) and open (no
// key needed).
func startGatewayFixture(t *testing.T) gatewayFixture {
	t.Helper()
	dir := t.TempDir()
	double := func(name string) *replicadouble.Double {
		d, err := replicadouble.Start(replicadouble.Options{Name: name, Model: "Qwen/Qwen3-32B"})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		return d
	}
	chatDouble, _ := replicadouble.Start(replicadouble.Options{Name: "chat", Model: "Qwen/Qwen3-32B"})
	t.Cleanup(func() { chatDouble.Close() })
	open := make(chan struct{})
	close(open)
	gated := &gatedStream{next: chatDouble.Handler(), gate: open}
	chatPort := serveReplica(t, gated)
	asr, down, noKey := double("asr"), double("down"), double("open")
	down.SetHealthy(false)
	limited := serveReplica(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		jsonError(w, http.StatusTooManyRequests, "rate limit reached: 10 requests per minute")
	}))
	eps := filepath.Join(dir, "endpoints.yaml")
	require.NoError(t, os.WriteFile(eps, fmt.Appendf(nil, `endpoints:
- {tenant: acme, job: chat, replicas: [{name: chat-r0-n0, address: 127.0.0.1, port: %d}]}
- {tenant: acme, job: asr, runtime: parakeet, replicas: [{name: asr-r0-n0, address: 127.0.0.1, port: %d}]}
- {tenant: acme, job: down, replicas: [{name: down-r0-n0, address: 127.0.0.1, port: %d}]}
- {tenant: acme, job: limited, replicas: [{name: limited-r0-n0, address: 127.0.0.1, port: %d}]}
- {tenant: acme, job: open, requireAPIKey: false, replicas: [{name: open-r0-n0, address: 127.0.0.1, port: %d}]}
`, chatPort, asr.Port(), down.Port(), limited, noKey.Port()), 0o644))
	secret := writeKeySecret(t)
	store := filepath.Join(dir, "keys.db")
	key := createKey(t, store, secret, "acme")
	other := createKey(t, store, secret, "globex")

	admin, grpcAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := startServe(t, ctx, admin, "--source", "file", "--file", eps, "--domain", testDomain,
		"--grpc-address", grpcAddr, "--admin-address", admin, "--log-level", "warn", "--keys-file", store, "--secret-file", secret,
		"--probe-interval", "100ms", "--probe-timeout", "100ms")
	t.Cleanup(func() { cancel(); _ = waitServe(t, done) })
	fx := gatewayFixture{url: startEnvoyStandIn(t, "http://"+admin, grpcAddr), key: key, other: other, gated: gated}
	var last error
	if !assert.Eventually(t, func() bool {
		_, last = fx.chat(t, nil, "chat.acme", "ping", "--stream=false")
		return last == nil
	}, 20*time.Second, 100*time.Millisecond) {
		t.Fatalf("the gateway does not take the chat replica in: %v", last)
	}
	return fx
}

func createKey(t *testing.T, store, secret, tenant string) string {
	t.Helper()
	key, _, err := execCLI(context.Background(), "keys", "create", "--store-file", store, "--secret-file", secret,
		"--tenants", "../../tenants", "--tenant", tenant)
	require.NoError(t, err)
	return strings.TrimSpace(key)
}

// chat runs `chat` through the stand-in with the fixture's key in the environment, writing
// stdout to out (a buffer when nil).
func (fx gatewayFixture) chat(t *testing.T, out io.Writer, args ...string) (string, error) {
	t.Setenv("INFERPLANE_API_KEY", fx.key)
	return fx.run(t, out, append([]string{"chat"}, args...)...)
}

func (fx gatewayFixture) run(t *testing.T, out io.Writer, args ...string) (string, error) {
	root := newRootCmd()
	var buf strings.Builder
	if out == nil {
		out = &buf
	}
	root.SetOut(out)
	root.SetErr(io.Discard)
	root.SetIn(strings.NewReader(""))
	// The fixture's flags first: a test's own --domain or --gateway comes later and wins.
	root.SetArgs(append([]string{args[0], "--domain", testDomain, "--gateway", fx.url}, args[1:]...))
	err := root.ExecuteContext(context.Background())
	return buf.String(), err
}

// chat streams the answer from a vLLM replica double through our stand-in for Envoy (no Envoy
// binary runs here; see envoyStandIn) and the real key check, token by token: the replica holds its answer after the first token until the CLI has
// printed it, and every token is its own write.
func TestChatStreamsTokenByTokenThroughEnvoyStandIn(t *testing.T) {
	fx := startGatewayFixture(t)
	w := fx.gated.arm()
	_, err := fx.chat(t, w, "chat.acme", "tell", "me", "a", "story")
	require.NoError(t, err)
	assert.False(t, fx.gated.timedOut, "the first token was printed while the replica held the rest")
	assert.Equal(t, []string{"Replica", " chat", " heard:", " tell", " me", " a", " story", "\n"}, w.writes)

	out, err := fx.chat(t, nil, "https://chat.acme."+testDomain, "hi", "--stream=false", "--max-tokens", "2", "--system", "be brief")
	require.NoError(t, err)
	assert.Equal(t, "Replica chat\n", out)

	root := newRootCmd()
	var buf strings.Builder
	root.SetOut(&buf)
	root.SetIn(strings.NewReader("from stdin\n"))
	root.SetArgs([]string{"chat", "chat.acme", "--domain", testDomain, "--gateway", fx.url})
	require.NoError(t, root.ExecuteContext(context.Background()))
	assert.Equal(t, "Replica chat heard: from stdin\n", buf.String())
}

// Every refusal on the way is explained: the gateway's 401, 403, 404, 429 and 503 (through our
// stand-in for Envoy, which cannot run here, and the real key check), a network failure, and bad input before anything is sent.
func TestChatErrorsThroughEnvoyStandIn(t *testing.T) {
	fx := startGatewayFixture(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	l.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(fx.other+"\n"), 0o600))

	cases := []struct {
		name string
		key  string
		args []string
		code int
		want string
	}{
		{"no key", "", []string{"chat.acme", "hi"}, 1, "chat.acme: 401 Unauthorized: missing API key: send Authorization: Bearer <key> or X-API-Key: <key>: no API key was sent: set $INFERPLANE_API_KEY or pass --api-key-file"},
		{"unknown key", "ipk_" + strings.Repeat("x", 54), []string{"chat.acme", "hi"}, 1, "401 Unauthorized: invalid API key: the gateway does not know this key"},
		{"another tenant's key", "", []string{"chat.acme", "hi", "--api-key-file", keyFile}, 1, "403 Forbidden: API key "},
		{"unknown endpoint", fx.key, []string{"nope.acme", "hi"}, 1, "nope.acme: 404 Not Found: no endpoint for host nope.acme." + testDomain + ": no such endpoint on the gateway"},
		{"chat on a speech endpoint", fx.key, []string{"asr.acme", "hi", "--model", "x"}, 1, "404 Not Found: path /v1/chat/completions is not served by this endpoint"},
		{"rate limited", fx.key, []string{"limited.acme", "hi", "--model", "m"}, 1, "limited.acme: 429 Too Many Requests: rate limit reached: 10 requests per minute: the endpoint is at its limit; retry later"},
		{"no healthy replica", fx.key, []string{"down.acme", "hi", "--model", "m"}, 1, "down.acme: 503 Service Unavailable: no healthy replica is serving the endpoint right now (inferplane jobs detail acme/down shows where its replicas are)"},
		{"gateway unreachable", fx.key, []string{"chat.acme", "hi", "--gateway", "http://" + closed}, 1, "chat.acme: cannot reach http://" + closed + " (gateway for chat.acme." + testDomain + "): dial tcp " + closed + ": connect: connection refused"},
		{"key file missing", "", []string{"chat.acme", "hi", "--api-key-file", keyFile + ".nope"}, 1, "--api-key-file: open " + keyFile + ".nope: no such file or directory"},
		{"no domain for job.tenant", fx.key, []string{"chat.acme", "hi", "--domain", ""}, 2, `endpoint "chat.acme" is <job>.<tenant>: set --domain or $INFERPLANE_DOMAIN`},
		{"bad endpoint", fx.key, []string{"ftp://chat", "hi"}, 2, `endpoint "ftp://chat": expected https://<job>.<tenant>.<domain>`},
		{"no prompt", fx.key, []string{"chat.acme"}, 2, "no prompt: give it after the endpoint or on stdin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("INFERPLANE_API_KEY", tc.key)
			_, err := fx.run(t, nil, append([]string{"chat"}, tc.args...)...)
			require.Error(t, err)
			assert.Equal(t, tc.code, exitCode(err), err.Error())
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), fx.key, "the key is never in a message")
			assert.NotContains(t, err.Error(), fx.other)
		})
	}

	t.Setenv("INFERPLANE_API_KEY", "")
	out, err := fx.run(t, nil, "chat", "open.acme", "hi", "--stream=false")
	require.NoError(t, err, "an endpoint without keys needs none")
	assert.Equal(t, "Replica open heard: hi\n", out)
}

// transcribe sends a file to the Parakeet double through our stand-in for Envoy (which cannot
// run here) and the real key check and
// prints the transcript; an unreadable file is refused before anything is sent.
func TestTranscribeThroughEnvoyStandIn(t *testing.T) {
	fx := startGatewayFixture(t)
	t.Setenv("INFERPLANE_API_KEY", fx.key)
	audio := filepath.Join(t.TempDir(), "meeting.wav")
	require.NoError(t, os.WriteFile(audio, make([]byte, 3200), 0o644))

	out, err := fx.run(t, nil, "transcribe", "asr.acme", audio)
	require.NoError(t, err)
	assert.Equal(t, "Replica asr heard 3200 bytes of meeting.wav.\n", out)
	out, err = fx.run(t, nil, "transcribe", "asr.acme", audio, "--format", "text", "--language", "en")
	require.NoError(t, err)
	assert.Equal(t, "Replica asr heard 3200 bytes of meeting.wav.\n", out)
	out, err = fx.run(t, nil, "transcribe", "asr.acme", audio, "--format", "verbose_json", "--language", "de")
	require.NoError(t, err)
	assert.Contains(t, out, `"language":"de"`)

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"asr.acme", audio + ".nope"}, 1, "audio file: open " + audio + ".nope: no such file or directory"},
		{[]string{"asr.acme", filepath.Dir(audio)}, 1, "audio file " + filepath.Dir(audio) + ": not a regular file"},
		{[]string{"asr.acme", audio, "--format", "mp3"}, 2, `--format "mp3": expected one of json, text, verbose_json, srt, vtt`},
		{[]string{"chat.acme", audio, "--model", "m"}, 1, "404 Not Found: path /v1/audio/transcriptions is not served by this endpoint"},
	} {
		_, err := fx.run(t, nil, append([]string{"transcribe"}, tc.args...)...)
		require.Error(t, err)
		assert.Equal(t, tc.code, exitCode(err))
		assert.Contains(t, err.Error(), tc.want)
	}
	empty := filepath.Join(t.TempDir(), "empty.wav")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = fx.run(t, nil, "transcribe", "asr.acme", empty)
	assert.ErrorContains(t, err, "audio file "+empty+": empty")
}
