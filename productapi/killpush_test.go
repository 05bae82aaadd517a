package productapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// A replica process is killed (SIGKILL, by the test) in the middle of its push of the inputs,
// while another replica goes on writing: the git server holds the dying replica's whole push
// and, once the replica is dead, either applies it (the push landed: its writes are in the
// inputs, though no caller heard so) or refuses it (nothing of it landed). Either way, every
// write a caller was answered 2xx for is in the inputs, exactly once; every write whose caller
// got an error is in the inputs at most once, and a retry with its key on the surviving replica
// finds it or writes it; nothing else was committed; the inputs load, plan and render for every
// tenant as generate would (and pass its admission check); the remote is whole (git fsck); and
// after the survivor's reconcile every tenant repository is what generate renders.
func TestReplicaKilledMidPush(t *testing.T) {
	for _, land := range []bool{true, false} {
		t.Run(map[bool]string{true: "the held push lands", false: "the held push is refused"}[land], func(t *testing.T) {
			killMidPush(t, land)
		})
	}
}

func killMidPush(t *testing.T, land bool) {
	ctx := context.Background()
	gs := gitserver.Start(t, "kill-push-token")
	r := apitest.Remotes{Server: gs}
	inputs, tenants := apitest.Fleet(t, r, 4, 2, 4)
	before := len(commits(t, r))

	// The victim signs in to the git server as "victim": its pushes are told apart by that.
	held, release, victimDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	var victimOnce sync.Once
	inputsPush := func(req *http.Request) (victim, ok bool) {
		user, _, _ := req.BasicAuth()
		return user == "victim", strings.HasSuffix(req.URL.Path, "/inputs.git/git-receive-pack")
	}
	gs.BeforePush = func(req *http.Request) bool {
		isVictim, ok := inputsPush(req)
		switch {
		case !ok:
			return true
		case !isVictim:
			// When the held push is to land, the survivor's pushes that come while it is held
			// go after it: the held push then finds the branch where its sender left it,
			// rather than being refused at the ref lock for a branch moved under it.
			if land && holding.Load() {
				<-victimDone
			}
			return true
		case !holding.CompareAndSwap(false, true):
			return true
		}
		body, _ := io.ReadAll(req.Body) // the whole push is here ...
		req.Body = io.NopCloser(bytes.NewReader(body))
		close(held)
		<-release // ... and stays here while its sender dies
		return land
	}
	gs.AfterPush = func(req *http.Request) {
		if isVictim, ok := inputsPush(req); isVictim && ok {
			victimOnce.Do(func() { close(victimDone) })
		}
	}
	victim, stop := startReplicaProcess(t, gs, inputs, "victim:"+gs.Token)
	survivor := startReplica(t, r, inputs, fleetTokens{}, productapi.Options{})

	// The other replica writes all along: until the victim is dead, and a few writes after.
	dead := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var outs []killOutcome
	record := func(o killOutcome) {
		mu.Lock()
		outs = append(outs, o)
		mu.Unlock()
	}
	create := func(url, tenant, name string) killOutcome {
		c := client.New(url, client.StaticToken("dev-"+tenant))
		c.HTTP = &http.Client{Timeout: 5 * time.Minute}
		w, err := c.CreateJob(ctx, tenant, apiv1.JobCreate{Name: name, Model: "Qwen/Qwen3-32B"}, client.WriteOptions{IdempotencyKey: name})
		return killOutcome{tenant: tenant, job: name, commit: w.Write.InputsCommit, err: err}
	}
	for c := range 2 {
		wg.Go(func() {
			after := 0
			for i := 0; after < 3; i++ {
				select {
				case <-dead:
					after++
				default:
				}
				o := create(survivor.url, tenants[(c+i)%4], fmt.Sprintf("s%d-%03d", c, i))
				assert.NoError(t, o.err, "the survivor's write %s/%s", o.tenant, o.job)
				record(o)
			}
		})
	}
	// Writes through the victim: some are in the push it dies in, some wait behind it.
	for c := range 12 {
		wg.Go(func() { record(create(victim, tenants[c%4], fmt.Sprintf("v%02d", c))) })
	}
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the victim did not push within 2 minutes")
	}
	stop() // SIGKILL, and waits for the process to be gone
	close(dead)
	close(release)
	wg.Wait()

	answered, failed := 0, 0
	for _, o := range outs {
		if o.err == nil {
			answered++
		} else {
			failed++
			require.True(t, strings.HasPrefix(o.job, "v"), "only the victim's callers may be failed: %s: %v", o.job, o.err)
		}
	}
	require.NotZero(t, failed, "the victim's callers in flight were told their write failed")
	t.Logf("answered %d writes, %d failed with the victim", answered, failed)

	// What the inputs hold: every answered write once, every failed one at most once, nothing
	// else.
	subjects := commitSubjects(t, r)[before:]
	count := map[string]int{}
	for _, s := range subjects {
		_, job, ok := strings.Cut(s, ": create job ")
		require.True(t, ok, "a commit no write asked for: %q", s)
		job, _, _ = strings.Cut(job, " ")
		count[job]++
	}
	inputsDir := filepath.Join(t.TempDir(), "inputs")
	gitserver.Git(t, "", "clone", "-q", r.Path("inputs"), inputsDir)
	landed := 0
	for _, o := range outs {
		file := filepath.Join(inputsDir, "tenants", o.tenant, "jobs", o.job+".yaml")
		if o.err == nil {
			assert.Equal(t, 1, count[o.job], "answered write %s: one commit", o.job)
			assert.FileExists(t, file)
			assert.Contains(t, gitserver.Git(t, r.Path("inputs"), "branch", "--contains", o.commit), "main", "its commit is on the branch")
			continue
		}
		assert.LessOrEqual(t, count[o.job], 1, "failed write %s: at most one commit", o.job)
		if count[o.job] == 1 {
			landed++
			assert.FileExists(t, file)
		} else {
			assert.NoFileExists(t, file)
		}
	}
	if !land {
		assert.Zero(t, landed, "the refused push landed nothing")
	}
	t.Logf("of the %d failed writes, %d are in the inputs (the dead replica's push %s)", failed, landed, map[bool]string{true: "was let through", false: "was refused"}[land])
	// A push refused at the ref lock leaves its objects behind, unreachable: that is no damage.
	assert.Equal(t, "", strings.TrimSpace(gitserver.Git(t, r.Path("inputs"), "fsck", "--strict", "--no-dangling", "--no-progress")), "the remote is whole")
	validates(t, r, inputsDir)

	// A failed caller retries with its key on the survivor: found when its write landed,
	// written otherwise; once either way.
	for _, o := range outs {
		if o.err == nil {
			continue
		}
		again := create(survivor.url, o.tenant, o.job)
		require.NoError(t, again.err, "retry of %s", o.job)
	}
	count = map[string]int{}
	for _, s := range commitSubjects(t, r)[before:] {
		_, job, _ := strings.Cut(s, ": create job ")
		job, _, _ = strings.Cut(job, " ")
		count[job]++
	}
	for _, o := range outs {
		assert.Equal(t, 1, count[o.job], "%s: one commit after the retries", o.job)
	}
	for _, o := range survivor.srv.Reconcile(ctx) {
		assert.NoError(t, o.Err, o.Tenant)
	}
	gitserver.Git(t, inputsDir, "pull", "-q")
	assertRepositoriesAsGenerated(t, r, inputsDir, tenants)
}

type killOutcome struct {
	tenant, job, commit string
	err                 error
}

// commitSubjects lists the inputs branch's commit subjects, oldest first.
func commitSubjects(t *testing.T, r apitest.Remotes) []string {
	out := strings.TrimSpace(gitserver.Git(t, r.Path("inputs"), "log", "--reverse", "--format=%s", "main"))
	return strings.Split(out, "\n")
}

// validates renders every tenant of an inputs checkout as generate does (load, plan, render,
// admission check), writing nothing.
func validates(t *testing.T, r apitest.Remotes, inputsDir string) {
	t.Helper()
	out, err := generator.Render(generator.Options{RecipesDir: filepath.Join(inputsDir, "recipes"), TenantsDir: filepath.Join(inputsDir, "tenants"),
		OutDir: t.TempDir(), Getenv: r.Getenv, Check: generator.AdmissionCheck(context.Background())})
	require.NoError(t, err, "the inputs validate")
	require.NotEmpty(t, out)
}

// startReplicaProcess runs a replica as a process of its own (this test binary again, as
// TestHelperReplica), fetching and pushing the inputs with the given credentials, and returns
// its URL and a stop that kills it (SIGKILL) and waits until it is gone.
func startReplicaProcess(t *testing.T, gs *gitserver.Server, inputs, credentials string) (string, func()) {
	t.Helper()
	creds := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(creds, []byte(credentials), 0o600))
	listen := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperReplica$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelperInputs+"="+inputs, envHelperCreds+"="+creds, envHelperToken+"="+gs.Token, envHelperListen+"="+listen)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "the replica process starts")
	require.True(t, strings.HasPrefix(sc.Text(), "LISTENING"), sc.Text())
	url := "http://" + listen
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 2*time.Minute, 50*time.Millisecond, "the replica process is ready")
	return url, stop
}
