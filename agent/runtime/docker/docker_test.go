package docker

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/e2e/dockerstandin"
	"github.com/inferplane/inferplane/e2e/modelserverstandin/standinbin"
	"github.com/inferplane/inferplane/e2e/modelserverstandin/transcript"
)

var standinBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "docker-test-")
	if err != nil {
		panic(err)
	}
	if standinBin, err = standinbin.Build(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const image = "vllm/vllm-openai:latest"

func testdata(name string) string {
	return filepath.Join("..", "..", "serverlog", "testdata", name)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// daemon starts the Docker Engine API stand-in whose image runs the stand-in model server
// with args, and the runtime that talks to it.
func daemon(t *testing.T, opts dockerstandin.Options, args ...string) (*dockerstandin.Server, *Runtime) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	if opts.Images == nil {
		opts.Images = map[string]dockerstandin.Image{image: {Program: standinBin, Args: args, Layers: []int64{1000, 3000}}}
	}
	d, err := dockerstandin.Start(sock, opts)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	rt, err := New("unix://" + sock)
	require.NoError(t, err)
	return d, rt
}

type read struct {
	stream guestlog.Stream
	data   string
	cursor runtime.Cursor
}

func readAll(t *testing.T, c runtime.Container, from runtime.Cursor) []read {
	t.Helper()
	var out []read
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, c.Logs(ctx, from, func(ch runtime.Chunk) {
		out = append(out, read{ch.Stream, string(ch.Data), ch.Cursor})
	}))
	if out == nil {
		out = []read{}
	}
	return out
}

// TestRunsAContainerStandIn: the runtime pulls (progress in bytes of the layers), creates
// the container as `docker run` would with the launcher's flags, reads its output in the order
// it was printed with each stream, and gets its exit code (the Docker Engine API stand-in
// runs the stand-in model server printing vLLM's failure on a gated model).
func TestRunsAContainerStandIn(t *testing.T) {
	addr := freeAddr(t)
	d, rt := daemon(t, dockerstandin.Options{}, "--addr", addr, "--script", testdata("vllm-gated.log"), "--speed", "0")
	ctx := context.Background()
	var progress []runtime.PullProgress
	require.NoError(t, rt.Pull(ctx, image, func(p runtime.PullProgress) { progress = append(progress, p) }))
	require.NotEmpty(t, progress)
	assert.Equal(t, runtime.PullProgress{Done: 4000, Total: 4000}, progress[len(progress)-1])
	assert.Less(t, progress[0].Done, progress[0].Total)

	spec := runtime.Spec{Name: "inferplane-model-server", Image: image, Entrypoint: []string{"vllm"},
		Args: []string{"serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"}, Env: []string{"HF_TOKEN=x", "A=b c"},
		Binds: []string{"/var/lib/inferplane/model-cache:/root/.cache/huggingface"}, GPUs: "all", IPC: "host", Network: "host",
		Devices: []string{"/dev/infiniband"}, CapAdd: []string{"IPC_LOCK"}, Ulimits: []string{"memlock=-1"}}
	c, err := rt.Start(ctx, spec)
	require.NoError(t, err)
	code, err := c.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, code)

	ctrs := d.Containers()
	require.Len(t, ctrs, 1)
	cr := ctrs[0].Create
	assert.Equal(t, image, cr.Image)
	assert.Equal(t, []string{"vllm"}, cr.Entrypoint)
	assert.Equal(t, spec.Args, cr.Cmd)
	assert.Equal(t, spec.Env, cr.Env)
	assert.Equal(t, spec.Binds, cr.HostConfig.Binds)
	assert.Equal(t, "host", cr.HostConfig.NetworkMode)
	assert.Equal(t, "host", cr.HostConfig.IpcMode)
	assert.Equal(t, []string{"IPC_LOCK"}, cr.HostConfig.CapAdd)
	require.Len(t, cr.HostConfig.DeviceRequests, 1)
	assert.Equal(t, -1, cr.HostConfig.DeviceRequests[0].Count)
	assert.Equal(t, [][]string{{"gpu"}}, cr.HostConfig.DeviceRequests[0].Capabilities)
	require.Len(t, cr.HostConfig.Devices, 1)
	assert.Equal(t, "/dev/infiniband", cr.HostConfig.Devices[0].PathInContainer)
	require.Len(t, cr.HostConfig.Ulimits, 1)
	assert.Equal(t, int64(-1), cr.HostConfig.Ulimits[0].Soft)
	assert.Equal(t, "json-file", cr.HostConfig.LogConfig.Type)
	assert.Equal(t, "true", cr.Labels[Label])

	steps, err := transcript.Read(testdata("vllm-gated.log"))
	require.NoError(t, err)
	var want, got strings.Builder
	for _, s := range steps {
		if s.Kind == transcript.Write {
			want.WriteString(string(map[int]guestlog.Stream{1: guestlog.Stdout, 2: guestlog.Stderr}[s.Stream]) + " " + s.Text)
		}
	}
	for _, r := range readAll(t, c, runtime.Cursor{}) {
		got.WriteString(string(r.stream) + " " + r.data)
	}
	assert.Equal(t, want.String(), got.String(), "every line, each with its stream, in order")

	st, err := c.State(ctx)
	require.NoError(t, err)
	assert.False(t, st.Running)
	assert.Equal(t, 1, st.ExitCode)
	require.NoError(t, c.Remove(ctx))
	found, err := rt.Find(ctx, spec.Name)
	require.NoError(t, err)
	assert.Nil(t, found)
}

// TestLogsResumeFromACursorStandIn: reading again from any line's cursor gives exactly the
// lines after it, also where several messages share one time (the stand-in truncates times to
// the millisecond, so hundreds of lines do).
func TestLogsResumeFromACursorStandIn(t *testing.T) {
	addr := freeAddr(t)
	_, rt := daemon(t, dockerstandin.Options{Resolution: time.Millisecond}, "--addr", addr, "--flood", "500", "--script", testdata("vllm-gated.log"), "--speed", "0")
	ctx := context.Background()
	require.NoError(t, rt.Pull(ctx, image, nil))
	c, err := rt.Start(ctx, runtime.Spec{Name: "s", Image: image})
	require.NoError(t, err)
	_, err = c.Wait(ctx)
	require.NoError(t, err)
	all := readAll(t, c, runtime.Cursor{})
	require.Greater(t, len(all), 500)
	ties := 0
	for i := 1; i < len(all); i++ {
		if all[i].cursor.Time.Equal(all[i-1].cursor.Time) {
			ties++
		}
	}
	require.Positive(t, ties, "some messages share a time")
	for _, k := range []int{0, 1, 17, 250, 499, len(all) - 2, len(all) - 1} {
		rest := readAll(t, c, all[k].cursor)
		assert.Equal(t, all[k+1:], rest, "from the cursor of message %d", k)
	}
}

// TestStopKillsAfterTheGraceStandIn: docker stop's SIGTERM, then SIGKILL, on a server that
// ignores SIGTERM; starting again under the same name replaces the exited container.
func TestStopKillsAfterTheGraceStandIn(t *testing.T) {
	addr := freeAddr(t)
	d, rt := daemon(t, dockerstandin.Options{}, "--addr", addr, "--hang")
	ctx := context.Background()
	require.NoError(t, rt.Pull(ctx, image, nil))
	c, err := rt.Start(ctx, runtime.Spec{Name: "s", Image: image})
	require.NoError(t, err)
	found, err := rt.Find(ctx, "s")
	require.NoError(t, err)
	require.NotNil(t, found)
	assert.Equal(t, c.ID(), found.ID())
	// Up (its /health answers, 503 while it hangs): it ignores SIGTERM from now on.
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, time.Minute, 10*time.Millisecond)
	require.NoError(t, c.Stop(ctx, time.Second))
	code, err := c.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, 137, code, "SIGKILL after the grace")

	c2, err := rt.Start(ctx, runtime.Spec{Name: "s", Image: image})
	require.NoError(t, err, "the exited container of that name is replaced")
	assert.NotEqual(t, c.ID(), c2.ID())
	assert.Len(t, d.Containers(), 1)
	require.NoError(t, c2.Stop(ctx, time.Second))
}

// TestPullRefusedStandIn: the daemon's (stand-in's) refusal of a pull, and of a container of
// an image it does not have, reach the caller in its words.
func TestPullRefusedStandIn(t *testing.T) {
	_, rt := daemon(t, dockerstandin.Options{})
	err := rt.Pull(context.Background(), "ghcr.io/nobody/nothing:1", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pull access denied for ghcr.io/nobody/nothing")
	_, err = rt.Start(context.Background(), runtime.Spec{Name: "s", Image: "ghcr.io/nobody/nothing:1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "No such image")
}

func TestSplitRef(t *testing.T) {
	for _, tc := range []struct{ ref, from, tag string }{
		{"vllm/vllm-openai:latest", "vllm/vllm-openai", "latest"},
		{"vllm/vllm-openai", "vllm/vllm-openai", "latest"},
		{"registry:5000/team/img", "registry:5000/team/img", "latest"},
		{"registry:5000/team/img:v1", "registry:5000/team/img", "v1"},
		{"ghcr.io/x/y@sha256:abcd", "ghcr.io/x/y@sha256:abcd", ""},
	} {
		from, tag := splitRef(tc.ref)
		assert.Equal(t, tc.from+" "+tc.tag, from+" "+tag, tc.ref)
	}
}
