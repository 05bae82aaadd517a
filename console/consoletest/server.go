package consoletest

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/inferplane/inferplane/console"
)

// Server is a console served on 127.0.0.1 for a test: the small server the API's `api serve`
// stands in for until it mounts the console itself.
type Server struct {
	// URL is http://127.0.0.1:<port>, without a trailing slash.
	URL     string
	Addr    string
	Handler *console.Handler
}

// Start listens on a free port of 127.0.0.1, builds the console with the options opts makes
// for that address (the redirect URL and the development sign-in's check need it), serves it
// and stops it when the test ends.
func Start(t testing.TB, opts func(addr string) console.Options) *Server {
	t.Helper()
	return StartAt(t, "127.0.0.1:0", opts)
}

// StartAt is Start on a given address (one whose port a test had to know first, e.g. for an
// identity provider's redirect URI).
func StartAt(t testing.TB, listen string, opts func(addr string) console.Options) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	h, err := console.New(opts(addr))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Streams (the live jobs list) do not end by themselves: the console ends them first.
		h.Shutdown()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	})
	return &Server{URL: "http://" + addr, Addr: addr, Handler: h}
}

// Key is a fresh session key.
func Key() []byte {
	k := make([]byte, console.KeySize)
	_, _ = rand.Read(k)
	return k
}
