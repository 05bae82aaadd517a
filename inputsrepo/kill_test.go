package inputsrepo

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The writer process of the kill tests: this test binary run again with these variables set.
const (
	envHelperURL   = "INPUTSREPO_HELPER_URL"
	envHelperCreds = "INPUTSREPO_HELPER_CREDENTIALS"
	envHelperStop  = "INPUTSREPO_HELPER_STOP" // "check": wait after the check, before the commit
)

// TestHelperWriter is not a test: it is the body of the writer process the kill tests start
// (it returns at once in a normal run).
func TestHelperWriter(t *testing.T) {
	url := os.Getenv(envHelperURL)
	if url == "" {
		return
	}
	r, err := Open(Options{URL: url, CredentialsFile: os.Getenv(envHelperCreds)})
	if err != nil {
		t.Fatal(err)
	}
	ch := Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"), IdempotencyKey: "kill-test"}
	if os.Getenv(envHelperStop) == "check" {
		ch.Check = func(context.Context, *Tree) error {
			os.Stdout.WriteString("CHECKED\n")
			time.Sleep(time.Minute) // killed here
			return nil
		}
	}
	_, err = r.Write(context.Background(), ch)
	os.Stdout.WriteString("WROTE " + strings.ReplaceAll(errString(err), "\n", " ") + "\n")
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// startWriter runs the writer process and returns it with its output lines.
func startWriter(t *testing.T, o Options, stop string) (*exec.Cmd, <-chan string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelperURL+"="+o.URL, envHelperCreds+"="+o.CredentialsFile, envHelperStop+"="+stop)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

func waitLine(t *testing.T, lines <-chan string, prefix string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the writer ended before saying %s", prefix)
			if strings.HasPrefix(l, prefix) {
				return
			}
		case <-timeout:
			t.Fatalf("the writer did not say %s", prefix)
		}
	}
}

// A writer process killed after its check, before its commit is pushed: the remote has
// nothing of it, and the request retried on another replica is written once.
func TestWriterKilledBeforePush(t *testing.T) {
	srv, o := httpRemote(t)
	cmd, lines := startWriter(t, o, "check")
	waitLine(t, lines, "CHECKED")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	bare := srv.Dir("inputs")
	assert.Len(t, remoteLog(t, bare), 1, "nothing pushed")
	assert.Zero(t, srv.Pushes.Load())

	res, err := open(t, o).Write(context.Background(), Change{Author: dana, Message: "acme: create job phi",
		Apply: addJob("acme", "phi"), IdempotencyKey: "kill-test"})
	require.NoError(t, err)
	assert.False(t, res.Replayed)
	assert.Len(t, remoteLog(t, bare), 2)
}

// A writer process killed while the remote holds its whole push: the push lands whole, and
// the request retried on another replica is found by its key, not written again.
func TestWriterKilledDuringPush(t *testing.T) {
	srv, o := httpRemote(t)
	received := make(chan struct{})
	killed := make(chan struct{})
	srv.BeforePush = func(req *http.Request) bool {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		close(received)
		<-killed
		return true
	}
	cmd, _ := startWriter(t, o, "")
	select {
	case <-received:
	case <-time.After(60 * time.Second):
		t.Fatal("the writer did not push")
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	close(killed)
	bare := srv.Dir("inputs")
	require.Eventually(t, func() bool { return len(remoteLog(t, bare)) == 2 }, 10*time.Second, 20*time.Millisecond)
	srv.BeforePush = nil

	res, err := open(t, o).Write(context.Background(), Change{Author: dana, Message: "acme: create job phi",
		Apply: addJob("acme", "phi"), IdempotencyKey: "kill-test"})
	require.NoError(t, err)
	assert.True(t, res.Replayed)
	assert.Len(t, remoteLog(t, bare), 2)
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/phi.yaml"), "name: phi")
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/qwen.yaml"), "name: qwen", "the rest as it was")
}
