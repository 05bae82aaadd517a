package apibackend

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
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

// recorder is the response of an in-process request, kept in memory (the API's answers are
// JSON documents, never streams).
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
