package servetest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"
)

// Case is one attack and what the server may do to it.
type Case struct {
	Name   string
	Attack Attack
	// Status lists the answers the server may give (HTTP statuses); Codes the gRPC codes or
	// frames. Cut allows it to close the connection instead; Held, to keep the attack's
	// connection while others are served.
	Status []int
	Codes  []string
	Cut    bool
	Held   bool
	// Memory bounds the growth of the server's peak resident memory over the attack (0:
	// DefaultMemory). In-process servers share it with the attack's client, which sends its
	// data as it makes it.
	Memory int64
	// Target changes the target for this case only (another path, another source address).
	Target func(Target) Target
	// After checks what the attack must not have done (a commit).
	After func(t *testing.T)
}

// DefaultMemory is a peak growth that buffering any of the attacks' bodies (10 MB each, four
// at once) would exceed, and a server holding them to its bounds stays well under.
const DefaultMemory = 32 << 20

// Options of Run.
type Options struct {
	// Within is the generous time every attack must be answered or cut in (0: 60 s): the
	// bounds are set far shorter in the tests, so only a missing bound reaches it.
	Within time.Duration
	// PID is the server's process when it runs as a child (0: this process).
	PID int
}

// Run runs each case against target, one at a time, with target.Normal served meanwhile.
func Run(t *testing.T, target Target, o Options, cases []Case) {
	t.Helper()
	within := o.Within
	if within == 0 {
		within = 60 * time.Second
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			tg := target
			if c.Target != nil {
				tg = c.Target(tg)
			}
			peak, err := StartPeak(o.PID)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			normal := keepServing(ctx, tg)
			r := c.Attack(ctx, tg)
			served, nerr := normal()
			t.Logf("%s: %s; normal requests served meanwhile: %d", c.Name, r, served)
			if err := c.judge(r); err != nil {
				t.Errorf("%s: %v (within %s)", c.Name, err, within)
			}
			if nerr != nil {
				t.Errorf("a normal request failed while the attack ran: %v", nerr)
			}
			growth, err := peak.Growth()
			if err != nil {
				t.Fatal(err)
			}
			bound := c.Memory
			if bound == 0 {
				bound = DefaultMemory
			}
			t.Logf("peak memory grew by %.1f MiB (bound %.0f MiB)", float64(growth)/(1<<20), float64(bound)/(1<<20))
			if growth > bound {
				t.Errorf("the server's peak memory grew by %d bytes, over %d", growth, bound)
			}
			if c.After != nil {
				c.After(t)
			}
		})
	}
}

func (c Case) judge(r Result) error {
	switch {
	case r.Err != nil:
		return fmt.Errorf("neither answered nor cut: %w", r.Err)
	case r.Status != 0 && slices.Contains(c.Status, r.Status),
		r.Code != "" && slices.Contains(c.Codes, r.Code),
		r.Held && c.Held,
		r.Cut && c.Cut: // a cut counts whatever came before it (a GOAWAY)
		return nil
	}
	return fmt.Errorf("the server did what the case does not allow: %s (statuses %v, codes %v, cut %v, held %v)",
		r, c.Status, c.Codes, c.Cut, c.Held)
}

// keepServing sends target's normal request, one after another, until ctx ends or the
// returned function is called; that says how many were served and the first failure. The
// first is sent as the attack starts, so one is always served beside it.
func keepServing(ctx context.Context, target Target) func() (int, error) {
	stop := make(chan struct{})
	type outcome struct {
		n   int
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		n := 0
		for {
			if err := target.Normal(ctx); err != nil {
				done <- outcome{n, err}
				return
			}
			n++
			select {
			case <-stop:
				done <- outcome{n, nil}
				return
			case <-ctx.Done():
				done <- outcome{n, nil}
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() (int, error) {
		close(stop)
		o := <-done
		return o.n, o.err
	}
}

// Get is a normal request: GET url, answered 200.
func Get(url string) func(ctx context.Context) error {
	return Request(http.MethodGet, url, nil, http.StatusOK)
}

// Request is a normal request: method url with header, answered with status want.
func Request(method, url string, header http.Header, want int) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return err
		}
		maps.Copy(req.Header, header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != want {
			return fmt.Errorf("%s %s: %s, want %d", method, url, resp.Status, want)
		}
		return nil
	}
}

// From makes a case's attack connect from another client address (a bound per client is then
// what refuses it, while Normal, from 127.0.0.1, is served).
func From(ip string) func(Target) Target {
	return func(t Target) Target { t.From = ip; return t }
}

// AdminCases are the attacks on an HTTP server none of whose routes reads a body (an admin
// port): a body is answered (405 for a POST) without being read, or cut. The idle connections
// come from 127.0.0.2.
func AdminCases() []Case {
	return []Case{
		{Name: "admin: slow header", Attack: SlowHeader(200 * time.Millisecond), Status: []int{400, 408}, Cut: true},
		{Name: "admin: slow body", Attack: SlowBody(200 * time.Millisecond), Status: []int{405}, Cut: true},
		{Name: "admin: 500 idle connections from another client", Attack: IdleConns(500), Cut: true, Target: From("127.0.0.2")},
		{Name: "admin: 1 MiB header", Attack: BigHeader(1 << 20), Status: []int{431}, Cut: true},
		{Name: "admin: 10 MB bodies, four at once", Attack: BigBody(10_000_000, 4), Status: []int{405}, Cut: true},
	}
}

// GRPCConnCases are the attacks on a gRPC server's connections: its preface sent slowly, 500
// idle connections from 127.0.0.2, an HTTP/2 connection that opens no call, and 1 MiB of
// metadata on a call of method.
func GRPCConnCases(method string) []Case {
	return []Case{
		{Name: "slow preface", Attack: SlowPreface(200 * time.Millisecond), Cut: true},
		{Name: "500 idle connections from another client", Attack: IdleConns(500), Cut: true, Target: From("127.0.0.2")},
		{Name: "an idle HTTP/2 connection", Attack: IdleH2(), Cut: true},
		{Name: "1 MiB of metadata", Attack: BigMetadata(method, 1<<20),
			Codes: []string{"RST_STREAM FRAME_SIZE_ERROR", "RST_STREAM PROTOCOL_ERROR"}, Cut: true},
	}
}
