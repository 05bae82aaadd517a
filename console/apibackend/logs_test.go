package apibackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/apibackend"
	"github.com/inferplane/inferplane/joblogs/joblogstest"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
)

// The console reads a job's log from the API's handler in process, streamed: a follow gets
// the lines as they are printed, the API's roles apply (another tenant's job is not found),
// and when the console stops (the browser went), the API's reads of the VMs' logs end too.
func TestJobLogsInProcess(t *testing.T) {
	pods := joblogstest.New(t)
	c := pods.Pod("acme", "qwen3-32b", "virt-launcher-qwen3-32b-r0-n0", 0, 0)
	c.Line(time.Now(), "INFO vLLM API server version 0.11.0")
	r := apitest.Remotes{Dir: t.TempDir()}
	rep := apitest.StartReplica(t, r, apitest.BundledInputs(t, r), apibackend.Verifier(refuseAll{}),
		productapi.Options{Policy: access.Policy{AdminGroups: []string{"platform-ops"}},
			Clusters: joblogstest.Clusters{Objs: joblogstest.Running("qwen3-32b", "qwen3-32b-r0-n0", "qwen3-32b-r1-n0"), Pods: pods}})
	b := apibackend.New(rep.Server.Handler())

	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- b.JobLogs(ctx, vic, "acme", "qwen3-32b", console.LogQuery{Follow: true}, func(l console.LogLine) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, l.VM+" "+l.Line)
			return nil
		})
	}()
	lines := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	require.Eventually(t, func() bool { return len(lines()) == 1 }, 10*time.Second, 10*time.Millisecond)
	c.Line(time.Now(), "INFO Started server process [1]")
	require.Eventually(t, func() bool { return len(lines()) == 2 }, 10*time.Second, 10*time.Millisecond, "a viewer follows: %v", lines())
	assert.Equal(t, []string{"qwen3-32b-r0-n0 INFO vLLM API server version 0.11.0", "qwen3-32b-r0-n0 INFO Started server process [1]"}, lines())
	cancel()
	require.NoError(t, <-done)
	require.Eventually(t, func() bool { return pods.OpenStreams() == 0 }, 10*time.Second, 10*time.Millisecond, "the API's reads ended with the console's")

	err := b.JobLogs(context.Background(), dana, "globex", "llama", console.LogQuery{}, func(console.LogLine) error { return nil })
	assert.True(t, errors.Is(err, console.ErrNotFound) || isForbidden(err), "another tenant's logs: %v", err)
	err = b.JobLogs(context.Background(), dana, "acme", "nosuch", console.LogQuery{}, func(console.LogLine) error { return nil })
	assert.ErrorIs(t, err, console.ErrNotFound)
}

func isForbidden(err error) bool {
	var p *console.Problem
	return errors.As(err, &p) && p.Status == 403
}
