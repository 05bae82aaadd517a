package guest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/e2e/guest"
	"github.com/inferplane/inferplane/xds/health"
)

// The boot test's own master and job: a one-GPU vLLM job whose image is the stand-in model
// server the test builds (vllmstandin), rendered by the real generator like any job.
const (
	standinImage  = "registry.inferplane.test/vllm-standin"
	standinTag    = "1"
	standinMaster = `apiVersion: inferplane.io/v1alpha1
kind: ModelMaster
metadata:
  name: boot-standin
spec:
  runtime: vllm
  model: Qwen/Qwen3-0.6B
  image: ` + standinImage + ":" + standinTag + `
  args: [--max-model-len, "4096"]
  precision: bf16
  tensorParallelSize: 1
  perReplicaGPUCount: 1
`
	standinJob = `apiVersion: inferplane.io/v1alpha1
kind: ManagedInferenceJob
metadata:
  name: boot
spec:
  model: boot-standin
  replicas: 1
  gpuCount: 1
  nodeType: metal3.gpu-h100
  modelCacheSize: 4Gi
`
)

// probeVendorData is the test's own cloud-config, put on the NoCloud disk as vendor-data
// beside the rendered user-data (which it leaves as rendered: bootcmd is a key the user-data
// does not use). It adds, before Docker starts:
//   - a STAND-IN for the NVIDIA container toolkit's hook (nvidia-container-runtime-hook): Docker
//     registers its "gpu" device driver when the hook is on PATH, so the launcher's --gpus all
//     is accepted; the stand-in passes no GPU (there is none) and lets the container start.
//     The real toolkit comes from NVIDIA's repository (GUEST_NVIDIA_CONTAINER_REPO).
//   - an observer that reports on the console what only the inside sees: the token disk's
//     mount options, the server's /health from inside, and, on the first boot, kills the model
//     server's container once it serves, to see it restarted.
const probeVendorData = `#cloud-config
bootcmd:
  - |
    cat > /usr/local/bin/nvidia-container-runtime-hook <<'EOF'
    #!/bin/sh
    # STAND-IN for NVIDIA's container toolkit hook (the boot test's; no GPU here).
    cat > /dev/null
    exit 0
    EOF
    chmod 0755 /usr/local/bin/nvidia-container-runtime-hook
  - |
    cat > /usr/local/bin/inferplane-test-probe <<'EOF'
    #!/bin/bash
    say() { echo "inferplane-test-probe: $*" > /dev/ttyS0; }
    healthy() {
      exec 3<>/dev/tcp/127.0.0.1/8000 || return 1
      printf 'GET /health HTTP/1.0\r\n\r\n' >&3
      head -1 <&3 | grep -q ' 200 '
    }
    for _ in $(seq 3600); do mountpoint -q /run/inferplane/hf-token && break; sleep 1; done
    say "token disk $(findmnt -no OPTIONS /run/inferplane/hf-token | tr , '\n' | grep -x -e ro -e rw || echo unmounted)"
    for _ in $(seq 3600); do healthy 2>/dev/null && break; sleep 2; done
    say "health 200 from inside"
    say "images: $(docker image ls --format '{{.Repository}}:{{.Tag}}' | tr '\n' ' ')"
    if [ -e /var/lib/inferplane/cache-disk/kill-once ]; then
      exit 0
    fi
    touch /var/lib/inferplane/cache-disk/kill-once
    sleep 5
    say "killing the model server's container"
    docker kill inferplane-model-server > /dev/null
    for _ in $(seq 3600); do healthy 2>/dev/null && break; sleep 2; done
    say "health 200 again after the kill"
    EOF
    chmod 0755 /usr/local/bin/inferplane-test-probe
    systemd-run --unit=inferplane-test-probe --no-block /usr/local/bin/inferplane-test-probe
`

// TestGuestBootsARenderedJob boots the guest image that make guest-image builds with a
// rendered single-node job's cloud-init, in QEMU, the way virt-launcher would boot its VMI
// (vm.go), and sees from outside the VM: cloud-init finishing without errors, the cache disk
// formatted on the first boot and reused on the second, the token disk mounted read-only, the
// unit starting the agent and the agent the model server (the stand-in, loaded from a seed disk: the guest cannot
// pull) with its lines and the stage serving in the agent's console records, its /health through
// the port forward in the gateway's prober, and the agent restarting the server
// after its container is killed. The second boot has no seed disk: the image comes from the
// cache disk, where Docker keeps its images.
func TestGuestBootsARenderedJob(t *testing.T) {
	guest.RequireBoot(t)
	tools := guest.Tools(t, "vm", "image")
	disk := guest.Image(t)
	nodes := guest.RenderJob(t, "acme", standinMaster, standinJob)
	require.Len(t, nodes, 1)
	node := nodes[0]

	dir := t.TempDir()
	bin := guest.StaticBinary(t, "./e2e/guest/vllmstandin", filepath.Join(dir, "vllm"))
	archive := guest.FilesImage(t, filepath.Join(dir, "vllm-standin.tar"), standinImage, standinTag, "/usr/local/bin/vllm",
		map[string]string{bin: "/usr/local/bin/vllm"})
	seed := guest.SeedDisk(t, tools, dir, archive)
	cache := filepath.Join(dir, "model-cache.raw")
	require.NoError(t, os.WriteFile(cache, nil, 0o600))
	require.NoError(t, os.Truncate(cache, 4<<30)) // the PVC: sparse, as big as the job asks

	boot := guest.Boot{
		Node: node, RootDisk: disk, VolumeDisks: map[string]string{"model-cache": cache},
		Secrets: map[string]map[string]string{"hf-token": {"token": "hf_bootTestStandInToken"}},
		MaxCPUs: 2, MaxMemoryMiB: 3072, VendorData: probeVendorData, Accel: os.Getenv("INFERPLANE_GUEST_ACCEL"),
	}

	first := boot
	first.Dir, first.ExtraDisks = filepath.Join(dir, "boot1"), []string{seed}
	vm := startVM(t, first, tools)
	waitConsole(t, vm, "cloud-init finished without errors", 45*time.Minute, `inferplane-guest: cloud-init: done`)
	assert.NotContains(t, vm.ConsoleText(), "inferplane-guest: cloud-init errors")
	// The image is make guest-image's without its GPU driver layer (guest.Image), and says so.
	waitConsole(t, vm, "the image's console names the layer it lacks", time.Minute, `inferplane-guest: this image has no NVIDIA driver`)
	waitConsole(t, vm, "the cache disk formatted on first use", time.Minute, `inferplane-cache-disk: formatting the model-cache disk \(first use\)`)
	waitConsole(t, vm, "the token disk mounted read-only", 30*time.Minute, `inferplane-test-probe: token disk ro`)
	waitHealthy(t, vm, 30*time.Minute)
	waitRecord(t, vm, "the agent says serving", 10*time.Minute, func(r guestlog.Record) bool {
		return r.Status != nil && r.Status.Stage == guestlog.StageServing
	})
	waitRecord(t, vm, "the server's own lines, through the agent", time.Minute, func(r guestlog.Record) bool {
		return r.Kind == guestlog.KindLine && strings.Contains(r.Line, "Application startup complete")
	})
	waitConsole(t, vm, "the server restarted after its container was killed", 30*time.Minute,
		`inferplane-test-probe: killing the model server's container`, `inferplane-test-probe: health 200 again after the kill`)
	waitRecord(t, vm, "the agent restarted the server and says serving again", 10*time.Minute, func(r guestlog.Record) bool {
		return r.Status != nil && r.Status.Stage == guestlog.StageServing && r.Status.Restarts >= 1 && r.Status.LastExit != nil
	})
	waitHealthy(t, vm, 10*time.Minute)
	assert.NotContains(t, vm.ConsoleText(), "hf_bootTestStandInToken", "the token never reaches the console")
	vm.Shutdown(5 * time.Minute)

	second := boot
	second.Dir = filepath.Join(dir, "boot2")
	vm = startVM(t, second, tools)
	waitConsole(t, vm, "the cache disk reused on the second boot", 45*time.Minute, `inferplane-cache-disk: reusing the model-cache disk`)
	waitConsole(t, vm, "the image taken from the cache disk, with no seed disk", 30*time.Minute,
		`inferplane-test-probe: images: .*`+regexp.QuoteMeta(standinImage+":"+standinTag))
	waitHealthy(t, vm, 30*time.Minute)
	waitRecord(t, vm, "the agent says serving on the second boot", 10*time.Minute, func(r guestlog.Record) bool {
		return r.Status != nil && r.Status.Stage == guestlog.StageServing
	})
	assert.NotContains(t, vm.ConsoleText(), "inferplane-image-seed: loading", "the second boot had no seed disk")
	vm.Shutdown(5 * time.Minute)
}

func startVM(t *testing.T, b guest.Boot, tools map[string]string) *guest.VM {
	t.Helper()
	start := time.Now()
	vm, err := guest.Start(b, tools)
	require.NoError(t, err)
	t.Cleanup(func() {
		vm.Stop()
		if t.Failed() {
			t.Logf("console of %s (%s):\n%s", b.Node.Name, vm.Console, tail(vm.ConsoleText(), 80))
		}
	})
	t.Logf("%s: QEMU (%s) started; %s", b.Node.Name, vm.Accel, strings.Join(vm.Given, "; "))
	t.Cleanup(func() { t.Logf("%s: %s after start", b.Dir, time.Since(start).Round(time.Second)) })
	return vm
}

// waitConsole waits until every pattern has matched the console, in order of appearance.
func waitConsole(t *testing.T, vm *guest.VM, what string, timeout time.Duration, patterns ...string) {
	t.Helper()
	start := time.Now()
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile(p)
	}
	err := vm.WaitConsole(func(s string) bool {
		for _, re := range res {
			loc := re.FindStringIndex(s)
			if loc == nil {
				return false
			}
			s = s[loc[1]:]
		}
		return true
	}, timeout)
	require.NoError(t, err, "%s: waiting for %q", what, patterns)
	t.Logf("%s: after %s (load %s)", what, time.Since(start).Round(time.Second), load())
}

// waitRecord waits for an agent record (agent/guestlog, the lines the agent writes on the
// serial console) that ok accepts.
func waitRecord(t *testing.T, vm *guest.VM, what string, timeout time.Duration, ok func(guestlog.Record) bool) {
	t.Helper()
	start := time.Now()
	var last *guestlog.Status
	err := vm.WaitConsole(func(s string) bool {
		for _, line := range strings.Split(s, "\n") {
			r, err := guestlog.Decode([]byte(line))
			if err != nil {
				continue
			}
			if r.Status != nil {
				last = r.Status
			}
			if ok(r) {
				return true
			}
		}
		return false
	}, timeout)
	require.NoError(t, err, "%s: the agent's last status: %+v", what, last)
	t.Logf("%s: after %s (load %s)", what, time.Since(start).Round(time.Second), load())
}

// waitHealthy runs the gateway's prober (xds/health) against the model server's /health through
// the VM's port forward until it takes the replica in, what puts the replica in the gateway's
// rotation: its stage serving.
func waitHealthy(t *testing.T, vm *guest.VM, timeout time.Duration) {
	t.Helper()
	port, ok := vm.Ports[8000]
	require.True(t, ok, "the VM forwards no port 8000")
	cfg := health.DefaultConfig()
	cfg.Interval, cfg.Timeout = 5*time.Second, 5*time.Second // an emulated guest answers slowly
	events := make(chan health.Event, 16)
	c, err := health.New(cfg, func(e health.Event) { events <- e }, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go c.Run(ctx)
	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	c.SetTargets([]health.Target{{Key: "acme/" + vm.Boot.Node.Name, URL: url}})
	start := time.Now()
	for {
		select {
		case e := <-events:
			if e.Healthy {
				t.Logf("the gateway's prober took %s in after %s (load %s)", url, time.Since(start).Round(time.Second), load())
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/models", port))
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Contains(t, string(body), "Qwen/Qwen3-0.6B", "the server serves the job's model")
				return
			}
		case <-ctx.Done():
			t.Fatalf("the gateway's prober never found %s healthy in %s", url, timeout)
		}
	}
}

func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
