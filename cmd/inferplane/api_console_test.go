package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
		{[]string{"--console-dev", "--console-gateway", "127.0.0.1"}, `--console-gateway "127.0.0.1": expected host:port or a URL`},
		{[]string{"--console-dev", "--console-gateway", "ftp://127.0.0.1:21"}, `--console-gateway "ftp://127.0.0.1:21": expected host:port or a URL`},
		{[]string{"--console-dev", "--console-gateway", "http://127.0.0.1:8080/v1"}, "a URL with a port and no path"},
	} {
		_, _, err := execCLI(context.Background(), append([]string{"api", "serve", "--inputs-repo", "file:///nowhere"}, tc.args...)...)
		require.Error(t, err, tc.args)
		assert.Equal(t, 2, exitCode(err), tc.args)
		assert.ErrorContains(t, err, tc.want, tc.args)
		assert.NotContains(t, err.Error(), "--oidc-client-id is required", "--console-dev needs no provider")
	}
}

// --console-gateway as an http:// URL: the playground's https:// request to an endpoint reaches
// that plain listener, with the endpoint's host name.
func TestConsoleGatewayPlainURL(t *testing.T) {
	var host string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host = r.Host
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	defer srv.Close()
	for _, gw := range []string{srv.URL, srv.URL + "/"} {
		tr, err := gatewayTransport(gw)
		require.NoError(t, err, gw)
		req, err := http.NewRequest(http.MethodPost, "https://chat.acme.models.example.com/v1/chat/completions", strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, gw)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, "/v1/chat/completions", string(body), gw)
		assert.Equal(t, "chat.acme.models.example.com", host, gw)
		assert.Equal(t, "https", req.URL.Scheme, "the caller's request is left as it was")
	}
}
