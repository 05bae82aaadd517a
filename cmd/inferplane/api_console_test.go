package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The console's flags: --console-dev makes the provider's flags optional and is refused
// beyond 127.0.0.1, beside a provider, and without the console; each a usage error naming it.
func TestAPIServeConsoleUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--console-dev", "--listen", "0.0.0.0:8080"}, "refused unless the server listens on 127.0.0.1"},
		{[]string{"--console-dev", "--oidc-issuer", "https://login.example.com"}, "leave out --oidc-issuer, or --console-dev"},
		{[]string{"--console-dev", "--no-console"}, "--console-dev signs in to the console, which --no-console turns off"},
	} {
		_, _, err := execCLI(context.Background(), append([]string{"api", "serve", "--inputs-repo", "file:///nowhere"}, tc.args...)...)
		require.Error(t, err, tc.args)
		assert.Equal(t, 2, exitCode(err), tc.args)
		assert.ErrorContains(t, err, tc.want, tc.args)
		assert.NotContains(t, err.Error(), "--oidc-client-id is required", "--console-dev needs no provider")
	}
}
