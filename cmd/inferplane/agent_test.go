package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
