// Package redistest runs a real redis-server (Debian's package) on 127.0.0.1 for tests: on a
// free port, with no persistence and nothing else listening, stopped on cleanup. When
// redis-server is not installed it calls hack/redis.sh, which installs it with apt-get (the
// test set-up runs as root); where that is impossible the test is skipped, saying why, unless
// INFERPLANE_REQUIRE_REDIS=1 (make test sets it), which fails it instead.
//
// Each server carries INFERPLANE_E2E_OWNER=<test binary pid> in its environment, so
// hack/check-strays.sh finds one that outlived its test, and dies with its test binary
// (Pdeathsig).
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

var (
	findOnce sync.Once
	binPath  string
	findErr  error
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// binary finds redis-server, installing it through hack/redis.sh when missing.
func binary() (string, error) {
	findOnce.Do(func() {
		if p, err := exec.LookPath("redis-server"); err == nil {
			binPath = p
			return
		}
		out, err := exec.Command(filepath.Join(repoRoot(), "hack", "redis.sh")).Output()
		if err != nil {
			findErr = fmt.Errorf("hack/redis.sh: %w", err)
			return
		}
		binPath = strings.TrimSpace(string(out))
	})
	return binPath, findErr
}

// Start runs a redis-server for the test and stops it on cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binary()
	if err != nil {
		if os.Getenv("INFERPLANE_REQUIRE_REDIS") == "1" {
			t.Fatalf("no redis-server: %v", err)
		}
		t.Skipf("SKIPPED: no redis-server (%v); install Debian's redis-server or run hack/redis.sh", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, bin: bin, port: port, dir: t.TempDir()}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Addr is 127.0.0.1:<port>.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// spawn runs fn on one OS thread that never exits: Pdeathsig fires when the thread that
// started a child dies, and Go may retire other threads at any time.
var spawn = sync.OnceValue(func() chan func() {
	jobs := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range jobs {
			f()
		}
	}()
	return jobs
})

// Restart starts the server (again) on the same port, empty: what a Redis without
// persistence looks like after a crash.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", s.dir, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	cmd.Env = append(os.Environ(), "INFERPLANE_E2E_OWNER="+strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	done := make(chan error, 1)
	spawn() <- func() { done <- cmd.Start() }
	if err := <-done; err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	go func() { _ = cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
			ok := ping(c)
			c.Close()
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer within 10s:\n%s", s.Addr(), b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ping(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Stop kills the server (SIGKILL: a crash, nothing saved) and waits until its port is closed.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	for i := 0; i < 200; i++ {
		c, err := net.DialTimeout("tcp", s.Addr(), 50*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}
