package setupscripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// startMarked starts a sleep carrying e2e/proc's owner mark for owner, as the harnesses mark
// what they start, and stops it when the test ends.
func startMarked(t *testing.T, owner int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), "INFERPLANE_E2E_OWNER="+strconv.Itoa(owner))
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// checkStrays runs hack/check-strays.sh with a cache of its own, so servers of other checkouts'
// caches are not its business here.
func checkStrays(t *testing.T) (string, error) {
	t.Helper()
	script, err := filepath.Abs("../../hack/check-strays.sh")
	require.NoError(t, err)
	cmd := exec.Command(script)
	cmd.Env = append(os.Environ(), "INFERPLANE_CACHE="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCheckStrays: a marked process whose owner runs (and started before it) is not a stray;
// one whose owner has ended is, by its pid. The script once read /proc/PID/stat's fields through
// the wrong positional parameter, failed on every live owner, and called each one's children
// strays.
func TestCheckStrays(t *testing.T) {
	kept := startMarked(t, os.Getpid())
	out, err := checkStrays(t)
	require.NotContains(t, out, fmt.Sprintf("%d sleep", kept.Process.Pid), "a process whose owner runs is not a stray")
	require.NotContains(t, out, "unbound variable")
	if err != nil {
		// Another package's test may have left one of its own: only ours matter here.
		t.Logf("check-strays found others' processes: %s", out)
	}

	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	stray := startMarked(t, gone.Process.Pid)
	out, err = checkStrays(t)
	require.Error(t, err, "a process whose owner has ended is a stray: %s", out)
	require.True(t, strings.Contains(out, fmt.Sprintf("%d sleep 60", stray.Process.Pid)), out)
}
