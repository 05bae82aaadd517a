// Package docker is the agent's runtime on the Docker Engine: it talks to the daemon's API over
// its unix socket (/var/run/docker.sock) rather than running the docker CLI, for three things
// the CLI gives only as text: the pull's progress in bytes (POST /images/create streams one
// JSON message per layer update), each log line's own timestamp to resume from after the agent
// restarts (GET /containers/{id}/logs?timestamps=1&since=...), and the exit code from
// POST /containers/{id}/wait. The API version is the daemon's own (GET /_ping), so one agent
// works with Docker 20.10 (API 1.41) and later; the requests use only fields every one of
// those versions has.
package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
)

// DefaultHost is the daemon's socket.
const DefaultHost = "unix:///var/run/docker.sock"

// Label marks the containers the agent created.
const Label = "io.inferplane.agent"

// Runtime is a Docker daemon.
type Runtime struct {
	socket string
	hc     *http.Client

	mu      sync.Mutex
	version string // "v1.41": the daemon's API version, learnt on first use
}

// New returns the runtime of the daemon at host ("unix:///path" or a socket path).
func New(host string) (*Runtime, error) {
	sock := strings.TrimPrefix(host, "unix://")
	if sock == "" || strings.Contains(sock, "://") {
		return nil, fmt.Errorf("docker host %q: want unix:///path/to/docker.sock", host)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		MaxIdleConns: 4,
	}
	return &Runtime{socket: sock, hc: &http.Client{Transport: tr}}, nil
}

// apiError is the daemon's answer to a request it refused.
type apiError struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("docker %s %s: %d: %s", e.Method, e.Path, e.Status, e.Message)
}

func isStatus(err error, status int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == status
}

// apiVersion asks the daemon its API version once (GET /_ping's Api-Version header).
func (r *Runtime) apiVersion(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.version != "" {
		return r.version, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return "", err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("docker daemon at %s: %w", r.socket, err)
	}
	resp.Body.Close()
	v := resp.Header.Get("Api-Version")
	if resp.StatusCode != http.StatusOK || v == "" {
		return "", fmt.Errorf("docker daemon at %s: GET /_ping: status %d, Api-Version %q", r.socket, resp.StatusCode, v)
	}
	r.version = "v" + v
	return r.version, nil
}

// do sends a request; an answer of 400 or more is an *apiError with the daemon's message.
func (r *Runtime) do(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	v, err := r.apiVersion(ctx)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://docker/" + v + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("docker %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		var m struct{ Message string }
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(b))
		}
		return nil, &apiError{Method: method, Path: path, Status: resp.StatusCode, Message: m.Message}
	}
	return resp, nil
}

// call sends a request and decodes a JSON answer into out (nil: discard it).
func (r *Runtime) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := r.do(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("docker %s %s: reading the answer: %w", method, path, err)
	}
	return nil
}

// pullMessage is one message of POST /images/create's stream.
type pullMessage struct {
	Status string `json:"status"`
	ID     string `json:"id"`
	// ProgressDetail is {"current": n, "total": n} while a layer downloads, {} otherwise; it
	// is read only then, so another shape elsewhere fails nothing.
	ProgressDetail json.RawMessage `json:"progressDetail"`
	Error          string          `json:"error"`
	ErrorDetail    struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// Pull pulls the image. Progress sums the layers' downloaded bytes against their sizes.
func (r *Runtime) Pull(ctx context.Context, image string, progress func(runtime.PullProgress)) error {
	from, tag := splitRef(image)
	q := url.Values{"fromImage": {from}}
	if tag != "" {
		q.Set("tag", tag)
	}
	resp, err := r.do(ctx, http.MethodPost, "/images/create", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	type layer struct{ done, total int64 }
	layers := map[string]*layer{}
	var order []string
	dec := json.NewDecoder(resp.Body)
	for {
		var m pullMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("pull %s: reading the daemon's progress: %w", image, err)
		}
		if m.Error != "" || m.ErrorDetail.Message != "" {
			return fmt.Errorf("pull %s: %s", image, firstNonEmpty(m.ErrorDetail.Message, m.Error))
		}
		if m.ID == "" {
			continue
		}
		l := layers[m.ID]
		if l == nil {
			l = &layer{}
			layers[m.ID] = l
			order = append(order, m.ID)
		}
		switch m.Status {
		case "Downloading":
			var pd struct{ Current, Total int64 }
			if json.Unmarshal(m.ProgressDetail, &pd) == nil {
				l.done, l.total = pd.Current, pd.Total
			}
		case "Download complete", "Pull complete", "Already exists":
			if l.total > 0 {
				l.done = l.total
			}
		default:
			continue
		}
		if progress != nil {
			var p runtime.PullProgress
			for _, id := range order {
				p.Done += layers[id].done
				p.Total += layers[id].total
			}
			progress(p)
		}
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// splitRef splits an image reference into what /images/create takes: a digest reference is
// whole; else the tag, "latest" when none (an empty tag would pull every tag).
func splitRef(ref string) (from, tag string) {
	if strings.Contains(ref, "@") {
		return ref, ""
	}
	slash := strings.LastIndexByte(ref, '/')
	if i := strings.LastIndexByte(ref, ':'); i > slash {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

// createBody is POST /containers/create's body: the fields of `docker run` the launcher used.
type createBody struct {
	Image      string            `json:"Image"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd"`
	Env        []string          `json:"Env,omitempty"`
	Labels     map[string]string `json:"Labels"`
	Tty        bool              `json:"Tty"`
	HostConfig hostConfig        `json:"HostConfig"`
}

type hostConfig struct {
	Binds          []string        `json:"Binds,omitempty"`
	NetworkMode    string          `json:"NetworkMode,omitempty"`
	IpcMode        string          `json:"IpcMode,omitempty"`
	CapAdd         []string        `json:"CapAdd,omitempty"`
	Devices        []device        `json:"Devices,omitempty"`
	DeviceRequests []deviceRequest `json:"DeviceRequests,omitempty"`
	Ulimits        []ulimit        `json:"Ulimits,omitempty"`
	LogConfig      logConfig       `json:"LogConfig"`
}

type device struct {
	PathOnHost        string `json:"PathOnHost"`
	PathInContainer   string `json:"PathInContainer"`
	CgroupPermissions string `json:"CgroupPermissions"`
}

type deviceRequest struct {
	Driver       string     `json:"Driver"`
	Count        int        `json:"Count"`
	Capabilities [][]string `json:"Capabilities"`
}

type ulimit struct {
	Name string `json:"Name"`
	Soft int64  `json:"Soft"`
	Hard int64  `json:"Hard"`
}

type logConfig struct {
	Type   string            `json:"Type"`
	Config map[string]string `json:"Config"`
}

func createBodyOf(spec runtime.Spec) (createBody, error) {
	b := createBody{
		Image: spec.Image, Entrypoint: spec.Entrypoint, Cmd: spec.Args, Env: spec.Env,
		Labels: map[string]string{Label: "true"},
		HostConfig: hostConfig{
			Binds: spec.Binds, NetworkMode: spec.Network, IpcMode: spec.IPC, CapAdd: spec.CapAdd,
			// json-file: the logs API reads it back with each line's time; bounded on disk.
			LogConfig: logConfig{Type: "json-file", Config: map[string]string{"max-size": "100m", "max-file": "3"}},
		},
	}
	if b.Cmd == nil {
		b.Cmd = []string{}
	}
	switch spec.GPUs {
	case "":
	case "all":
		b.HostConfig.DeviceRequests = []deviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}}}
	default:
		n, err := strconv.Atoi(spec.GPUs)
		if err != nil || n < 1 {
			return b, fmt.Errorf("--gpus %q: want all or a number of GPUs", spec.GPUs)
		}
		b.HostConfig.DeviceRequests = []deviceRequest{{Count: n, Capabilities: [][]string{{"gpu"}}}}
	}
	for _, d := range spec.Devices {
		parts := strings.Split(d, ":")
		dv := device{PathOnHost: parts[0], PathInContainer: parts[0], CgroupPermissions: "rwm"}
		if len(parts) > 1 && parts[1] != "" {
			dv.PathInContainer = parts[1]
		}
		if len(parts) > 2 {
			dv.CgroupPermissions = parts[2]
		}
		if len(parts) > 3 || dv.PathOnHost == "" {
			return b, fmt.Errorf("--device %q: want host[:container[:permissions]]", d)
		}
		b.HostConfig.Devices = append(b.HostConfig.Devices, dv)
	}
	for _, u := range spec.Ulimits {
		ul, err := parseUlimit(u)
		if err != nil {
			return b, err
		}
		b.HostConfig.Ulimits = append(b.HostConfig.Ulimits, ul)
	}
	return b, nil
}

func parseUlimit(s string) (ulimit, error) {
	name, limits, ok := strings.Cut(s, "=")
	softS, hardS, two := strings.Cut(limits, ":")
	if !two {
		hardS = softS
	}
	soft, err1 := strconv.ParseInt(softS, 10, 64)
	hard, err2 := strconv.ParseInt(hardS, 10, 64)
	if !ok || name == "" || err1 != nil || err2 != nil {
		return ulimit{}, fmt.Errorf("--ulimit %q: want name=soft[:hard], e.g. memlock=-1", s)
	}
	return ulimit{Name: name, Soft: soft, Hard: hard}, nil
}

// Start creates the container (removing a stopped one of its name first) and starts it.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Container, error) {
	body, err := createBodyOf(spec)
	if err != nil {
		return nil, err
	}
	var created struct{ ID string }
	q := url.Values{"name": {spec.Name}}
	err = r.call(ctx, http.MethodPost, "/containers/create", q, body, &created)
	if isStatus(err, http.StatusConflict) {
		if err := r.call(ctx, http.MethodDelete, "/containers/"+spec.Name, url.Values{"force": {"1"}}, nil, nil); err != nil && !isStatus(err, http.StatusNotFound) {
			return nil, err
		}
		err = r.call(ctx, http.MethodPost, "/containers/create", q, body, &created)
	}
	if err != nil {
		return nil, err
	}
	if err := r.call(ctx, http.MethodPost, "/containers/"+created.ID+"/start", nil, nil, nil); err != nil {
		return nil, err
	}
	return &container{r: r, id: created.ID}, nil
}

// Find returns the container of that name, or nil.
func (r *Runtime) Find(ctx context.Context, name string) (runtime.Container, error) {
	var in inspect
	err := r.call(ctx, http.MethodGet, "/containers/"+name+"/json", nil, nil, &in)
	if isStatus(err, http.StatusNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &container{r: r, id: in.ID}, nil
}

type inspect struct {
	ID    string `json:"Id"`
	State struct {
		Running    bool
		ExitCode   int
		StartedAt  time.Time
		FinishedAt time.Time
	}
}

type container struct {
	r  *Runtime
	id string
}

func (c *container) ID() string { return c.id }

func (c *container) State(ctx context.Context) (runtime.State, error) {
	var in inspect
	if err := c.r.call(ctx, http.MethodGet, "/containers/"+c.id+"/json", nil, nil, &in); err != nil {
		return runtime.State{}, err
	}
	s := in.State
	return runtime.State{Running: s.Running, ExitCode: s.ExitCode, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt}, nil
}

// Logs follows the container's log from the cursor on. The stream is the logs API's
// multiplexed one: frames of an 8-byte header (stream, 3 zero bytes, big-endian length) and a
// payload that starts with the message's RFC 3339 time and a space.
func (c *container) Logs(ctx context.Context, from runtime.Cursor, emit func(runtime.Chunk)) error {
	q := url.Values{"follow": {"1"}, "stdout": {"1"}, "stderr": {"1"}, "timestamps": {"1"}}
	if !from.Time.IsZero() {
		// Inclusive: the messages of exactly that time come again, and the first N are skipped.
		q.Set("since", fmt.Sprintf("%d.%09d", from.Time.Unix(), from.Time.Nanosecond()))
	}
	resp, err := c.r.do(ctx, http.MethodGet, "/containers/"+c.id+"/logs", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
	defer stop()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	cur, skip := from, from.N
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return firstErr(ctx.Err(), fmt.Errorf("docker logs of %s: %w", c.id, err))
		}
		size := binary.BigEndian.Uint32(hdr[4:])
		payload := make([]byte, size)
		if _, err := io.ReadFull(br, payload); err != nil {
			return firstErr(ctx.Err(), fmt.Errorf("docker logs of %s: %w", c.id, err))
		}
		var stream guestlog.Stream
		switch hdr[0] {
		case 0, 1:
			stream = guestlog.Stdout
		case 2:
			stream = guestlog.Stderr
		default:
			return fmt.Errorf("docker logs of %s: %s", c.id, payload)
		}
		ts, data, ok := bytes.Cut(payload, []byte(" "))
		t, err := time.Parse(time.RFC3339Nano, string(ts))
		if !ok || err != nil {
			return fmt.Errorf("docker logs of %s: a message without its time (%q)", c.id, truncate(payload, 60))
		}
		if t.Before(from.Time) || (t.Equal(from.Time) && skip > 0) {
			if t.Equal(from.Time) {
				skip--
			}
			continue
		}
		if t.Equal(cur.Time) {
			cur.N++
		} else {
			cur = runtime.Cursor{Time: t, N: 1}
		}
		emit(runtime.Chunk{Stream: stream, Time: t, Data: data, Cursor: cur})
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func (c *container) Wait(ctx context.Context) (int, error) {
	var w struct {
		StatusCode int
		Error      *struct{ Message string }
	}
	if err := c.r.call(ctx, http.MethodPost, "/containers/"+c.id+"/wait", url.Values{"condition": {"not-running"}}, nil, &w); err != nil {
		return 0, err
	}
	if w.Error != nil && w.Error.Message != "" {
		return w.StatusCode, fmt.Errorf("docker wait %s: %s", c.id, w.Error.Message)
	}
	return w.StatusCode, nil
}

// Stop is docker stop: SIGTERM, then SIGKILL after grace (the daemon waits).
func (c *container) Stop(ctx context.Context, grace time.Duration) error {
	q := url.Values{"t": {strconv.Itoa(int(grace.Round(time.Second) / time.Second))}}
	err := c.r.call(ctx, http.MethodPost, "/containers/"+c.id+"/stop", q, nil, nil)
	if isStatus(err, http.StatusNotModified) || isStatus(err, http.StatusNotFound) {
		return nil
	}
	return err
}

func (c *container) Remove(ctx context.Context) error {
	err := c.r.call(ctx, http.MethodDelete, "/containers/"+c.id, url.Values{"force": {"1"}}, nil, nil)
	if isStatus(err, http.StatusNotFound) {
		return nil
	}
	return err
}
