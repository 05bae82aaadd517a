package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/agent/runtime/process"
	"github.com/inferplane/inferplane/e2e/modelserverstandin/standinbin"
)

// standinBin is the stand-in model server (e2e/modelserverstandin), built once for the tests.
var standinBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agent-test-")
	if err != nil {
		panic(err)
	}
	if standinBin, err = standinbin.Build(dir); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// transcriptPath is a transcript of agent/serverlog/testdata.
func transcriptPath(name string) string {
	return filepath.Join("serverlog", "testdata", name)
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// standin is the stand-in model server as the spec of the agent's process runtime.
func standin(addr string, args ...string) runtime.Spec {
	return runtime.Spec{Name: "inferplane-model-server", Image: standinBin,
		Args: append([]string{"--addr", addr}, append(args, "serve", "Qwen/Qwen3-32B", "--tensor-parallel-size", "1")...)}
}

// running is an agent running in the test, writing to an in-memory console.
type running struct {
	t       *testing.T
	console *console
	cancel  context.CancelFunc
	done    chan error
}

func startAgent(t *testing.T, cfg Config) *running {
	t.Helper()
	r := &running{t: t, console: &console{}, done: make(chan error, 1)}
	cfg.Console = r.console
	if cfg.Runtime == nil {
		cfg.Runtime = process.Runtime{}
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	cfg.HealthInterval = max(cfg.HealthInterval, 50*time.Millisecond)
	cfg.StatusMinGap = time.Millisecond // every update, so the tests see every progress
	cfg.Logf = t.Logf
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- Run(ctx, cfg) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop is SIGTERM to the agent: it returns once the agent did.
func (r *running) stop() error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(2 * time.Minute):
		r.t.Fatal("the agent did not stop")
		return nil
	}
}

func (r *running) records() []guestlog.Record { return r.console.records(r.t) }

// waitFor waits until a record satisfies ok.
func (r *running) waitFor(what string, ok func(guestlog.Record) bool) guestlog.Record {
	r.t.Helper()
	var found guestlog.Record
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, rec := range r.records() {
			if ok(rec) {
				return rec
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("no record %s; the console:\n%s", what, r.dump())
	return found
}

func (r *running) dump() string {
	var b strings.Builder
	for _, rec := range r.records() {
		if rec.Kind == guestlog.KindStatus {
			b.WriteString(strconv.FormatUint(rec.Seq, 10) + " status " + string(rec.Status.Stage) + ": " + rec.Status.Detail + "\n")
		} else {
			b.WriteString(strconv.FormatUint(rec.Seq, 10) + " " + string(rec.Stream) + ": " + rec.Line + "\n")
		}
	}
	return b.String()
}

func isStage(s guestlog.Stage) func(guestlog.Record) bool {
	return func(r guestlog.Record) bool { return r.Kind == guestlog.KindStatus && r.Status.Stage == s }
}

func lineContains(stream guestlog.Stream, s string) func(guestlog.Record) bool {
	return func(r guestlog.Record) bool {
		return r.Kind == guestlog.KindLine && r.Stream == stream && strings.Contains(r.Line, s)
	}
}

// stages are the stages of the status records in order, each change once.
func stages(recs []guestlog.Record) []guestlog.Stage {
	var out []guestlog.Stage
	for _, r := range recs {
		if r.Kind == guestlog.KindStatus && (len(out) == 0 || out[len(out)-1] != r.Status.Stage) {
			out = append(out, r.Status.Stage)
		}
	}
	return out
}
