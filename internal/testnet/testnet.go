// Package testnet holds what tests need of the network, on loopback only.
package testnet

import (
	"net"
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
