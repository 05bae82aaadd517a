package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// sleeper starts a sleep marked with owner (none when 0), killed when the test ends.
func sleeper(t *testing.T, owner int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if owner != 0 {
		cmd.Env = []string{OwnerEnv + "=" + strconv.Itoa(owner)}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// running: the process is there and not a zombie.
func running(cmd *exec.Cmd) bool {
	f, ok := StatFields(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid)))
	return ok && len(f) > 0 && f[0] != "Z"
}

// TestReapOrphansSparesWhatARunningOwnerStarted: the owner need not be a test binary (make
// demo marks its Dex with its own pid, and a make test beside it must leave that Dex alone);
// once the owner is gone, what it marked is reaped.
func TestReapOrphansSparesWhatARunningOwnerStarted(t *testing.T) {
	owner := sleeper(t, 0) // not a test binary, as make demo is not
	time.Sleep(50 * time.Millisecond)
	marked := sleeper(t, owner.Process.Pid)
	ReapOrphans()
	if !running(marked) {
		t.Fatal("a process whose owner runs was reaped")
	}
	_ = owner.Process.Kill()
	_ = owner.Wait()
	ReapOrphans()
	deadline := time.Now().Add(10 * time.Second)
	for running(marked) {
		if time.Now().After(deadline) {
			t.Fatal("a process whose owner is gone was not reaped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOwnerStartedLaterIsNotTheOwner: a process that started after the marked one has only
// been given the owner's pid again.
func TestOwnerStartedLaterIsNotTheOwner(t *testing.T) {
	marked := sleeper(t, 0)
	time.Sleep(50 * time.Millisecond) // more than a clock tick
	later := sleeper(t, 0)
	dir := filepath.Join("/proc", strconv.Itoa(marked.Process.Pid))
	if ownerAlive(later.Process.Pid, dir) {
		t.Error("a process started after the marked one was taken for its owner")
	}
	if !ownerAlive(os.Getpid(), dir) {
		t.Error("the test binary, which started the marked process, was not taken for its owner")
	}
	if ownerAlive(1<<22+1, dir) {
		t.Error("a pid that does not run was taken for a running owner")
	}
}
