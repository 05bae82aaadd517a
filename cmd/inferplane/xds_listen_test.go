package main

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// xds serve exposes /debug, the usage API and the key check: it listens on loopback unless
// told otherwise, and --help says how to expose it.
func TestXDSServeListensOnLoopbackByDefault(t *testing.T) {
	cmd := newXDSServeCmd()
	for name, want := range map[string]string{"grpc-address": "127.0.0.1:18000", "admin-address": "127.0.0.1:9090"} {
		f := cmd.Flags().Lookup(name)
		require.NotNil(t, f, name)
		assert.Equal(t, want, f.DefValue, "--%s", name)
		host, _, err := net.SplitHostPort(f.DefValue)
		require.NoError(t, err)
		assert.True(t, net.ParseIP(host).IsLoopback(), "--%s defaults to %s", name, f.DefValue)
	}
	help, _, err := execCLI(context.Background(), "xds", "serve", "--help")
	require.NoError(t, err)
	for _, want := range []string{"listen on 127.0.0.1 only unless told otherwise", ":18000 and :9090", "every interface"} {
		assert.Contains(t, help, want)
	}
}
