// Package gitserver serves bare git repositories over smart HTTP on 127.0.0.1 for tests, with
// git's own `git http-backend` (hosted by net/http/cgi) behind token auth: the remote the
// product API's replicas fetch from and push to, as a git host would be.
package gitserver

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Server is a running git HTTP server. Clients send the token as the password of HTTP basic
// auth; any user name is accepted, as git hosts do with tokens.
type Server struct {
	// URL is the base URL; a repository is at URL + "/" + name + ".git".
	URL   string
	Root  string
	Token string
	// BeforePush, when set, is called with each push (receive-pack POST) before git sees it,
	// for tests that stop a writer mid-push; returning false answers 503 without pushing.
	BeforePush func(r *http.Request) bool
	// AfterPush, when set, is called with each push git has finished with (applied or refused),
	// for tests that order one writer's push after another's.
	AfterPush func(r *http.Request)
	// Pushes counts the pushes git received.
	Pushes atomic.Int64

	srv     *httptest.Server
	backend string
}

// Start serves the repositories under a new temporary folder until the test ends.
func Start(t testing.TB, token string) *Server {
	t.Helper()
	backend := gitExecPath(t) + "/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git http-backend not found at %s: %v", backend, err)
	}
	s := &Server{Root: t.TempDir(), Token: token, backend: backend}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL
	return s
}

func gitExecPath(t testing.TB) string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git is needed to serve test repositories: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	user, password, ok := r.BasicAuth()
	if !ok || password != s.Token {
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return
	}
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		if s.BeforePush != nil && !s.BeforePush(r) {
			http.Error(w, "push refused by the test", http.StatusServiceUnavailable)
			return
		}
		s.Pushes.Add(1)
	}
	// The whole body first: a client that dies mid-request (a replica killed mid-push) would
	// hand git http-backend a body shorter than its CONTENT_LENGTH, and http-backend then spins
	// on the early end of its input for good, a core at 100% (seen with git 2.39), outliving
	// the test as an orphan. A body read whole reaches it exact, or not at all.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	h := &cgi.Handler{
		Path:   s.backend,
		Stderr: io.Discard, // git's refusals ("cannot lock ref") reach the client as well
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
			// http-backend enables receive-pack only for an authenticated user.
			"REMOTE_USER=" + user,
		},
	}
	h.ServeHTTP(w, r)
	if s.AfterPush != nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		s.AfterPush(r)
	}
}

// Dir is the bare repository's folder.
func (s *Server) Dir(name string) string { return filepath.Join(s.Root, name+".git") }

// RepoURL is the repository's URL (no credentials: clients send the token as basic auth).
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name + ".git" }

// NewRepo creates a bare repository whose branch main holds files in one commit (none when
// files is empty) and returns its URL.
func (s *Server) NewRepo(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	Init(t, s.Dir(name), files)
	return s.RepoURL(name)
}

// Init creates a bare repository at dir (also for file:// URLs) with files committed on main.
func Init(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	Git(t, "", "init", "-q", "--bare", "-b", "main", dir)
	if len(files) == 0 {
		return
	}
	work := t.TempDir()
	Git(t, work, "init", "-q", "-b", "main")
	for p, content := range files {
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, work, "add", "-A")
	Git(t, work, "commit", "-q", "-m", "initial inputs")
	Git(t, work, "push", "-q", dir, "main")
}

// Git runs the git CLI in dir (the current folder when empty) with no user or system
// configuration, and returns its output; a failure fails the test.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@localhost", "GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@localhost")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
