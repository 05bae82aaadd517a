package productapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/joblogs/joblogstest"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// A job's logs through the API: any role of the tenant reads them, another tenant's user is
// refused like on every route; lines of both replicas merged, one replica's, a search; the
// stream's every line checked against the OpenAPI document; a follow sees a line appended; a
// crash record turns the replica's stage to crash-looping with the last line.
func TestJobLogs(t *testing.T) {
	ctx := context.Background()
	r := apitest.Remotes{Dir: t.TempDir()}
	pods := joblogstest.New(t)
	r0 := pods.Pod("acme", "qwen3-32b", "virt-launcher-qwen3-32b-r0-n0", 0, 0)
	r1 := pods.Pod("acme", "qwen3-32b", "virt-launcher-qwen3-32b-r1-n0", 1, 0)
	start := time.Now().Add(-20 * time.Second).UTC().Truncate(time.Millisecond)
	r0.Kernel("[    0.000000] Linux version 6.1.0-28-amd64")
	r0.Line(start, "INFO vLLM API server version 0.11.0")
	r1.Line(start.Add(time.Second), "INFO Loading weights took 12.4 seconds")
	r0.Status(start.Add(2*time.Second), guestlog.Status{Stage: guestlog.StageLoadingModel, Since: start, Detail: "Loading safetensors checkpoint shards: 3/8"})

	rep := startReplica(t, r, apitest.BundledInputs(t, r), people, productapi.Options{Clusters: joblogstest.Clusters{Objs: joblogstest.Running("qwen3-32b", "qwen3-32b-r0-n0", "qwen3-32b-r1-n0"), Pods: pods}})
	doc, err := apitest.NewOpenAPI(apitest.Fetch(t, rep.url))
	require.NoError(t, err)
	as := func(tok string) *client.Client {
		c := client.New(rep.url, client.StaticToken(tok))
		c.Inspect = doc.Inspector(t)
		return c
	}
	read := func(c *client.Client, q client.LogQuery) ([]apiv1.LogEntry, error) {
		var out []apiv1.LogEntry
		err := c.Logs(ctx, "acme", "qwen3-32b", q, func(e apiv1.LogEntry) error { out = append(out, e); return nil })
		return out, err
	}
	text := func(es []apiv1.LogEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.VM+" "+e.Kind+" "+e.Line+e.Message)
		}
		return out
	}

	got, err := read(as("vera"), client.LogQuery{})
	require.NoError(t, err, "a viewer reads the logs")
	assert.Equal(t, []string{
		"qwen3-32b-r0-n0 line INFO vLLM API server version 0.11.0",
		"qwen3-32b-r1-n0 line INFO Loading weights took 12.4 seconds",
		"qwen3-32b-r0-n0 status loading-model: loading the model: Loading safetensors checkpoint shards: 3/8",
	}, text(got))
	assert.Equal(t, int32(1), *got[1].Replica)
	assert.Equal(t, int32(0), *got[1].Node)
	assert.Equal(t, "stderr", got[1].Stream)
	assert.Equal(t, start.Add(time.Second), got[1].Time)
	assert.Equal(t, "Loading safetensors checkpoint shards: 3/8", got[2].Status.Detail)

	one := int32(1)
	got, err = read(as("dana"), client.LogQuery{Replica: &one})
	require.NoError(t, err)
	assert.Equal(t, []string{"qwen3-32b-r1-n0 line INFO Loading weights took 12.4 seconds"}, text(got))
	got, err = read(as("dana"), client.LogQuery{Search: "vllm api"})
	require.NoError(t, err)
	assert.Equal(t, "qwen3-32b-r0-n0 line INFO vLLM API server version 0.11.0", text(got)[0])

	_, err = read(as("dana"), client.LogQuery{Replica: ptr(int32(2))})
	assert.True(t, client.IsStatus(err, http.StatusUnprocessableEntity), "%v", err)
	assert.ErrorContains(t, err, "replica 2: job acme/qwen3-32b has 2 replicas (0 to 1)")
	_, err = read(as("dana"), client.LogQuery{Since: "yesterday"})
	assert.True(t, client.IsStatus(err, http.StatusUnprocessableEntity), "%v", err)
	err = as("dana").Logs(ctx, "globex", "llama", client.LogQuery{}, func(apiv1.LogEntry) error { return nil })
	assert.True(t, client.IsStatus(err, http.StatusForbidden), "another tenant's logs are refused: %v", err)
	_, err = read(client.New(rep.url, nil), client.LogQuery{})
	assert.True(t, client.IsStatus(err, http.StatusUnauthorized), "%v", err)

	// A follow shows what is appended, as it comes.
	fctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var followed []string
	done := make(chan error, 1)
	go func() {
		done <- as("dana").Logs(fctx, "acme", "qwen3-32b", client.LogQuery{Follow: true, Tail: ptr(int64(0))}, func(e apiv1.LogEntry) error {
			mu.Lock()
			followed = append(followed, e.VM+" "+e.Line+e.Message)
			mu.Unlock()
			return nil
		})
	}()
	has := func(s string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, f := range followed {
				if strings.Contains(f, s) {
					return true
				}
			}
			return false
		}
	}
	require.Eventually(t, func() bool { return pods.OpenStreams() == 2 }, 10*time.Second, 10*time.Millisecond)
	r1.Line(time.Now(), "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
	require.Eventually(t, has("qwen3-32b-r1-n0 torch.OutOfMemoryError"), 10*time.Second, 10*time.Millisecond)

	// The agent says the server crashed: the replica's stage says so, with the last line.
	now := time.Now()
	r1.Status(now, guestlog.Status{Stage: guestlog.StageCrashLooping, Since: now, Restarts: 5,
		LastExit: &guestlog.Exit{Code: 1, After: 42 * time.Second, At: now, LastLines: []string{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}}})
	require.Eventually(t, has("crash-looping: exit 1 after 42 s, 5 restarts"), 10*time.Second, 10*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	d, err := as("dana").GetJob(ctx, "acme", "qwen3-32b")
	require.NoError(t, err)
	assert.Equal(t, "crash-looping", d.Stage)
	assert.Equal(t, `replica 1: exit 1 after 42 s, 5 restarts; last line: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"`, d.Reason)
	assert.Equal(t, "loading-model", d.ReplicaList[0].Stage)
	assert.Equal(t, "loading the model: Loading safetensors checkpoint shards: 3/8", d.ReplicaList[0].Reason)
	require.NotNil(t, d.ReplicaList[1].Nodes[0].Agent)
	assert.Equal(t, 42.0, d.ReplicaList[1].Nodes[0].Agent.LastExit.AfterSeconds)
	list, err := as("dana").ListJobs(ctx, "acme")
	require.NoError(t, err)
	for _, j := range list.Items {
		if j.Name == "qwen3-32b" {
			assert.Equal(t, "crash-looping", j.Stage)
		}
	}
	t.Logf("answers checked against the OpenAPI document: %v", doc.Checked)
	assert.Positive(t, doc.Checked["GET /api/v1/tenants/{tenant}/jobs/{job}/logs 200"], "each streamed line was checked")
}

// A client that stops reading a follow is cut off after the write deadline, and the reads it
// held back end with it: nothing is buffered for it.
func TestJobLogsCutsOffAStuckClient(t *testing.T) {
	defer productapi.SetLogWriteTimeout(300 * time.Millisecond)()
	r := apitest.Remotes{Dir: t.TempDir()}
	pods := joblogstest.New(t)
	c := pods.Pod("acme", "qwen3-32b", "virt-launcher-qwen3-32b-r0-n0", 0, 0)
	rep := startReplica(t, r, apitest.BundledInputs(t, r), people, productapi.Options{Clusters: joblogstest.Clusters{Objs: joblogstest.Running("qwen3-32b", "qwen3-32b-r0-n0", "qwen3-32b-r1-n0"), Pods: pods}})
	req, err := http.NewRequest(http.MethodGet, rep.url+"/api/v1/tenants/acme/jobs/qwen3-32b/logs?follow=true", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer dana")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, productapi.NDJSON, resp.Header.Get("Content-Type"))
	// The replica prints far more than the sockets hold; the client reads nothing more.
	line := strings.Repeat("x", 4000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 4000 && pods.OpenStreams() > 0; i++ {
			c.Line(time.Now(), line)
		}
	}()
	require.Eventually(t, func() bool { return pods.OpenStreams() == 0 }, 30*time.Second, 20*time.Millisecond,
		"the stuck client's stream is ended and its pod reads closed")
	<-done
}

func ptr[T any](v T) *T { return &v }
