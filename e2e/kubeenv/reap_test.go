package kubeenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/proc"
)

// The reaper kills an orphaned server the harness started (its binary in the folder, the marker
// on its command line) and leaves alone an orphan from the same folder without the marker: a
// developer's own API server. Both "servers" are copies of sh, orphaned by a shell that exits.
func TestReapOnlyWhatTheHarnessStarted(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	bin := t.TempDir()
	data, err := os.ReadFile(sh)
	require.NoError(t, err)
	fake := filepath.Join(bin, "kube-apiserver")
	require.NoError(t, os.WriteFile(fake, data, 0o755))

	marked := "--cert-dir=" + filepath.Join(os.TempDir(), processMarker+"reaptest", "apiserver")
	own := "--cert-dir=/home/dev/.kube/apiserver"
	// The inner shells run `sleep; :` so they stay themselves rather than exec sleep.
	script := fake + ` -c 'sleep 300; :' ` + marked + ` >/dev/null 2>&1 & echo $!; ` +
		fake + ` -c 'sleep 300; :' ` + own + ` >/dev/null 2>&1 & echo $!`
	out, err := exec.Command(sh, "-c", script).Output()
	require.NoError(t, err)
	pids := strings.Fields(string(out))
	require.Len(t, pids, 2)
	harness, _ := strconv.Atoi(pids[0])
	developer, _ := strconv.Atoi(pids[1])
	t.Cleanup(func() {
		_ = syscall.Kill(harness, syscall.SIGKILL)
		_ = syscall.Kill(developer, syscall.SIGKILL)
	})
	// The outer shell has exited: both are orphans now.
	require.Eventually(t, func() bool {
		return !parentAlive(filepath.Join("/proc", pids[0])) && !parentAlive(filepath.Join("/proc", pids[1]))
	}, 10*time.Second, 10*time.Millisecond)

	reapOrphans(bin)
	assert.Eventually(t, func() bool { return !running(harness) }, 10*time.Second, 10*time.Millisecond, "the harness's orphan is killed")
	assert.True(t, running(developer), "a server the harness did not start is left alone")
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	f, ok := proc.StatFields(filepath.Join("/proc", strconv.Itoa(pid)))
	return ok && len(f) > 0 && f[0] != "Z"
}
