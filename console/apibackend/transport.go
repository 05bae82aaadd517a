package apibackend

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// inProcess is an http.RoundTripper that serves the request with a handler instead of sending
// it: the client's requests become calls of the API's handler.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	in := req.Clone(req.Context())
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "in-process"
	if req.Header.Get("Accept") == "application/x-ndjson" {
		return t.stream(req, in)
	}
	rec := &recorder{header: http.Header{}}
	t.h.ServeHTTP(rec, in)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	return &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: rec.header,
		Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())), ContentLength: int64(rec.body.Len()), Request: req,
	}, nil
}

// stream serves a streamed answer (a job's log): the handler runs beside the caller and writes
// into a pipe the response's body reads, so each write waits for the reader; closing the body
// ends the handler's request.
func (t inProcess) stream(req, in *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(in.Context())
	in = in.WithContext(ctx)
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, started: make(chan struct{})}
	go func() {
		t.h.ServeHTTP(w, in)
		w.WriteHeader(http.StatusOK)
		_ = pw.Close()
	}()
	if req.Body != nil {
		_ = req.Body.Close()
	}
	<-w.started
	return &http.Response{
		Status: strconv.Itoa(w.status) + " " + http.StatusText(w.status), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.header.Clone(),
		Body: cancelOnClose{pr, cancel}, ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is a streamed in-process response: its header once the handler starts writing,
// then its body through the pipe.
type pipeWriter struct {
	header  http.Header
	pw      *io.PipeWriter
	once    sync.Once
	status  int
	started chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(status int) {
	w.once.Do(func() {
		w.status = status
		close(w.started)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush implements http.Flusher: every write already waits for its reader.
func (w *pipeWriter) Flush() {}

type cancelOnClose struct {
	*io.PipeReader
	cancel func()
}

func (c cancelOnClose) Close() error {
	c.cancel()
	return c.PipeReader.CloseWithError(context.Canceled)
}

// recorder is the response of an in-process request, kept in memory (the API's JSON
// documents; a streamed answer goes through stream).
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
