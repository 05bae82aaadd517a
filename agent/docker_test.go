package agent

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/agent/runtime/docker"
	"github.com/inferplane/inferplane/e2e/dockerstandin"
)

const standinImage = "vllm/vllm-openai:latest"

// dockerDaemon is the Docker Engine API stand-in whose image runs the stand-in model server.
func dockerDaemon(t *testing.T, args ...string) (*dockerstandin.Server, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	d, err := dockerstandin.Start(sock, dockerstandin.Options{PullStep: 5 * time.Millisecond, Images: map[string]dockerstandin.Image{
		standinImage: {Program: standinBin, Args: args, Layers: []int64{40 << 20, 1 << 30, 2 << 30}},
	}})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d, sock
}

// TestDockerRuntimeStandIn: through the Docker Engine API (its stand-in), the stage shows the
// pull's bytes, then the server's stages; on SIGTERM the container is stopped and removed.
func TestDockerRuntimeStandIn(t *testing.T) {
	addr := freeAddr(t)
	d, sock := dockerDaemon(t, "--addr", addr, "--script", transcriptPath("parakeet-serve.log"), "--speed", "100", "--runtime", "parakeet")
	rt, err := docker.New("unix://" + sock)
	require.NoError(t, err)
	r := startAgent(t, Config{Runtime: rt, Spec: runtime.Spec{Name: "inferplane-model-server", Image: standinImage, GPUs: "all"},
		HealthURL: "http://" + addr + "/health"})
	r.waitFor("serving", isStage(guestlog.StageServing))
	require.NoError(t, r.stop())

	var pulls []guestlog.Progress
	for _, rec := range r.records() {
		if rec.Kind == guestlog.KindStatus && rec.Status.Stage == guestlog.StagePullingImage && rec.Status.Progress != nil {
			pulls = append(pulls, *rec.Status.Progress)
		}
	}
	require.NotEmpty(t, pulls, r.dump())
	assert.Equal(t, guestlog.Progress{Done: 40<<20 + 1<<30 + 2<<30, Total: 40<<20 + 1<<30 + 2<<30, Unit: "bytes"}, pulls[len(pulls)-1])
	assert.Equal(t, []guestlog.Stage{guestlog.StagePullingImage, guestlog.StageStarting, guestlog.StageDownloadingWeights,
		guestlog.StageLoadingModel, guestlog.StageServing, guestlog.StageStopping}, stages(r.records()))
	r.waitFor("NeMo's line", lineContains(guestlog.Stdout, "was successfully restored from"))
	assert.Empty(t, d.Containers(), "stopped and removed")
}
