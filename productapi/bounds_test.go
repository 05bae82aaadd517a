package productapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
)

// consoleStandIn stands in for the web console at /: its one route streams without pause
// (servetest.Flood). The real console's live stream sends an event when something changes and
// a comment every 15 s, so a client that stops reading would take minutes to fill its socket's
// buffers; this one fills them at once, and the server's bound on a stream's writes is reached
// in the test's time.
type consoleStandIn struct{ *servetest.Flood }

func (consoleStandIn) Shutdown() {}

// serveAPI runs productapi.Serve (api serve's own wiring) over inputs on 127.0.0.1 within b,
// and returns its address once it is ready.
func serveAPI(t *testing.T, inputs string, b serve.HTTP, cons productapi.Console) string {
	t.Helper()
	return serveConfig(t, productapi.Config{Listen: "127.0.0.1:0", Inputs: inputsrepo.Options{URL: inputs}, Bounds: b,
		Console: func(http.Handler, string) (productapi.Console, error) { return cons, nil }})
}

// serveConfig runs productapi.Serve with c (signed in by people, no reconcile loop, no logs)
// until the test ends, and returns its address once it is ready.
func serveConfig(t *testing.T, c productapi.Config) string {
	t.Helper()
	listening := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	c.Verifier, c.ReconcileInterval = people, -1
	c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c.Listening = func(addr string) { listening <- addr }
	go func() { done <- productapi.Serve(ctx, c) }()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-listening:
	case err := <-done:
		done <- err // for the clean-up's wait
		t.Fatalf("api serve: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("api serve did not listen")
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 60*time.Second, 20*time.Millisecond, "the API fetches its inputs")
	return addr
}

// TestAPIHoldsAgainstHostileClients attacks `api serve` (the API and the console's streaming
// route on one server) with bounds set short through Config.Bounds: every attack is answered
// or cut, the API serves dana meanwhile, its peak memory stays bounded, and a refused job
// create (10 MB, or nested 100,000 deep) commits nothing to the inputs.
func TestAPIHoldsAgainstHostileClients(t *testing.T) {
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	head := func() string { return gitserver.Git(t, r.Path("inputs"), "rev-parse", "main") }
	before := head()
	stream := servetest.NewFlood()
	addr := serveAPI(t, inputs, serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, StreamWriteTimeout: time.Second, IdleTimeout: 2 * time.Second,
		Conns: serve.Conns{MaxPerClient: 50}}, consoleStandIn{stream})

	dana := http.Header{"Authorization": {"Bearer dana"}}
	normal := servetest.Request(http.MethodGet, "http://"+addr+"/api/v1/tenants/acme/jobs", dana, http.StatusOK)
	nothingCommitted := func(t *testing.T) {
		assert.Equal(t, before, head(), "a refused job create commits nothing to the inputs")
	}
	target := servetest.Target{Addr: addr, Method: http.MethodPost, Path: "/api/v1/tenants/acme/jobs",
		ContentType: "application/json", Header: dana, Normal: normal}
	servetest.Run(t, target, servetest.Options{}, []servetest.Case{
		{Name: "slow header", Attack: servetest.SlowHeader(200 * time.Millisecond), Status: []int{400, 408}, Cut: true},
		{Name: "slow job body", Attack: servetest.SlowBody(200 * time.Millisecond), Status: []int{400, 408}, Cut: true,
			After: nothingCommitted},
		{Name: "500 idle connections from another client", Attack: servetest.IdleConns(500), Cut: true,
			Target: servetest.From("127.0.0.2")},
		{Name: "1 MiB header", Attack: servetest.BigHeader(1 << 20), Status: []int{431}, Cut: true},
		{Name: "10 MB job bodies, four at once", Attack: servetest.BigBody(10_000_000, 4), Status: []int{413}, Cut: true,
			After: nothingCommitted},
		{Name: "a job nested 100,000 deep", Attack: servetest.DeepJSON("name", 100_000), Status: []int{400, 422},
			After: nothingCommitted},
		{Name: "a console stream the client stops reading", Attack: servetest.NeverReadStream(stream.Cut), Cut: true,
			Target: func(t servetest.Target) servetest.Target {
				t.Method, t.Path = http.MethodGet, "/t/acme/jobs/events"
				return t
			}},
	})
}
