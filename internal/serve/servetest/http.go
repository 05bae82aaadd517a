package servetest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Target is a server under attack.
type Target struct {
	// Addr is the server's host:port (127.0.0.1).
	Addr string
	// TLS, when set, wraps every attack's connection (HTTP/1.1 over TLS).
	TLS *tls.Config
	// From is the address attacks connect from: 127.0.0.2 to test a bound per client while
	// Normal connects from 127.0.0.1; "" lets the kernel choose.
	From string
	// Method, Path, Header and ContentType are the request attacks send (default GET /);
	// Header carries what lets it reach the handler (a token).
	Method, Path, ContentType string
	Header                    http.Header
	// Normal is a normal client's request: it must succeed while every attack runs.
	Normal func(ctx context.Context) error
}

// Result is what the server did to an attack.
type Result struct {
	// Status is the HTTP status the server answered with (0: none); Code a gRPC status code
	// or frame the server answered with ("" none).
	Status int
	Code   string
	// Cut: the server closed the connection. Conns is how many connections an attack on
	// connections opened, all of which were cut.
	Cut   bool
	Conns int
	// Held: the attack held its connection while Normal was served (the bound is on how many
	// such a client may hold, not how long), and gave it up itself.
	Held bool
	Took time.Duration
	Err  error
}

func (r Result) String() string {
	return fmt.Sprintf("status %d, code %q, cut %v, conns %d, held %v after %s, err %v", r.Status, r.Code, r.Cut, r.Conns, r.Held,
		r.Took.Round(time.Millisecond), r.Err)
}

// Attack runs against t until the server answers or cuts it, or ctx ends.
type Attack func(ctx context.Context, t Target) Result

// dial connects to t from t.From (and does the TLS handshake when t.TLS is set).
func dial(ctx context.Context, t Target) (net.Conn, error) {
	d := net.Dialer{}
	if t.From != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(t.From)}
	}
	c, err := d.DialContext(ctx, "tcp", t.Addr)
	if err != nil || t.TLS == nil {
		return c, err
	}
	tc := tls.Client(c, t.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// head is the start of t's request: its request line and headers, without the blank line.
func head(t Target, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", cmpOr(t.Method, http.MethodGet), cmpOr(t.Path, "/"), t.Addr)
	if t.ContentType != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", t.ContentType)
	}
	for k, vs := range t.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	return b.String()
}

func cmpOr(v, d string) string {
	if v != "" {
		return v
	}
	return d
}

// answer reads the server's answer on c, once: its status, or a cut.
func answer(c net.Conn) <-chan Result {
	out := make(chan Result, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			out <- Result{Cut: true}
			return
		}
		resp.Body.Close()
		out <- Result{Status: resp.StatusCode}
	}()
	return out
}

// trickle writes data a byte every interval until the server answers or cuts, or ctx ends.
func trickle(ctx context.Context, t Target, prefix, data string, every time.Duration) Result {
	start := time.Now()
	c, err := dial(ctx, t)
	if err != nil {
		return Result{Err: err}
	}
	defer c.Close()
	got := answer(c)
	if _, err := io.WriteString(c, prefix); err != nil {
		return finish(ctx, got, start)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(data) {
		if _, err := c.Write([]byte{data[i]}); err != nil {
			return finish(ctx, got, start) // cut: the answer's reader says so
		}
		select {
		case r := <-got:
			r.Took = time.Since(start)
			return r
		case <-ctx.Done():
			return Result{Took: time.Since(start), Err: ctx.Err()}
		case <-tick.C:
		}
	}
}

func finish(ctx context.Context, got <-chan Result, start time.Time) Result {
	select {
	case r := <-got:
		r.Took = time.Since(start)
		return r
	case <-ctx.Done():
		return Result{Took: time.Since(start), Err: ctx.Err()}
	}
}

// SlowHeader sends a request's headers a byte every interval, never finishing them.
func SlowHeader(every time.Duration) Attack {
	return func(ctx context.Context, t Target) Result {
		return trickle(ctx, t, "", head(t)+"X-Slow: ", every)
	}
}

// SlowBody sends a request's headers, announcing a 100 kB body, then the body a byte every
// interval. The size is under the 256 KiB that net/http reads on its own of a body its handler
// left unread, before it reuses the connection: a server must bound that read too.
func SlowBody(every time.Duration) Attack {
	return func(ctx context.Context, t Target) Result {
		return trickle(ctx, t, head(t, "Content-Length: 100000")+"\r\n", "{", every)
	}
}

// BigHeader sends a request with a header of size bytes.
func BigHeader(size int) Attack {
	return func(ctx context.Context, t Target) Result {
		return send(ctx, t, head(t, "X-Big: "+strings.Repeat("a", size))+"\r\n", nil, 0)
	}
}

// BigBody sends parallel requests at once, each with a body of size bytes: a JSON document
// that stays valid up to its last byte ({"x":"aaa...), made as it is sent (the attacker holds
// none of it). It reports the first that is not answered or cut.
func BigBody(size int64, parallel int) Attack {
	return func(ctx context.Context, t Target) Result {
		results := make([]Result, parallel)
		var wg sync.WaitGroup
		for i := range parallel {
			wg.Go(func() {
				body := io.MultiReader(strings.NewReader(`{"x":"`), as{})
				results[i] = send(ctx, t, head(t, fmt.Sprintf("Content-Length: %d", size))+"\r\n", body, size)
			})
		}
		wg.Wait()
		for _, r := range results {
			if r.Err != nil || (r.Status == 0 && !r.Cut) {
				return r
			}
		}
		return results[0]
	}
}

// DeepJSON sends a JSON body nested depth levels deep: {"<field>": [[[...]]]}.
func DeepJSON(field string, depth int) Attack {
	body := `{"` + field + `":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}"
	return func(ctx context.Context, t Target) Result {
		if t.ContentType == "" {
			t.ContentType = "application/json"
		}
		return send(ctx, t, head(t, fmt.Sprintf("Content-Length: %d", len(body)))+"\r\n", strings.NewReader(body), int64(len(body)))
	}
}

// send writes a request (its head, then n bytes of body) and waits for the answer or the cut.
// The write goes on beside the wait: a server may answer (413) before the body is sent.
func send(ctx context.Context, t Target, h string, body io.Reader, n int64) Result {
	start := time.Now()
	c, err := dial(ctx, t)
	if err != nil {
		return Result{Err: err}
	}
	defer c.Close()
	got := answer(c)
	go func() {
		if _, err := io.WriteString(c, h); err != nil || body == nil {
			return
		}
		_, _ = io.Copy(c, io.LimitReader(body, n))
	}()
	return finish(ctx, got, start)
}

// as is an endless run of 'a'.
type as struct{}

func (as) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// IdleConns opens n connections that send nothing and waits until the server has closed every
// one (at once, for a bound per client, or at its timeout).
func IdleConns(n int) Attack {
	return func(ctx context.Context, t Target) Result {
		start := time.Now()
		t.TLS = nil // no handshake either: an idle TCP connection
		closed := make(chan struct{}, n)
		for range n {
			c, err := dial(ctx, t)
			if err != nil {
				return Result{Err: fmt.Errorf("connection %d: %w", len(closed), err), Took: time.Since(start)}
			}
			defer c.Close()
			go func() {
				_, _ = io.Copy(io.Discard, c) // returns when the server closes it
				closed <- struct{}{}
			}()
		}
		for i := range n {
			select {
			case <-closed:
			case <-ctx.Done():
				return Result{Conns: n, Took: time.Since(start), Err: fmt.Errorf("%d of %d connections still open: %w", n-i, n, ctx.Err())}
			}
		}
		return Result{Conns: n, Cut: true, Took: time.Since(start)}
	}
}

// NeverReadStream asks for t's streaming route, reads the answer's headers and then nothing.
// cut says (from the server's side) that a write to it failed; once it has, the connection
// must end: what the client left unread drains, then the server's close.
func NeverReadStream(cut func(ctx context.Context) error) Attack {
	return func(ctx context.Context, t Target) Result {
		start := time.Now()
		c, err := dial(ctx, t)
		if err != nil {
			return Result{Err: err}
		}
		defer c.Close()
		if _, err := io.WriteString(c, head(t)+"\r\n"); err != nil {
			return Result{Err: err}
		}
		br := bufio.NewReaderSize(c, 4096)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return Result{Err: fmt.Errorf("the stream did not start: %w", err)}
		}
		if resp.StatusCode != http.StatusOK {
			return Result{Status: resp.StatusCode, Err: fmt.Errorf("the stream did not start: %s", resp.Status)}
		}
		if err := cut(ctx); err != nil {
			return Result{Took: time.Since(start), Err: fmt.Errorf("the server still writes to a client that stopped reading: %w", err)}
		}
		took := time.Since(start)
		drained := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, br); close(drained) }()
		select {
		case <-drained:
			return Result{Cut: true, Took: took}
		case <-ctx.Done():
			return Result{Took: took, Err: fmt.Errorf("the connection stayed open after the failed write: %w", ctx.Err())}
		}
	}
}

// Flood is a streaming route that writes without pause, flushing every write, until a write
// fails: its client stopped reading and the server's bound cut it. It stands in for a
// streaming route whose writes are too rare to fill a socket's buffers in a test's time.
type Flood struct {
	once sync.Once
	cut  chan struct{}
}

// NewFlood is a Flood whose writes have not failed yet.
func NewFlood() *Flood { return &Flood{cut: make(chan struct{})} }

func (f *Flood) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := []byte("data: " + strings.Repeat("x", 32<<10) + "\n\n")
	for {
		if _, err := w.Write(chunk); err != nil {
			f.once.Do(func() { close(f.cut) })
			return
		}
		w.(http.Flusher).Flush()
	}
}

// Cut waits until a write has failed (NeverReadStream's cut).
func (f *Flood) Cut(ctx context.Context) error {
	select {
	case <-f.cut:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
