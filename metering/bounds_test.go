package metering

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
)

// noClusters is a registry that lists no tenant cluster: the meter is ready at once.
type noClusters struct{}

func (noClusters) Run(ctx context.Context, out chan<- clusters.Snapshot) error {
	select {
	case out <- clusters.Snapshot{}:
	case <-ctx.Done():
	}
	<-ctx.Done()
	return nil
}

// TestMeterAdminHoldsAgainstHostileClients: the meter's admin port, run by Serve as meter serve
// runs it, answers its normal requests while slow and oversized clients are cut
// (servetest.AdminCases; short bounds so that the test is quick).
func TestMeterAdminHoldsAgainstHostileClients(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	admin := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Config{Dir: t.TempDir(), Registry: noClusters{}, Logger: slog.New(slog.DiscardHandler)}, admin,
			serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
				IdleTimeout: 2 * time.Second, MaxHeaderBytes: 16 << 10, Conns: serve.Conns{MaxPerClient: 50}})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	require.Eventually(t, func() bool { return servetest.Get("http://"+admin+"/readyz")(ctx) == nil }, 30*time.Second, 10*time.Millisecond)
	servetest.Run(t, servetest.Target{Addr: admin, Method: http.MethodPost, Path: "/metrics",
		Normal: servetest.Get("http://" + admin + "/v1/meter/usage?tenant=acme")}, servetest.Options{}, servetest.AdminCases())
}
