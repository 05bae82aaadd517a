package serve

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// Health is a server's /healthz and /readyz, shaped like controller-runtime's healthz checkers:
// /healthz answers while the process runs; /readyz runs named checks, each saying why the
// server is not ready yet or what its ready answer notes. Drain turns /readyz to 503 for good
// before the server stops, so what routes to it (a Service's endpoints, a load balancer)
// takes it out while it still answers. The zero value is ready to use; add the checks before
// it serves.
type Health struct {
	checks   []namedCheck
	draining atomic.Bool
}

// Checker is one readiness check: an error says why the server is not ready; otherwise note
// ("" for none) is added to the ready answer ("ok: 12 keys").
type Checker func() (note string, err error)

type namedCheck struct {
	name  string
	check Checker
}

// AddReadyzCheck adds a readiness check named name (shown by /readyz?verbose); checks run in
// the order added.
func (h *Health) AddReadyzCheck(name string, c Checker) {
	h.checks = append(h.checks, namedCheck{name, c})
}

// Drain marks the server as stopping: /readyz answers 503 "shutting down" from now on.
func (h *Health) Drain() { h.draining.Store(true) }

// Draining says whether Drain was called.
func (h *Health) Draining() bool { return h.draining.Load() }

// Register serves GET /healthz and GET /readyz on mux.
func (h *Health) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", h.Healthz)
	mux.HandleFunc("GET /readyz", h.Readyz)
}

// Healthz answers "ok" while the process runs.
func (h *Health) Healthz(w http.ResponseWriter, _ *http.Request) {
	plain(w, http.StatusOK, "ok")
}

// Readyz answers 200 "ok" with the checks' notes once every check passes, 503 with why not
// otherwise, and 503 "shutting down" once the server drains. ?verbose lists every check.
func (h *Health) Readyz(w http.ResponseWriter, r *http.Request) {
	if h.Draining() {
		plain(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	var notes, failed, lines []string
	for _, c := range h.checks {
		note, err := c.check()
		switch {
		case err != nil:
			failed = append(failed, err.Error())
			lines = append(lines, "[-]"+c.name+": "+err.Error())
		case note != "":
			notes = append(notes, note)
			lines = append(lines, "[+]"+c.name+": "+note)
		default:
			lines = append(lines, "[+]"+c.name+" ok")
		}
	}
	code, text := http.StatusOK, "ok"
	if len(failed) > 0 {
		code, text = http.StatusServiceUnavailable, "not ready: "+strings.Join(failed, "; ")
	} else if len(notes) > 0 {
		text += ": " + strings.Join(notes, "; ")
	}
	if r.URL.Query().Has("verbose") {
		text = strings.Join(append(lines, text), "\n")
	}
	plain(w, code, text)
}

func plain(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}
