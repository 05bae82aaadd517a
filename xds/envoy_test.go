package xds

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/internal/testnet"
	"github.com/inferplane/inferplane/xds/bootstrap"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/health"
	"github.com/inferplane/inferplane/xds/resources"
)

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) int { return testnet.FreePort(t) }

// startEnvoy runs a real Envoy from the bootstrap `inferplane xds bootstrap` prints.
func startEnvoy(t *testing.T, envoy, xdsAddr string, delta bool) (adminURL string) {
	t.Helper()
	adminPort := freePort(t)
	y, err := bootstrap.YAML(bootstrap.Options{NodeID: "envoy-e2e", XDSAddress: xdsAddr,
		AdminAddress: "127.0.0.1:" + strconv.Itoa(adminPort), Delta: delta})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	require.NoError(t, os.WriteFile(path, y, 0o644))
	cmd := exec.Command(envoy, "-c", path, "--concurrency", "1", "--log-level", "warn",
		"--base-id", strconv.Itoa(rand.IntN(1<<20)), "--disable-hot-restart")
	cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	adminURL = "http://127.0.0.1:" + strconv.Itoa(adminPort)
	require.Eventually(t, func() bool {
		resp, err := http.Get(adminURL + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 30*time.Second, 100*time.Millisecond, "envoy never became ready")
	return adminURL
}

// clientTo returns an openai-go client for an endpoint host, connecting to Envoy's listener
// whatever the host name resolves to (no DNS for example.test here).
func clientTo(host string, port int) openai.Client {
	listener := "127.0.0.1:" + strconv.Itoa(port)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, listener)
		},
	}}
	return openai.NewClient(option.WithBaseURL(fmt.Sprintf("http://%s:%d/v1/", host, port)),
		option.WithHTTPClient(hc), option.WithAPIKey("sk-unused"), option.WithMaxRetries(0))
}

// TestThroughEnvoy needs the envoy binary. It proves, through a real Envoy configured only by
// this server, with the official openai-go client: round robin over three replicas, failover
// when one fails, SSE streaming through, and 404 outside the allow-list.
func TestThroughEnvoy(t *testing.T) {
	envoy, err := exec.LookPath("envoy")
	if err != nil {
		t.Skip("SKIPPED: no envoy binary on PATH, so the test through a real Envoy (round robin, failover, " +
			"SSE, 404) could not run here; install Envoy and rerun to run it")
	}
	for _, delta := range []bool{true, false} {
		t.Run(map[bool]string{true: "delta", false: "sotw"}[delta], func(t *testing.T) { throughEnvoy(t, envoy, delta) })
	}
}

func throughEnvoy(t *testing.T, envoy string, delta bool) {
	var ds []*replicadouble.Double
	for i := range 3 {
		d, err := replicadouble.Start(replicadouble.Options{Name: fmt.Sprintf("r%d", i), Model: "qwen", ChunkDelay: 5 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		ds = append(ds, d)
	}
	var file bytes.Buffer
	file.WriteString("endpoints:\n- tenant: acme\n  job: chat\n  replicas:\n")
	for _, d := range ds {
		fmt.Fprintf(&file, "  - {address: %s, port: %d}\n", d.Host(), d.Port())
	}
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	require.NoError(t, os.WriteFile(path, file.Bytes(), 0o644))

	listenerPort := freePort(t)
	rc := resources.DefaultConfig("example.test")
	rc.ListenerAddress, rc.ListenerPort = "127.0.0.1", uint32(listenerPort)
	p := serve(t, Config{
		Source:    &discovery.File{Path: path, Interval: 50 * time.Millisecond},
		Resources: rc,
		Health: health.Config{Path: "/health", Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond,
			UnhealthyThreshold: 2, HealthyThreshold: 2},
	})
	startEnvoy(t, envoy, p.GRPCAddr.String(), delta)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := clientTo("chat.acme.example.test", listenerPort)
	ask := func() (string, error) {
		var resp *http.Response
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "qwen", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, option.WithResponseInto(&resp))
		if err != nil {
			return "", err
		}
		return resp.Header.Get(replicadouble.ReplicaHeader), nil
	}
	// Wait until Envoy has the listener, the route and all three endpoints.
	require.Eventually(t, func() bool {
		seen := map[string]bool{}
		for range 6 {
			r, err := ask()
			if err != nil {
				return false
			}
			seen[r] = true
		}
		return len(seen) == 3
	}, 30*time.Second, 100*time.Millisecond, "envoy never routed to all three replicas")

	// Round robin: each replica gets about a third.
	counts := map[string]int{}
	const n = 90
	for range n {
		r, err := ask()
		require.NoError(t, err)
		counts[r]++
	}
	for _, d := range ds {
		assert.InDelta(t, n/3, counts[d.Name()], n/10, "replica %s got %d of %d requests: %v", d.Name(), counts[d.Name()], n, counts)
	}

	// SSE streams through Envoy, chunk by chunk, with the final usage chunk.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "qwen", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me a long story")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	require.NoError(t, stream.Err())
	assert.Greater(t, chunks, 5)
	require.Len(t, acc.Choices, 1)
	assert.True(t, strings.HasSuffix(acc.Choices[0].Message.Content, "heard: tell me a long story"), acc.Choices[0].Message.Content)
	assert.EqualValues(t, 5, acc.Usage.PromptTokens)

	// Outside the allow-list, and for unknown hosts: 404 from Envoy itself.
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(listenerPort))
	}}}
	before := ds[0].Requests() + ds[1].Requests() + ds[2].Requests()
	for _, u := range []string{
		"http://chat.acme.example.test/v1/audio/transcriptions", // a Parakeet path on a vLLM endpoint
		"http://chat.acme.example.test/metrics",
		"http://chat.acme.example.test/v1//models/../../health",
		"http://nobody.acme.example.test/v1/models",
	} {
		resp, err := raw.Get(u)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 404, resp.StatusCode, u)
		assert.Contains(t, string(body), `"code":"not_found"`, u)
	}
	assert.Equal(t, before, ds[0].Requests()+ds[1].Requests()+ds[2].Requests(), "a 404 must not reach a replica")

	// Failover: r0's health fails; once the server has removed it, nothing reaches it.
	ds[0].SetHealthy(false)
	require.Eventually(t, func() bool {
		for range 6 {
			if r, err := ask(); err != nil || r == "r0" {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "r0 still gets traffic")
	counts = map[string]int{}
	for range 40 {
		r, err := ask()
		require.NoError(t, err, "the endpoint keeps serving from the other replicas")
		counts[r]++
	}
	assert.Zero(t, counts["r0"])
	assert.InDelta(t, 20, counts["r1"], 6, "%v", counts)

	// r1 dies outright: requests are retried on another replica (connect-failure), and the
	// probes remove it.
	require.NoError(t, ds[1].Close())
	failed := 0
	for range 20 {
		if r, err := ask(); err != nil {
			failed++
		} else {
			assert.NotEqual(t, "r1", r)
		}
	}
	assert.LessOrEqual(t, failed, 1, "requests must fail over to the remaining replica")
}
