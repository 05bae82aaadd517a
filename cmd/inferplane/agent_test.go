package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/runtime"
)

// The agent's usage errors exit 2 before anything runs; its flags end at the image, so the
// server's own flags are not the agent's.
func TestAgentUsageErrors(t *testing.T) {
	dir := t.TempDir()
	base := []string{"agent", "--console", dir + "/console", "--state-dir", dir + "/state"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--engine", "podman", "img"}, `--engine "podman": expected docker or process`},
		{[]string{"--env", "=x", "img"}, `--env "=x": want KEY=VALUE or KEY`},
		{[]string{"--secret-env", "KEY", "img"}, `--secret-env "KEY": want KEY=FILE`},
		{[]string{"--stop-grace", "0s", "img"}, "--stop-grace 0s: want a positive duration"},
		{[]string{"--docker-host", "tcp://1.2.3.4:2375", "img"}, "want unix:///path/to/docker.sock"},
		{nil, "requires at least 1 arg(s)"},
		{[]string{"--no-such-flag", "img"}, "unknown flag: --no-such-flag"},
	} {
		_, _, err := execCLI(context.Background(), append(base, tc.args...)...)
		require.Error(t, err, "%v", tc.args)
		assert.Equal(t, 2, exitCode(err), "%v: %v", tc.args, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// The server's environment: --env KEY=VALUE as written, --env KEY from the agent's own, a
// --secret-env from its file (and redacted), a missing secret file left out with a note; the
// values redacted are the secret files', $HF_TOKEN and the token file's.
func TestAgentEnv(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "wandb"), []byte("wandb-5f0c1d2e3a4b5c6d\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("hf_fromTheTokenFile0123456789abcdef"), 0o600))
	t.Setenv("HF_TOKEN", "hf_fromTheEnvironment0123456789abcd")
	t.Setenv("FROM_AGENT", "yes")
	f := &agentFlags{env: []string{"A=b=c", "FROM_AGENT", "UNSET_HERE"},
		secretEnv:   []string{"WANDB_API_KEY=" + filepath.Join(dir, "wandb"), "GONE=" + filepath.Join(dir, "missing")},
		hfTokenFile: filepath.Join(dir, "token")}
	var spec runtime.Spec
	secrets, notes, err := agentEnv(&spec, f)
	require.NoError(t, err)
	assert.Equal(t, []string{"A=b=c", "FROM_AGENT=yes", "WANDB_API_KEY=wandb-5f0c1d2e3a4b5c6d"}, spec.Env)
	assert.Equal(t, []string{"wandb-5f0c1d2e3a4b5c6d", "hf_fromTheEnvironment0123456789abcd", "hf_fromTheTokenFile0123456789abcdef"}, secrets)
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "GONE is not set: its secret file")
}
