package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/inferplane/inferplane/auth/keys"
)

// The defects found by following README as a new user (issue 18), each held here.

// keys create refuses a tenant it cannot check: with no tenants folder and no gateway, or with
// $INFERPLANE_SERVER set to a gateway that does not answer. No key is issued.
func TestKeysCreateRefusesAnUncheckedTenant(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	store := filepath.Join(dir, "keys.db")
	t.Setenv(keys.SecretEnv, strings.Repeat("s", 48))
	t.Setenv(envServerURL, "")
	stdout, _, err := execCLI(context.Background(), "keys", "create", "--store-file", store, "--tenant", "nosuch")
	require.Error(t, err, "nothing to check the tenant against")
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), "pass --tenants DIR or --server URL")
	assert.Empty(t, stdout, "no key printed")
	assert.NoFileExists(t, store, "no key issued")

	t.Setenv(envServerURL, "http://"+closedAddr(t))
	stdout, _, err = execCLI(context.Background(), "keys", "create", "--store-file", store, "--tenant", "nosuch")
	require.Error(t, err, "the gateway named by $INFERPLANE_SERVER does not answer")
	assert.Equal(t, 1, exitCode(err))
	assert.Contains(t, err.Error(), "connection refused")
	assert.Contains(t, err.Error(), "no key was created")
	assert.Empty(t, stdout)
	assert.NoFileExists(t, store)
}

// keys create --file writes the key with mode 0600 and never over a file; a key printed to a
// file others can read draws a warning.
func TestKeysCreateKeyFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(keys.SecretEnv, strings.Repeat("s", 48))
	store, keyFile := filepath.Join(dir, "keys.db"), filepath.Join(dir, "acme.key")
	args := []string{"keys", "create", "--store-file", store, "--tenants", "../../tenants", "--tenant", "acme"}
	stdout, stderr, err := execCLI(context.Background(), append(args, "--file", keyFile)...)
	require.NoError(t, err, stderr)
	assert.Empty(t, stdout)
	st, err := os.Stat(keyFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	key, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	assert.Regexp(t, `^ipk_\S+\n$`, string(key))
	assert.Contains(t, stderr, "wrote the key to "+keyFile)

	_, _, err = execCLI(context.Background(), append(args, "--file", keyFile)...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), keyFile+" exists")
	again, _ := os.ReadFile(keyFile)
	assert.Equal(t, key, again, "the first key is kept")

	// `> file` in a shell: stdout is a file of mode 0644.
	redirect := filepath.Join(dir, "redirect.key")
	f, err := os.OpenFile(redirect, os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	root := newRootCmd()
	var errOut bytes.Buffer
	root.SetOut(f)
	root.SetErr(&errOut)
	root.SetArgs(args)
	require.NoError(t, root.ExecuteContext(context.Background()))
	assert.Contains(t, errOut.String(), "warning: the key went to "+redirect+", which others can read (mode 0644)")
}

// jobs restart --replica of a replica the job does not have names the ones it has, before any
// cluster is asked.
func TestJobsRestartReplicaOutOfRange(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	tr := newJobsTree(t)
	out, err := tr.run(t, "jobs", "restart", "acme/qwen3-32b", "--replica", "7")
	require.Error(t, err, out)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), "--replica 7: the job has replicas 0 and 1")
}

// jobs create --dry-run says "would write" only for a job that passes.
func TestJobsCreateDryRunRefusalWritesNothing(t *testing.T) {
	tr := newJobsTree(t)
	out, err := tr.run(t, "jobs", "create", "acme/chat", "--model", "Qwen/Qwen3-32B", "--gpus", "3", "--dry-run")
	require.Error(t, err)
	assert.NotContains(t, out, "would write")
}

// generate, jobs create and jobs delete do not repeat the bundled corpus's warnings (two
// upstream recipes serve a checkpoint named unlike their path, on purpose); recipe list
// --warnings shows them.
func TestRecipeWarningsOnlyWhenAsked(t *testing.T) {
	tr := newJobsTree(t)
	out, err := tr.run(t, "generate", "--dry-run")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "warning:")
	out, err = tr.run(t, "jobs", "create", "acme/chat", "--model", "Qwen/Qwen3-32B", "--dry-run")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "warning:")

	stdout, _, err := execCLI(context.Background(), "recipe", "list", "--warnings", "--recipes", "../../recipes")
	require.NoError(t, err)
	assert.Contains(t, stdout, `models/thinkingmachines/Inkling.yaml: model.model_id "thinkingmachines/Inkling-NVFP4" differs`)
}

// keys revoke asks first; without a terminal it needs --yes.
func TestKeysRevokeNeedsConfirmation(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(keys.SecretEnv, strings.Repeat("s", 48))
	store := filepath.Join(dir, "keys.db")
	_, _, err := execCLI(context.Background(), "keys", "create", "--store-file", store, "--tenants", "../../tenants", "--tenant", "acme", "-o", "json")
	require.NoError(t, err)
	stdout, _, err := execCLI(context.Background(), "keys", "list", "--store-file", store, "-o", "json")
	require.NoError(t, err)
	var list []keyView
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	require.Len(t, list, 1)

	_, _, err = execCLI(context.Background(), "keys", "revoke", "--store-file", store, list[0].ID)
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), "pass --yes")
	stdout, _, _ = execCLI(context.Background(), "keys", "list", "--store-file", store, "--status", "active", "-o", "json")
	assert.Contains(t, stdout, list[0].ID, "still active")

	stdout, _, err = execCLI(context.Background(), "keys", "revoke", "--store-file", store, "--yes", list[0].ID)
	require.NoError(t, err)
	assert.Contains(t, stdout, "revoked "+list[0].ID)
}

// openPTY opens a pseudo-terminal: the terminal end a program reads, and the end that types.
func openPTY(t *testing.T) (tty, typist *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("SKIPPED: no pseudo-terminals here (/dev/ptmx: %v)", err)
	}
	t.Cleanup(func() { m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, m
}

// syncBuffer is a buffer a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// chat without a prompt, on a terminal, says how to type one before it waits.
func TestChatOnATerminalAsksForThePrompt(t *testing.T) {
	fx := startGatewayFixture(t)
	t.Setenv("INFERPLANE_API_KEY", fx.key)
	tty, typist := openPTY(t)
	root := newRootCmd()
	var out, errOut syncBuffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(tty)
	root.SetArgs([]string{"chat", "chat.acme", "--domain", testDomain, "--gateway", fx.url})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(context.Background()) }()
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "type a prompt, end with Ctrl-D") },
		10*time.Second, 20*time.Millisecond, "chat waits silently")
	_, err := typist.WriteString("Hello there\n\x04")
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("chat did not end at Ctrl-D")
	}
	assert.Contains(t, out.String(), "heard: Hello there")
}

// transcribe --format srt and vtt, as advertised, through the gateway to the Parakeet double.
func TestTranscribeSubtitles(t *testing.T) {
	fx := startGatewayFixture(t)
	t.Setenv("INFERPLANE_API_KEY", fx.key)
	audio := filepath.Join(t.TempDir(), "meeting.wav")
	require.NoError(t, os.WriteFile(audio, make([]byte, 64000), 0o644))
	out, err := fx.run(t, nil, "transcribe", "asr.acme", audio, "--format", "srt")
	require.NoError(t, err)
	assert.Equal(t, "1\n00:00:00,000 --> 00:00:02,000\nReplica asr heard 64000 bytes of meeting.wav.\n\n", out)
	out, err = fx.run(t, nil, "transcribe", "asr.acme", audio, "--format", "vtt")
	require.NoError(t, err)
	assert.Equal(t, "WEBVTT\n\n00:00:00.000 --> 00:00:02.000\nReplica asr heard 64000 bytes of meeting.wav.\n\n", out)
}

// jobs detail with no cluster to read still shows what the files know, and says what it could
// not read and how to read it.
func TestJobsDetailWithoutACluster(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	tr := newJobsTree(t)
	out, err := tr.run(t, "jobs", "detail", "acme/qwen3-32b", "--server", "http://"+closedAddr(t), "--domain", "models.example.com")
	require.Error(t, err)
	assert.Equal(t, 1, exitCode(err))
	assert.NotContains(t, out+err.Error(), "KUBERNETES_MASTER")
	for _, want := range []string{
		"Job:        acme/qwen3-32b",
		"Endpoint:   https://qwen3-32b.acme.models.example.com (API key required)",
		"Master:     qwen3-32b-h100: Qwen/Qwen3-32B (vllm)",
		"Replicas:   2 desired, 1 node x 1 GPU each",
		"Clusters:   not read: the host cluster: no kubeconfig",
	} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, err.Error(), "pass --kubeconfig FILE")
}
