package serve

import (
	"cmp"
	"net/http"
	"time"
)

// HTTP bounds an HTTP server. A zero field takes the value of the defaults it is applied Over.
type HTTP struct {
	// ReadHeaderTimeout bounds the arrival of a request's headers (and a TLS handshake): a
	// client that sends them a byte at a time is cut off. It also ends a new connection that
	// sends nothing.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the arrival of a whole request, headers and body. Once the body has
	// been read, a long handler is not affected (net/http lifts the deadline at the body's end).
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of a response, from its first byte (not from the
	// request's start: a handler that works for a while before it answers is not cut for that).
	WriteTimeout time.Duration
	// StreamWriteTimeout bounds each write of a streaming response (one that flushes: server-
	// sent events, a relayed stream) instead of WriteTimeout, which would end a long stream: a
	// client that stops reading fills its socket's buffers, the next write waits, and the
	// connection is cut when this passes. Nothing is buffered for it in the server.
	StreamWriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (net/http answers 431 past it).
	MaxHeaderBytes int
	// MaxBodyBytes bounds the body a handler may read (http.MaxBytesReader: the read fails past
	// it and the connection is closed after the answer). BodyLimit, when set, gives a route its
	// own (0: MaxBodyBytes).
	MaxBodyBytes int64
	BodyLimit    func(*http.Request) int64
	// Conns bounds the connections.
	Conns Conns
}

// Over fills b's zero fields from def.
func (b HTTP) Over(def HTTP) HTTP {
	b.ReadHeaderTimeout = cmp.Or(b.ReadHeaderTimeout, def.ReadHeaderTimeout)
	b.ReadTimeout = cmp.Or(b.ReadTimeout, def.ReadTimeout)
	b.WriteTimeout = cmp.Or(b.WriteTimeout, def.WriteTimeout)
	b.StreamWriteTimeout = cmp.Or(b.StreamWriteTimeout, def.StreamWriteTimeout)
	b.IdleTimeout = cmp.Or(b.IdleTimeout, def.IdleTimeout)
	b.MaxHeaderBytes = cmp.Or(b.MaxHeaderBytes, def.MaxHeaderBytes)
	b.MaxBodyBytes = cmp.Or(b.MaxBodyBytes, def.MaxBodyBytes)
	if b.BodyLimit == nil {
		b.BodyLimit = def.BodyLimit
	}
	b.Conns = b.Conns.Over(def.Conns)
	return b
}

// Over fills c's zero fields from def.
func (c Conns) Over(def Conns) Conns {
	c.Max, c.MaxPerClient = cmp.Or(c.Max, def.Max), cmp.Or(c.MaxPerClient, def.MaxPerClient)
	return c
}

// Server is an http.Server serving h within b. The caller sets what is not a bound (ErrorLog,
// BaseContext) and serves it on b.Listen's listener.
func (b HTTP) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           b.Handler(h),
		ReadHeaderTimeout: b.ReadHeaderTimeout,
		ReadTimeout:       b.ReadTimeout,
		IdleTimeout:       b.IdleTimeout,
		MaxHeaderBytes:    b.MaxHeaderBytes,
		// net/http sets this write deadline once a request's headers are read: it bounds what
		// the server answers by itself (431, 400). Handler moves it for every response (from
		// its first byte, and per write once it streams), so it ends no long stream. (Over
		// HTTP/2 it would end a stream whose handler works longer than it before answering:
		// these servers speak HTTP/1.1.)
		WriteTimeout: b.WriteTimeout,
	}
}

// Listen listens on addr with b's connection bounds.
func (b HTTP) Listen(addr string) (*Listener, error) { return Listen(addr, b.Conns) }

// Handler bounds each request's body and each response's writing. It is what Server serves;
// a server built elsewhere (controller-runtime's) can put it in front of its handlers.
func (b HTTP) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := b.MaxBodyBytes
		if b.BodyLimit != nil {
			if l := b.BodyLimit(r); l > 0 {
				limit = l
			}
		}
		if limit > 0 && r.Body != nil && r.Body != http.NoBody {
			// On a copy of the request: net/http looks at its own request's body after the
			// handler (what is left unread, whether to read it or close the connection), and
			// would read on through a body it does not know.
			r = r.WithContext(r.Context())
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		next.ServeHTTP(&boundedWriter{ResponseWriter: w, rc: http.NewResponseController(w),
			write: b.WriteTimeout, stream: b.StreamWriteTimeout}, r)
	})
}

// boundedWriter sets the write deadline of a response: WriteTimeout from its first byte, then,
// once it flushes (it streams), StreamWriteTimeout before each write and flush.
type boundedWriter struct {
	http.ResponseWriter
	rc                 *http.ResponseController
	write, stream      time.Duration
	started, streaming bool
}

func (w *boundedWriter) start() {
	switch {
	case w.streaming:
		w.deadline(w.stream)
	case !w.started:
		w.started = true
		w.deadline(w.write)
	}
}

func (w *boundedWriter) deadline(d time.Duration) {
	if d > 0 {
		// A writer that cannot take deadlines (a test's recorder) is left as it is.
		_ = w.rc.SetWriteDeadline(time.Now().Add(d))
	}
}

func (w *boundedWriter) WriteHeader(code int) {
	if code >= 200 {
		w.start()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(p)
}

// Flush makes the response a stream (http.Flusher, for handlers that assert it).
func (w *boundedWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *boundedWriter) FlushError() error {
	w.streaming, w.started = true, true
	w.deadline(w.stream)
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines, hijacking).
func (w *boundedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
