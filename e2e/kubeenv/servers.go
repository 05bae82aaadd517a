package kubeenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Servers starts named API servers for a test package on first use and stops them all when
// the package's tests are done: for packages whose tests need two clusters (a host cluster
// and a tenant's) or need a cluster in only some tests.
//
//	var clusters kubeenv.Servers
//
//	func TestMain(m *testing.M) { os.Exit(clusters.Main(m)) }
//
//	func TestX(t *testing.T) { host, tenant := clusters.Get(t, "host"), clusters.Get(t, "tenant") }
//
// Get skips the test when the binaries are missing, unless INFERPLANE_REQUIRE_KUBE=1, in
// which case it fails it: a CI run never passes by skipping.
type Servers struct {
	mu   sync.Mutex
	envs map[string]*Env
	errs map[string]error
}

// Main runs the package's tests and stops every server they started.
func (s *Servers) Main(m *testing.M) int {
	flag.Parse()
	if dir, err := BinDir(); err == nil {
		reapOrphans(dir)
	}
	code := m.Run()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, e := range s.envs {
		if err := e.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubeenv: stop %s: %v\n", name, err)
		}
	}
	s.envs = nil
	return code
}

// Get returns the server called name, starting it on first use.
func (s *Servers) Get(t testing.TB, name string) *Env {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.envs[name]; ok {
		return e
	}
	err := s.errs[name]
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		var e *Env
		e, err = Start(ctx)
		cancel()
		if err == nil {
			if s.envs == nil {
				s.envs = map[string]*Env{}
			}
			s.envs[name] = e
			stopBeforeTimeout(e)
			return e
		}
		if s.errs == nil {
			s.errs = map[string]error{}
		}
		s.errs[name] = err
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("kubeenv: %s API server: %v", name, err)
	}
	t.Skipf("SKIPPED: no real API server (%s): %v", name, err)
	return nil
}
