// Package dockerstandin is a STAND-IN for the Docker Engine API, for tests: no Docker engine
// runs on the machines the tests run on (one runs inside the guest VM). It serves, on a unix
// socket, the part of the API the agent's docker runtime uses, with the wire formats of the
// real daemon (moby's api/swagger.yaml): GET /_ping's Api-Version, POST /images/create's
// stream of JSON progress messages, containers create/start/json/logs/wait/stop/delete, and
// the logs' multiplexed stream of timestamped messages cut as the daemon's log copier cuts
// them (a message per line, a partial message per 16 KiB without a newline).
//
// A container runs a real process: its image names the program (Image.Program, with
// Image.Args before the container's own arguments), so a test runs the stand-in model server
// as the "container" and the agent reads its output through this API. The processes live as
// long as the stand-in (not as long as the agent that started them), as containers outlive the
// agent in the guest.
package dockerstandin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inferplane/inferplane/e2e/proc"
	"github.com/inferplane/inferplane/internal/spawn"
)

// Image is what pulling and running an image does here.
type Image struct {
	Program string   // run as the container's process
	Args    []string // before the container's entrypoint arguments and command
	Layers  []int64  // the layer sizes a pull reports
}

// Options configure the stand-in.
type Options struct {
	Images map[string]Image // by reference as the agent pulls it ("repo:tag")
	// APIVersion the daemon reports (default 1.41, Docker 20.10's).
	APIVersion string
	// PullStep is the pause between two progress messages of a pull (a download takes time).
	PullStep time.Duration
	// Resolution truncates log timestamps (the daemon's are nanoseconds): a coarse one makes
	// messages share a time, as they may on a real daemon.
	Resolution time.Duration
}

// Server is the running stand-in.
type Server struct {
	opts Options
	lis  net.Listener
	srv  *http.Server

	mu         sync.Mutex
	pulled     map[string]bool
	containers map[string]*Container // by id
	requests   []string
}

// Container is a container of the stand-in.
type Container struct {
	ID, Name string
	Create   CreateRequest
	Argv     []string

	s        *Server
	cmd      *exec.Cmd
	started  time.Time
	finished time.Time
	exitCode int
	exited   chan struct{}

	logMu   sync.Mutex
	logs    []message
	logCond *sync.Cond
	readers sync.WaitGroup // the output readers: the log is complete when they are done
	logDone bool
}

// CreateRequest is the body of POST /containers/create as the daemon reads it.
type CreateRequest struct {
	Image      string
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
	Tty        bool
	HostConfig struct {
		Binds          []string
		NetworkMode    string
		IpcMode        string
		CapAdd         []string
		Devices        []struct{ PathOnHost, PathInContainer, CgroupPermissions string }
		DeviceRequests []struct {
			Driver       string
			Count        int
			Capabilities [][]string
		}
		Ulimits []struct {
			Name       string
			Soft, Hard int64
		}
		LogConfig struct {
			Type   string
			Config map[string]string
		}
	}
}

type message struct {
	stream byte // 1 stdout, 2 stderr
	t      time.Time
	data   []byte
}

// Start serves on the unix socket at sock.
func Start(sock string, opts Options) (*Server, error) {
	if opts.APIVersion == "" {
		opts.APIVersion = "1.41"
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("docker stand-in: %w", err)
	}
	s := &Server{opts: opts, lis: lis, pulled: map[string]bool{}, containers: map[string]*Container{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// Close stops serving and kills every container's process.
func (s *Server) Close() {
	_ = s.srv.Close()
	s.mu.Lock()
	cs := make([]*Container, 0, len(s.containers))
	for _, c := range s.containers {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.kill()
	}
}

// Requests are the requests served so far, "METHOD /path" without the version prefix.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Containers are the containers that exist, in no order.
func (s *Server) Containers() []*Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Container
	for _, c := range s.containers {
		out = append(out, c)
	}
	return out
}

// Running says whether the container's process runs.
func (c *Container) Running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Kill ends the container's process now (SIGKILL), as an OOM killer or a crash would.
func (c *Container) Kill() { c.kill() }

func (c *Container) kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if rest, ok := strings.CutPrefix(path, "/v"); ok {
		if i := strings.IndexByte(rest, '/'); i > 0 {
			path = rest[i:]
		}
	}
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+path)
	s.mu.Unlock()
	w.Header().Set("Api-Version", s.opts.APIVersion)
	switch {
	case path == "/_ping":
		_, _ = w.Write([]byte("OK"))
	case path == "/images/create" && r.Method == http.MethodPost:
		s.pull(w, r)
	case path == "/containers/create" && r.Method == http.MethodPost:
		s.create(w, r)
	case strings.HasPrefix(path, "/containers/"):
		id, op, _ := strings.Cut(strings.TrimPrefix(path, "/containers/"), "/")
		c := s.lookup(id)
		if c == nil {
			apiError(w, http.StatusNotFound, "No such container: "+id)
			return
		}
		s.containerOp(w, r, c, op)
	default:
		apiError(w, http.StatusNotFound, "page not found")
	}
}

func (s *Server) containerOp(w http.ResponseWriter, r *http.Request, c *Container, op string) {
	switch {
	case op == "json" && r.Method == http.MethodGet:
		c.inspect(w)
	case op == "start" && r.Method == http.MethodPost:
		s.start(w, c)
	case op == "logs" && r.Method == http.MethodGet:
		c.serveLogs(w, r)
	case op == "wait" && r.Method == http.MethodPost:
		select {
		case <-c.exited:
		case <-r.Context().Done():
			return
		}
		writeJSON(w, map[string]any{"StatusCode": c.exitCode, "Error": nil})
	case op == "stop" && r.Method == http.MethodPost:
		c.stop(w, r)
	case op == "" && r.Method == http.MethodDelete:
		if c.Running() && r.URL.Query().Get("force") != "1" {
			apiError(w, http.StatusConflict, "You cannot remove a running container "+c.ID+". Stop the container before attempting removal or force remove")
			return
		}
		c.kill()
		s.mu.Lock()
		delete(s.containers, c.ID)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusNotFound, "page not found")
	}
}

func (s *Server) lookup(idOrName string) *Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[idOrName]; c != nil {
		return c
	}
	for _, c := range s.containers {
		if c.Name == idOrName || strings.HasPrefix(c.ID, idOrName) && len(idOrName) >= 12 {
			return c
		}
	}
	return nil
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// pull streams the daemon's progress messages: each layer announced, downloaded in four
// steps, completed, extracted; then the digest and the status line.
func (s *Server) pull(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("fromImage")
	if tag := r.URL.Query().Get("tag"); tag != "" {
		ref += ":" + tag
	}
	img, ok := s.opts.Images[ref]
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	if !ok {
		msg := "pull access denied for " + r.URL.Query().Get("fromImage") + ", repository does not exist or may require 'docker login': denied: requested access to the resource is denied"
		_ = enc.Encode(map[string]any{"errorDetail": map[string]string{"message": msg}, "error": msg})
		return
	}
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	tag := ref[strings.LastIndexByte(ref, ':')+1:]
	_ = enc.Encode(map[string]string{"status": "Pulling from " + r.URL.Query().Get("fromImage"), "id": tag})
	for i := range img.Layers {
		_ = enc.Encode(map[string]any{"status": "Pulling fs layer", "progressDetail": map[string]any{}, "id": layerID(i)})
	}
	for i, size := range img.Layers {
		for step := int64(1); step <= 4; step++ {
			_ = enc.Encode(map[string]any{"status": "Downloading", "progressDetail": map[string]int64{"current": size * step / 4, "total": size},
				"progress": "[==>    ]", "id": layerID(i)})
			flush()
			time.Sleep(s.opts.PullStep)
		}
		_ = enc.Encode(map[string]any{"status": "Download complete", "progressDetail": map[string]any{}, "id": layerID(i)})
		_ = enc.Encode(map[string]any{"status": "Pull complete", "progressDetail": map[string]any{}, "id": layerID(i)})
	}
	_ = enc.Encode(map[string]string{"status": "Digest: sha256:" + strings.Repeat("ab", 32)})
	_ = enc.Encode(map[string]string{"status": "Status: Downloaded newer image for " + ref})
	s.mu.Lock()
	s.pulled[ref] = true
	s.mu.Unlock()
}

func layerID(i int) string { return fmt.Sprintf("%012x", 0xa1b2c3d4e5+i) }

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	name := r.URL.Query().Get("name")
	if c := s.lookup(name); c != nil {
		apiError(w, http.StatusConflict, fmt.Sprintf("Conflict. The container name %q is already in use by container %q. You have to remove (or rename) that container to be able to reuse that name.", "/"+name, c.ID))
		return
	}
	s.mu.Lock()
	pulled := s.pulled[req.Image]
	s.mu.Unlock()
	img, known := s.opts.Images[req.Image]
	if !pulled || !known {
		apiError(w, http.StatusNotFound, "No such image: "+req.Image)
		return
	}
	argv := append([]string{img.Program}, img.Args...)
	if len(req.Entrypoint) > 1 {
		argv = append(argv, req.Entrypoint[1:]...)
	}
	argv = append(argv, req.Cmd...)
	c := &Container{ID: newID(), Name: name, Create: req, Argv: argv, s: s, exited: make(chan struct{})}
	c.logCond = sync.NewCond(&c.logMu)
	s.mu.Lock()
	s.containers[c.ID] = c
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	writeJSON(w, map[string]any{"Id": c.ID, "Warnings": []string{}})
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) start(w http.ResponseWriter, c *Container) {
	if c.cmd != nil {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Env = append(append(os.Environ(), proc.OwnerEnv+"="+strconv.Itoa(os.Getpid())), c.Create.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	cmd.Stdout, cmd.Stderr = outW, errW
	var err error
	spawn.Do(func() { err = cmd.Start() })
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		apiError(w, http.StatusInternalServerError, "failed to create task for container: "+err.Error())
		return
	}
	c.cmd, c.started = cmd, time.Now().UTC()
	c.readers.Add(2)
	go c.copyLog(outR, 1)
	go c.copyLog(errR, 2)
	go func() {
		err := cmd.Wait()
		c.exitCode = exitCode(cmd.ProcessState, err)
		c.finished = time.Now().UTC()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		c.readers.Wait()
		c.logMu.Lock()
		c.logDone = true
		c.logCond.Broadcast()
		c.logMu.Unlock()
		close(c.exited)
	}()
	w.WriteHeader(http.StatusNoContent)
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return 255
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if err != nil && ps.ExitCode() < 0 {
		return 255
	}
	return ps.ExitCode()
}

// copyLog cuts a stream into messages as the daemon's log copier does: one per line (the
// newline kept), a partial one when 16 KiB hold no newline, all partials of a line with the
// time of the first; what is left at the end is a message without a newline.
func (c *Container) copyLog(f *os.File, stream byte) {
	defer c.readers.Done()
	defer f.Close()
	const bufSize = 16 << 10
	buf := make([]byte, 0, bufSize)
	var partialT time.Time
	read := make([]byte, 4096)
	for {
		n, err := f.Read(read[:min(len(read), bufSize-len(buf))])
		buf = append(buf, read[:n]...)
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			t := c.now()
			if !partialT.IsZero() {
				t, partialT = partialT, time.Time{}
			}
			c.append(message{stream: stream, t: t, data: append([]byte(nil), buf[:i+1]...)})
			buf = buf[i+1:]
		}
		if len(buf) > 0 && (err != nil || len(buf) == bufSize) {
			if partialT.IsZero() {
				partialT = c.now()
			}
			c.append(message{stream: stream, t: partialT, data: append([]byte(nil), buf...)})
			buf = buf[:0]
		}
		if err != nil {
			return
		}
		if cap(buf) < bufSize {
			buf = append(make([]byte, 0, bufSize), buf...)
		}
	}
}

func (c *Container) now() time.Time {
	t := time.Now().UTC()
	if r := c.s.opts.Resolution; r > 0 {
		t = t.Truncate(r)
	}
	return t
}

func (c *Container) append(m message) {
	c.logMu.Lock()
	c.logs = append(c.logs, m)
	c.logCond.Broadcast()
	c.logMu.Unlock()
}

// serveLogs writes the messages since the asked time in the multiplexed stream, following
// until the process exited and all of its output was written.
func (c *Container) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since time.Time
	if s := q.Get("since"); s != "" && s != "0" {
		sec, nsec, _ := strings.Cut(s, ".")
		si, err1 := strconv.ParseInt(sec, 10, 64)
		ns := int64(0)
		var err2 error
		if nsec != "" {
			ns, err2 = strconv.ParseInt((nsec + "000000000")[:9], 10, 64)
		}
		if err1 != nil || err2 != nil {
			apiError(w, http.StatusBadRequest, "invalid since "+s)
			return
		}
		since = time.Unix(si, ns)
	}
	follow, stamps := q.Get("follow") == "1", q.Get("timestamps") == "1"
	w.Header().Set("Content-Type", "application/vnd.docker.multiplexed-stream")
	w.WriteHeader(http.StatusOK)
	// Wake the waiting loop when the request ends.
	stop := context.AfterFunc(r.Context(), func() {
		c.logMu.Lock()
		c.logCond.Broadcast()
		c.logMu.Unlock()
	})
	defer stop()
	for i := 0; ; i++ {
		c.logMu.Lock()
		for i >= len(c.logs) && follow && !c.logDone && r.Context().Err() == nil {
			c.logCond.Wait()
		}
		if i >= len(c.logs) || r.Context().Err() != nil {
			c.logMu.Unlock()
			return
		}
		m := c.logs[i]
		c.logMu.Unlock()
		if m.t.Before(since) {
			continue
		}
		payload := m.data
		if stamps {
			payload = append([]byte(m.t.Format("2006-01-02T15:04:05.000000000Z07:00")+" "), m.data...)
		}
		var hdr [8]byte
		hdr[0] = m.stream
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
		if _, err := w.Write(append(hdr[:], payload...)); err != nil {
			return
		}
		if f, ok := w.(http.Flusher); ok && (i+1 >= c.logLen()) {
			f.Flush()
		}
	}
}

func (c *Container) logLen() int {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	return len(c.logs)
}

func (c *Container) inspect(w http.ResponseWriter) {
	running := c.cmd != nil && c.Running()
	status := map[bool]string{true: "running", false: "exited"}[running]
	if c.cmd == nil {
		status = "created"
	}
	writeJSON(w, map[string]any{
		"Id": c.ID, "Name": "/" + c.Name, "Image": c.Create.Image,
		"State": map[string]any{"Status": status, "Running": running, "ExitCode": c.exitCodeIfExited(),
			"StartedAt": zeroTime(c.started), "FinishedAt": zeroTime(c.finishedIfExited())},
		"Config": map[string]any{"Labels": c.Create.Labels},
	})
}

func (c *Container) exitCodeIfExited() int {
	if c.cmd != nil && !c.Running() {
		return c.exitCode
	}
	return 0
}

func (c *Container) finishedIfExited() time.Time {
	if c.cmd != nil && !c.Running() {
		return c.finished
	}
	return time.Time{}
}

// zeroTime is how the daemon writes a time that has not happened.
func zeroTime(t time.Time) string {
	if t.IsZero() {
		return "0001-01-01T00:00:00Z"
	}
	return t.Format(time.RFC3339Nano)
}

// stop is docker stop: SIGTERM to the process, SIGKILL after ?t seconds (default 10).
func (c *Container) stop(w http.ResponseWriter, r *http.Request) {
	if c.cmd == nil || !c.Running() {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	grace := 10 * time.Second
	if t := r.URL.Query().Get("t"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil {
			apiError(w, http.StatusBadRequest, "invalid t "+t)
			return
		}
		grace = time.Duration(n) * time.Second
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		c.kill()
	}
	w.WriteHeader(http.StatusNoContent)
}
