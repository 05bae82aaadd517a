package gitserver

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that dies in the middle of a push (a replica killed mid-write) leaves no git
// process behind: git http-backend, handed a body shorter than its Content-Length, spins at
// 100% CPU for good, so the server answers such a request itself. Then a whole push of the
// same repository still works.
func TestClientDyingMidPushLeavesNoGit(t *testing.T) {
	s := Start(t, "token")
	s.NewRepo(t, "r", map[string]string{"a.txt": "a\n"})
	u, err := url.Parse(s.URL)
	require.NoError(t, err)

	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	fmt.Fprintf(conn, "POST /r.git/git-receive-pack HTTP/1.1\r\nHost: %s\r\nAuthorization: Basic %s\r\n"+
		"Content-Type: application/x-git-receive-pack-request\r\nContent-Length: 100000\r\n\r\n", u.Host, basic("git", "token"))
	_, err = conn.Write(bytes.Repeat([]byte("0"), 100))
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	deadline := time.Now().Add(5 * time.Second)
	for {
		left := gitProcessesOf(t, s.Root)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range left { // or the server's Close would wait on them for good
				if pid, err := strconv.Atoi(strings.Fields(p)[0]); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			t.Fatalf("git processes of the server still running 5 s after the client died: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Over the next moments too: nothing started late.
	time.Sleep(500 * time.Millisecond)
	assert.Empty(t, gitProcessesOf(t, s.Root))

	work := t.TempDir()
	Git(t, "", "clone", "-q", authURL(t, s, "r"), work)
	require.NoError(t, os.WriteFile(filepath.Join(work, "b.txt"), []byte("b\n"), 0o644))
	Git(t, work, "add", "b.txt")
	Git(t, work, "-c", "user.name=t", "-c", "user.email=t@127.0.0.1", "commit", "-q", "-m", "b")
	Git(t, work, "push", "-q", "origin", "main")
	assert.Contains(t, Git(t, s.Dir("r"), "log", "--format=%s", "main"), "b")
}

func basic(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

func authURL(t *testing.T, s *Server, name string) string {
	u, err := url.Parse(s.RepoURL(name))
	require.NoError(t, err)
	u.User = url.UserPassword("git", s.Token)
	return u.String()
}

// gitProcessesOf are the running processes whose environment names root as their project
// root: git http-backend and the git programs it starts for this server.
func gitProcessesOf(t *testing.T, root string) []string {
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	want := []byte("GIT_PROJECT_ROOT=" + root + "\x00")
	var out []string
	for _, e := range entries {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, e.Name()+" "+strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "))
	}
	return out
}
