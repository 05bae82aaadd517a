package kubeletstandin

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/inferplane/inferplane/internal/sleep"
	"github.com/inferplane/inferplane/webhook"
)

// Kubelet serves containers' logs over TLS on 127.0.0.1 as the kubelet's
// /containerLogs/{namespace}/{pod}/{container} does.
type Kubelet struct {
	// CA is the PEM of the CA that signed its serving certificate (for 127.0.0.1): the API
	// server's --kubelet-certificate-authority.
	CA []byte
	// Port is where it listens on 127.0.0.1: the Node's daemonEndpoints.kubeletEndpoint.Port.
	Port int

	dir  string
	srv  *http.Server
	ln   net.Listener
	mu   sync.Mutex
	logs map[string]*ContainerLog // by namespace/pod/container

	// Requests counts the log requests served (what the API server asked for).
	reqMu    sync.Mutex
	requests []string
}

// Start starts a kubelet stand-in whose CRI logs live in dir.
func Start(dir string) (*Kubelet, error) {
	b, err := webhook.SelfSigned([]string{"127.0.0.1"}, time.Now(), 24*time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &Kubelet{CA: b.CA, Port: ln.Addr().(*net.TCPAddr).Port, dir: dir, ln: ln, logs: map[string]*ContainerLog{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.containerLogs)
	k.srv = &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = k.srv.ServeTLS(ln, "", "") }()
	return k, nil
}

// Close stops serving and ends every follow.
func (k *Kubelet) Close() error {
	k.mu.Lock()
	for _, l := range k.logs {
		_ = l.Close()
	}
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return k.srv.Shutdown(ctx)
}

// Container adds a container's log (empty) and returns it.
func (k *Kubelet) Container(namespace, pod, container string) (*ContainerLog, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := namespace + "/" + pod + "/" + container
	if l, ok := k.logs[key]; ok {
		return l, nil
	}
	l, err := NewContainerLog(filepath.Join(k.dir, fmt.Sprintf("%s_%s_%s.log", namespace, pod, container)))
	if err != nil {
		return nil, err
	}
	k.logs[key] = l
	return l, nil
}

// Requests are the query strings of the log requests served so far, oldest first.
func (k *Kubelet) Requests() []string {
	k.reqMu.Lock()
	defer k.reqMu.Unlock()
	return append([]string(nil), k.requests...)
}

// containerLogs parses the query as the kubelet does (the API server sends follow, sinceTime,
// sinceSeconds, tailLines, timestamps and limitBytes) and serves the log.
func (k *Kubelet) containerLogs(w http.ResponseWriter, r *http.Request) {
	k.reqMu.Lock()
	k.requests = append(k.requests, r.URL.RawQuery)
	k.reqMu.Unlock()
	k.mu.Lock()
	l := k.logs[r.PathValue("namespace")+"/"+r.PathValue("pod")+"/"+r.PathValue("container")]
	k.mu.Unlock()
	if l == nil {
		http.Error(w, "container not found", http.StatusNotFound)
		return
	}
	o, err := parseOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	_ = l.Serve(r.Context(), w, o, flush)
}

func parseOptions(r *http.Request) (Options, error) {
	q := r.URL.Query()
	o := Options{TailLines: -1, Follow: q.Get("follow") == "true", Timestamps: q.Get("timestamps") == "true"}
	num := func(name string) (int64, bool, error) {
		s := q.Get(name)
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s=%q: not a number", name, s)
		}
		return n, true, nil
	}
	if n, ok, err := num("tailLines"); err != nil {
		return o, err
	} else if ok {
		o.TailLines = n
	}
	if n, ok, err := num("limitBytes"); err != nil {
		return o, err
	} else if ok {
		o.LimitBytes = n
	}
	if n, ok, err := num("sinceSeconds"); err != nil {
		return o, err
	} else if ok {
		o.SinceTime = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if s := q.Get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return o, fmt.Errorf("sinceTime=%q: %w", s, err)
		}
		o.SinceTime = t
	}
	return o, nil
}

// Tail copies a console file into the container's log line by line as it grows (what
// virt-tail and the container runtime do with the guest's serial console), until ctx ends.
// The file may not exist yet. A line still being written waits for its end.
func Tail(ctx context.Context, console string, into *ContainerLog) error {
	var f *os.File
	for f == nil {
		var err error
		if f, err = os.Open(console); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if f == nil && sleep.For(ctx, 10*time.Millisecond) != nil {
			return nil
		}
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	var partial []byte
	for {
		chunk, err := r.ReadSlice('\n')
		partial = append(partial, chunk...)
		switch {
		case err == nil:
			if aerr := into.Append(string(partial)); aerr != nil {
				return aerr
			}
			partial = partial[:0]
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			if sleep.For(ctx, 5*time.Millisecond) != nil {
				return nil
			}
		default:
			return err
		}
	}
}
