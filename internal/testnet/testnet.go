// Package testnet holds what tests need of the network, on loopback only.
package testnet

import (
	"net"
	"net/http"
	"testing"
)

// FreePort is a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// HostTransport sends every request to the address in its URL (127.0.0.1) with this host
// name, as a client of https://<job>.<tenant>.<domain> would, with no DNS lookup. A client's
// middleware cannot do it: openai-go builds the request after its middleware runs.
type HostTransport string

func (h HostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = string(h)
	return http.DefaultTransport.RoundTrip(r)
}
