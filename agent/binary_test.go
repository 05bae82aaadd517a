package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/e2e/agentproc"
)

// The inferplane binary (go build of cmd/inferplane), built once for the tests that run the
// agent as the process the guest's unit runs.
var cli struct {
	once sync.Once
	path string
	err  error
}

func inferplaneBin(t *testing.T) string {
	t.Helper()
	cli.once.Do(func() { cli.path, cli.err = agentproc.Build(filepath.Dir(standinBin)) })
	require.NoError(t, cli.err)
	return cli.path
}

// agentProc is `inferplane agent` running as a process, its console a file.
type agentProc struct {
	agentproc.Agent
	t       *testing.T
	console string
	dir     string
}

func newAgentProc(t *testing.T, args ...string) *agentProc {
	dir := t.TempDir()
	a := &agentProc{t: t, console: filepath.Join(dir, "console"), dir: dir, Agent: agentproc.Agent{Bin: inferplaneBin(t), Dir: dir,
		Env: []string{"PATH=" + os.Getenv("PATH")},
		Args: append([]string{"agent", "--console", filepath.Join(dir, "console"), "--state-dir", filepath.Join(dir, "state"),
			"--hf-token-file", filepath.Join(dir, "no-token"), "--health-interval", "100ms", "--restart-backoff", "100ms"}, args...)}}
	t.Cleanup(func() { a.Stop(5 * time.Second) })
	return a
}

func (a *agentProc) start() {
	a.t.Helper()
	require.NoError(a.t, a.Start())
}

// signal sends sig to the agent alone and waits for it to end.
func (a *agentProc) signal(sig syscall.Signal) error {
	a.t.Helper()
	exit, err := a.Signal(sig, 90*time.Second)
	require.NoError(a.t, err)
	return exit
}

func (a *agentProc) records() []guestlog.Record {
	recs, err := agentproc.Records(a.console)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		require.NoError(a.t, err)
	}
	return recs
}

// waitFor waits for a record of a Seq above afterSeq (a restarted agent writes the record it
// was writing again first: that one does not count).
func (a *agentProc) waitFor(what string, ok func(guestlog.Record) bool, afterSeq uint64) {
	a.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range a.records() {
			if r.Seq > afterSeq && ok(r) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.t.Fatalf("no record %s; the agent's log:\n%s", what, a.Tail(30))
}

func lastSeq(recs []guestlog.Record) uint64 {
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Seq
}

// assertSeqOnce: in console order every record has a Seq above all before it, or repeats one
// exactly (the record an agent killed mid-write writes again, which a reader skips): no Seq
// stands for two records, and none goes back.
func assertSeqOnce(t *testing.T, recs []guestlog.Record) []guestlog.Record {
	t.Helper()
	seen := map[uint64]guestlog.Record{}
	var top uint64
	var unique []guestlog.Record
	for _, r := range recs {
		if prev, ok := seen[r.Seq]; ok {
			assert.Equal(t, prev, r, "Seq %d written twice must be the same record", r.Seq)
			continue
		}
		assert.Greater(t, r.Seq, top, "Seq goes on")
		top = r.Seq
		seen[r.Seq] = r
		unique = append(unique, r)
	}
	return unique
}

// TestAgentBinaryKilledAndStoppedStandIn runs `inferplane agent` (go build of cmd/inferplane)
// with the process runtime over the stand-in model server: SIGKILL to the agent takes its
// server with it (the kernel ends the child), the agent started again goes on with the next
// Seq and a new server, and SIGTERM stops that one gracefully and the agent exits 0.
func TestAgentBinaryKilledAndStoppedStandIn(t *testing.T) {
	addr := freeAddr(t)
	a := newAgentProc(t, "--engine", "process", "--health-url", "http://"+addr+"/health",
		standinBin, "--addr", addr, "--script", transcriptPath("vllm-serve.log"), "--speed", "200")
	a.start()
	a.waitFor("serving", isStage(guestlog.StageServing), 0)
	require.Error(t, a.signal(syscall.SIGKILL))
	n := lastSeq(a.records())

	a.start()
	a.waitFor("serving again", isStage(guestlog.StageServing), n)
	require.NoError(t, a.signal(syscall.SIGTERM), "SIGTERM: the agent stops its server and exits 0")
	recs := assertSeqOnce(t, a.records())
	last := recs[len(recs)-1]
	require.Equal(t, guestlog.KindStatus, last.Kind)
	assert.Equal(t, guestlog.StageStopping, last.Status.Stage)
	assert.Equal(t, 0, last.Status.LastExit.Code)
	starts := 0
	for _, r := range recs {
		if r.Kind == guestlog.KindLine && strings.HasPrefix(r.Line, "started the model server") {
			starts++
		}
	}
	assert.Equal(t, 2, starts, "a new server after the agent's restart (a process dies with its agent)")
	_, err := os.Stat(filepath.Join(a.dir, "state", StateFile))
	require.NoError(t, err)
}

// TestAgentBinaryReattachesAfterSIGKILLStandIn: the agent runs the server through the Docker
// Engine API (its stand-in, in this test, so the container outlives the agent as in the
// guest); killed with SIGKILL while the server prints numbered lines, the agent started again
// reattaches to the same container and goes on from its cursor: every numbered line once,
// none lost, Seq going on, and a single container created.
func TestAgentBinaryReattachesAfterSIGKILLStandIn(t *testing.T) {
	addr := freeAddr(t)
	d, sock := dockerDaemon(t, "--addr", addr, "--flood", "300", "--every", "10ms",
		"--script", transcriptPath("parakeet-serve.log"), "--speed", "100", "--runtime", "parakeet")
	a := newAgentProc(t, "--engine", "docker", "--docker-host", "unix://"+sock, "--health-url", "http://"+addr+"/health",
		"--console-rate", "10000000", standinImage)
	a.start()
	a.waitFor("line 60", lineContains(guestlog.Stdout, "standin line 60 of 300"), 0)
	require.Error(t, a.signal(syscall.SIGKILL))
	n := lastSeq(a.records())
	time.Sleep(300 * time.Millisecond) // the server goes on printing while no agent reads

	a.start()
	a.waitFor("the reattach", lineContains(guestlog.Agent, "reattached to the model server's container"), n)
	a.waitFor("serving", isStage(guestlog.StageServing), n)
	require.NoError(t, a.signal(syscall.SIGTERM))

	recs := assertSeqOnce(t, a.records())
	counts := map[int]int{}
	numbered := regexp.MustCompile(`^standin line (\d+) of 300$`)
	for _, r := range recs {
		if m := numbered.FindStringSubmatch(r.Line); m != nil && r.Kind == guestlog.KindLine {
			i, _ := strconv.Atoi(m[1])
			counts[i]++
		}
	}
	for i := 1; i <= 300; i++ {
		assert.Equal(t, 1, counts[i], "line %d", i)
	}
	creates := 0
	for _, req := range d.Requests() {
		if req == "POST /containers/create" {
			creates++
		}
	}
	assert.Equal(t, 1, creates, "one container, reattached")
	assert.Empty(t, d.Containers(), "stopped and removed on SIGTERM")
}
