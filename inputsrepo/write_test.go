package inputsrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
)

const token = "tok-3f9a1c-very-secret"

var initial = map[string]string{
	"tenants/acme/tenant.yaml":         "kind: Tenant\nname: acme\n",
	"tenants/acme/jobs/qwen.yaml":      "kind: ManagedInferenceJob\nname: qwen\nreplicas: 1\n",
	"tenants/globex/tenant.yaml":       "kind: Tenant\nname: globex\n",
	"tenants/nodetypes/h100.yaml":      "kind: NodeType\n",
	"recipes/models/qwen/Qwen3.yaml":   "model: Qwen/Qwen3-32B\n",
	"recipes/strategies/single.yaml":   "strategy: single_node_tp\n",
	"tenants/acme/jobs/mistral.yaml":   "kind: ManagedInferenceJob\nname: mistral\nreplicas: 2\n",
	"tenants/globex/jobs/llama.yaml":   "kind: ManagedInferenceJob\nname: llama\nreplicas: 1\n",
	"tenants/masters/mistral-24b.yaml": "kind: ModelMaster\n",
}

var dana = Author{Name: "Dana", Email: "dana@acme.example"}

// httpRemote serves one inputs repository over smart HTTP with token auth and returns the
// server and the options of a replica (its credentials in a file).
func httpRemote(t *testing.T) (*gitserver.Server, Options) {
	srv := gitserver.Start(t, token)
	url := srv.NewRepo(t, "inputs", initial)
	creds := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(creds, []byte("inferplane:"+token+"\n"), 0o600))
	return srv, Options{URL: url, CredentialsFile: creds, Backoff: time.Millisecond}
}

// fileRemote is a bare repository reached by file:// (where HTTP adds nothing).
func fileRemote(t *testing.T) (string, Options) {
	dir := filepath.Join(t.TempDir(), "inputs.git")
	gitserver.Init(t, dir, initial)
	return dir, Options{URL: "file://" + dir, Backoff: time.Millisecond}
}

func open(t *testing.T, o Options) *Repo {
	t.Helper()
	r, err := Open(o)
	require.NoError(t, err)
	return r
}

// remoteLog lists the remote branch's commits, newest first, as "<hash> <subject>".
func remoteLog(t *testing.T, bare string) []string {
	out := strings.TrimSpace(gitserver.Git(t, bare, "log", "--format=%H %s", "main"))
	return strings.Split(out, "\n")
}

func remoteFile(t *testing.T, bare, path string) string {
	return gitserver.Git(t, bare, "show", "main:"+path)
}

// addJob is a change that creates a job file, a conflict when it exists.
func addJob(tenant, job string) func(*Tree) error {
	return func(t *Tree) error {
		p := fmt.Sprintf("tenants/%s/jobs/%s.yaml", tenant, job)
		if _, err := t.ReadFile(p); err == nil {
			return Conflictf("job %s/%s exists", tenant, job)
		}
		return t.WriteFile(p, []byte("kind: ManagedInferenceJob\nname: "+job+"\n"))
	}
}

func TestWriteOneCommitOverHTTP(t *testing.T) {
	ctx := context.Background()
	srv, o := httpRemote(t)
	r := open(t, o)
	res, err := r.Write(ctx, Change{
		Apply:   addJob("acme", "llama"),
		Author:  dana,
		Message: "acme: create job llama\n\nmodel meta-llama/Llama-3.3-70B-Instruct, 1 replica",
	})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Attempts)
	assert.Equal(t, []string{"tenants/acme/jobs/llama.yaml"}, res.Changed)
	bare := srv.Dir("inputs")
	log := remoteLog(t, bare)
	require.Len(t, log, 2)
	assert.Equal(t, res.Commit+" acme: create job llama", log[0])
	// The caller is the author; the API the committer; the parent is the old head.
	assert.Equal(t, "Dana <dana@acme.example>|inferplane-api <inferplane-api@localhost>",
		strings.TrimSpace(gitserver.Git(t, bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>", "main")))
	assert.Equal(t, "kind: ManagedInferenceJob\nname: llama\n", remoteFile(t, bare, "tenants/acme/jobs/llama.yaml"))
	// Everything else is as it was: git itself finds the tree whole.
	gitserver.Git(t, bare, "fsck", "--strict")
	assert.Equal(t, "tenants/acme/jobs/llama.yaml\n", gitserver.Git(t, bare, "diff", "--name-only", "main~1", "main"))
}

func TestWriteEditsAndRemovals(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	r := open(t, o)
	_, err := r.Write(ctx, Change{Author: dana, Message: "globex: delete the tenant", Apply: func(t *Tree) error {
		return t.RemoveAll("tenants/globex")
	}})
	require.NoError(t, err)
	files := strings.Fields(gitserver.Git(t, bare, "ls-tree", "-r", "--name-only", "main"))
	assert.NotContains(t, strings.Join(files, " "), "globex")
	assert.Len(t, files, len(initial)-2)

	// A change that changes nothing makes no commit.
	res, err := r.Write(ctx, Change{Author: dana, Message: "no-op", Apply: func(t *Tree) error {
		return t.WriteFile("tenants/acme/tenant.yaml", []byte(initial["tenants/acme/tenant.yaml"]))
	}})
	require.NoError(t, err)
	assert.True(t, res.Unchanged)
	assert.Len(t, remoteLog(t, bare), 2)

	// Removing everything is refused, not committed.
	_, err = r.Write(ctx, Change{Author: dana, Message: "wipe", Apply: func(t *Tree) error {
		return errors.Join(t.RemoveAll("tenants"), t.RemoveAll("recipes"))
	}})
	require.ErrorContains(t, err, "removes every file")
	assert.Len(t, remoteLog(t, bare), 2)
}

// A failed check commits and pushes nothing; the check saw the changed tree.
func TestCheckFailureCommitsNothing(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	r := open(t, o)
	before := remoteLog(t, bare)
	var seen []byte
	_, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job big", Apply: addJob("acme", "big"),
		Check: func(_ context.Context, t *Tree) error {
			seen, _ = fs.ReadFile(t, "tenants/acme/jobs/big.yaml")
			return errors.New("tenants/acme/jobs/big.yaml: spec.gpuCount: 64 GPUs exceed the tenant's quota of 16")
		}})
	var ce *CheckError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Error(), "exceed the tenant's quota")
	assert.Contains(t, string(seen), "name: big")
	assert.Equal(t, before, remoteLog(t, bare))
}

// Two replicas write at once: the one that pushes second is refused by the remote, fetches,
// applies its change again on the new head and pushes; both changes land, one commit each.
func TestRaceRetriesOnTheNewHead(t *testing.T) {
	ctx := context.Background()
	srv, o := httpRemote(t)
	a, b := open(t, o), open(t, o)
	var logs bytes.Buffer
	a.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	calls := 0
	res, err := a.Write(ctx, Change{Author: dana, Message: "acme: scale qwen to 3", Apply: func(tr *Tree) error {
		calls++
		if calls == 1 { // b pushes while a is between its fetch and its push
			_, err := b.Write(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi")})
			require.NoError(t, err)
		}
		data, err := tr.ReadFile("tenants/acme/jobs/qwen.yaml")
		if err != nil {
			return Conflictf("job acme/qwen was deleted")
		}
		return tr.WriteFile("tenants/acme/jobs/qwen.yaml", bytes.Replace(data, []byte("replicas: 1"), []byte("replicas: 3"), 1))
	}})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Attempts)
	assert.Equal(t, 2, calls)
	bare := srv.Dir("inputs")
	log := remoteLog(t, bare)
	require.Len(t, log, 3)
	assert.Contains(t, log[0], "acme: scale qwen to 3")
	assert.Contains(t, log[1], "acme: create job phi")
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/qwen.yaml"), "replicas: 3")
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/phi.yaml"), "name: phi")
	assert.Contains(t, logs.String(), "another writer pushed first")
}

// The change no longer applies on the new head (the job was deleted meanwhile): a conflict
// with the reason, nothing of it pushed.
func TestRaceConflict(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	a, b := open(t, o), open(t, o)
	calls := 0
	_, err := a.Write(ctx, Change{Author: dana, Message: "acme: scale qwen to 3", Apply: func(tr *Tree) error {
		calls++
		if calls == 1 {
			_, err := b.Write(ctx, Change{Author: dana, Message: "acme: delete job qwen", Apply: func(tr *Tree) error {
				return tr.Remove("tenants/acme/jobs/qwen.yaml")
			}})
			require.NoError(t, err)
		}
		if _, err := tr.ReadFile("tenants/acme/jobs/qwen.yaml"); err != nil {
			return Conflictf("job acme/qwen was deleted")
		}
		return tr.WriteFile("tenants/acme/jobs/qwen.yaml", []byte("replicas: 3\n"))
	}})
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "job acme/qwen was deleted", ce.Reason)
	log := remoteLog(t, bare)
	require.Len(t, log, 2)
	assert.Contains(t, log[0], "acme: delete job qwen")
}

// Several replicas, each with its own clone, race on one remote over HTTP: every success is
// exactly one commit, and no change is lost (the shared file holds every append).
func TestConcurrentReplicas(t *testing.T) {
	ctx := context.Background()
	srv, o := httpRemote(t)
	o.Attempts = 50
	const replicas, writes = 4, 8
	var wg sync.WaitGroup
	results := make([][]Result, replicas)
	errs := make([]error, replicas)
	for i := range replicas {
		r := open(t, o)
		wg.Go(func() {
			for j := range writes {
				job := fmt.Sprintf("job-%d-%d", i, j)
				res, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job " + job, Apply: func(t *Tree) error {
					if err := addJob("acme", job)(t); err != nil {
						return err
					}
					log, _ := t.ReadFile("tenants/acme/log.txt")
					return t.WriteFile("tenants/acme/log.txt", append(log, job+"\n"...))
				}})
				if err != nil {
					errs[i] = err
					return
				}
				results[i] = append(results[i], res)
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	bare := srv.Dir("inputs")
	log := remoteLog(t, bare)
	assert.Len(t, log, 1+replicas*writes, "one commit per successful write, plus the initial one")
	commits := map[string]bool{}
	retried := 0
	for i := range replicas {
		for _, res := range results[i] {
			commits[res.Commit] = true
			retried += res.Attempts - 1
		}
	}
	assert.Len(t, commits, replicas*writes, "every write its own commit")
	for _, line := range log[:len(log)-1] {
		assert.True(t, commits[strings.Fields(line)[0]], "commit %s is a write's", line)
	}
	lines := strings.Fields(remoteFile(t, bare, "tenants/acme/log.txt"))
	assert.Len(t, lines, replicas*writes, "no append lost")
	for i := range replicas {
		for j := range writes {
			assert.Contains(t, remoteFile(t, bare, fmt.Sprintf("tenants/acme/jobs/job-%d-%d.yaml", i, j)), "ManagedInferenceJob")
		}
	}
	gitserver.Git(t, bare, "fsck", "--strict")
	t.Logf("%d writes from %d replicas: %d retries after a refused push", replicas*writes, replicas, retried)
}

// A retried create with the same idempotency key makes one commit, whichever replica gets the
// retry: the key is found in the history.
func TestIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	a, b := open(t, o), open(t, o)
	create := Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"),
		IdempotencyKey: "dex|dana|acme|7b0e1f"}
	first, err := a.Write(ctx, create)
	require.NoError(t, err)
	again, err := a.Write(ctx, create)
	require.NoError(t, err, "the retry is not a conflict: it is the same request")
	assert.True(t, again.Replayed)
	assert.Equal(t, first.Commit, again.Commit)
	onB, err := b.Write(ctx, create)
	require.NoError(t, err)
	assert.True(t, onB.Replayed)
	assert.Equal(t, first.Commit, onB.Commit)
	// A replay reads the commit it found without a fetch (a write handed to a peer whose
	// answer was lost finds its own commit so).
	for _, res := range []Result{again, onB} {
		assert.Equal(t, first.Commit, res.Snapshot.Commit)
		require.NotNil(t, res.Snapshot.Files)
		job, err := res.Snapshot.Files.ReadFile("tenants/acme/jobs/phi.yaml")
		require.NoError(t, err)
		assert.Contains(t, string(job), "ManagedInferenceJob")
	}
	assert.Len(t, remoteLog(t, bare), 2)
	// The trailer holds the key's hash, not its text.
	msg := gitserver.Git(t, bare, "log", "-1", "--format=%B", "main")
	assert.Contains(t, msg, TrailerRequest+": "+hashKey("dex|dana|acme|7b0e1f"))
	assert.NotContains(t, msg, "dana|acme")

	// The same key with another request is refused, not replayed; with the same request it is
	// replayed.
	withBody := Change{Author: dana, Message: "acme: create job phi-3", Apply: addJob("acme", "phi-3"),
		IdempotencyKey: "dex|dana|acme|third", Request: `POST /api/v1/tenants/acme/jobs {"name":"phi-3"}`}
	first3, err := a.Write(ctx, withBody)
	require.NoError(t, err)
	same, err := b.Write(ctx, withBody)
	require.NoError(t, err)
	assert.True(t, same.Replayed)
	other := withBody
	other.Request = `POST /api/v1/tenants/acme/jobs {"name":"phi-4"}`
	_, err = b.Write(ctx, other)
	var reused *KeyReusedError
	require.ErrorAs(t, err, &reused)
	assert.Equal(t, first3.Commit, reused.Commit)
	assert.Len(t, remoteLog(t, bare), 3)

	// Two replicas get the same request at once: one commit.
	twice := create
	twice.IdempotencyKey = "dex|dana|acme|second"
	twice.Apply = addJob("acme", "phi-2")
	var wg sync.WaitGroup
	res := make([]Result, 2)
	errs := make([]error, 2)
	for i, r := range []*Repo{a, b} {
		wg.Go(func() { res[i], errs[i] = r.Write(ctx, twice) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	// Both callers get the one commit: the loser of the race finds the key after its refused
	// push (Replayed), or, when both built the same commit in the same second, finds its own
	// commit already on the remote.
	assert.Equal(t, res[0].Commit, res[1].Commit, "%+v", res)
	assert.Len(t, remoteLog(t, bare), 4)
}

// A writer cancelled after its commit is made but before the push: nothing reaches the remote.
func TestCancelledBetweenCommitAndPush(t *testing.T) {
	bare, o := fileRemote(t)
	r := open(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"),
		Check: func(context.Context, *Tree) error { cancel(); return nil }})
	require.ErrorIs(t, err, context.Canceled)
	assert.Len(t, remoteLog(t, bare), 1)
	// The same replica goes on writing from the remote's state, not from its lost commit.
	res, err := r.Write(context.Background(), Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi")})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Attempts)
	assert.Len(t, remoteLog(t, bare), 2)
}

// A writer whose push is in flight when it gives up: the remote has the whole push and applies
// it after the writer stopped waiting. The push landed whole (one commit, the change complete);
// the writer either saw that (its landed check) or saw an error, and then a client retry with
// the same idempotency key, on another replica, replays it instead of writing it twice.
func TestCancelledDuringPushLandsWhole(t *testing.T) {
	srv, o := httpRemote(t)
	r := open(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	srv.BeforePush = func(req *http.Request) bool {
		body, _ := io.ReadAll(req.Body) // the whole push is here ...
		req.Body = io.NopCloser(bytes.NewReader(body))
		cancel() // ... when the caller gives up
		return true
	}
	create := Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"), IdempotencyKey: "k1"}
	res, err := r.Write(ctx, create)
	bare := srv.Dir("inputs")
	require.Eventually(t, func() bool { return len(remoteLog(t, bare)) == 2 }, 10*time.Second, 20*time.Millisecond,
		"the remote applies the push it received")
	srv.BeforePush = nil
	log := remoteLog(t, bare)
	if err == nil {
		assert.Equal(t, res.Commit, strings.Fields(log[0])[0], "the write says it landed: it is the remote's head")
	} else {
		t.Logf("the writer saw: %v", err)
		assert.ErrorIs(t, err, context.Canceled)
	}
	again, err := open(t, o).Write(context.Background(), create)
	require.NoError(t, err)
	assert.True(t, again.Replayed)
	log = remoteLog(t, bare)
	require.Len(t, log, 2, "one commit, whatever the first writer saw")
	assert.Equal(t, again.Commit, strings.Fields(log[0])[0])
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/phi.yaml"), "name: phi")
}

// Two replicas make the same change on the same head in the same second: two clients signed in
// as one identity delete one job through two replicas, or a client sends its create again with
// its key to another replica while the first is under way. b's push is on its way when a's lands,
// and b's answer is lost (it failed without saying how), so b looks at the remote for its
// commit. It must not take a's commit for its own: every answer that is not Replayed is a commit
// of its own, and the write that lost is refused (or replayed) as on any other head.
func TestSameChangeOnTwoReplicasLandsOnce(t *testing.T) {
	const qwen = "tenants/acme/jobs/qwen.yaml"
	deleteQwen := func(tr *Tree) error {
		if _, err := tr.ReadFile(qwen); err != nil {
			return Conflictf("job acme/qwen no longer exists")
		}
		return tr.Remove(qwen)
	}
	for _, tc := range []struct {
		name   string
		change Change
		check  func(t *testing.T, a, b Result, errB error)
	}{
		{"two deletes of one job", Change{Author: dana, Message: "acme: delete job qwen", Apply: deleteQwen},
			func(t *testing.T, a, b Result, errB error) {
				var ce *ConflictError
				require.ErrorAs(t, errB, &ce, "b's delete answered %+v (a's commit %s)", b, a.Commit)
				assert.Equal(t, "job acme/qwen no longer exists", ce.Reason)
			}},
		{"one create sent twice with its key", Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"),
			IdempotencyKey: "dex|dana|acme|k1", Request: "POST acme/jobs phi"},
			func(t *testing.T, a, b Result, errB error) {
				require.NoError(t, errB)
				assert.True(t, b.Replayed, "b's create answered %+v", b)
				assert.Equal(t, a.Commit, b.Commit)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv, o := httpRemote(t)
			o.Now = func() time.Time { return time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC) }
			a, b := open(t, o), open(t, o)
			for _, r := range []*Repo{a, b} {
				_, err := r.Head(ctx) // both have the same head
				require.NoError(t, err)
			}
			var (
				resA   Result
				errA   error
				pushes sync.Map
			)
			srv.BeforePush = func(*http.Request) bool {
				if _, again := pushes.LoadOrStore("b", true); again {
					return true // a's push, and any after it
				}
				resA, errA = a.Write(ctx, tc.change) // a's push lands while b's is on its way ...
				return false                         // ... and b's answer is lost
			}
			resB, errB := b.Write(ctx, tc.change)
			require.NoError(t, errA)
			tc.check(t, resA, resB, errB)
			log := remoteLog(t, srv.Dir("inputs"))
			require.Len(t, log, 2, "one commit")
			assert.Equal(t, resA.Commit, strings.Fields(log[0])[0])
		})
	}
}

// Credentials never appear in errors or logs: a wrong token, a URL with credentials in it.
func TestCredentialsStayOut(t *testing.T) {
	ctx := context.Background()
	srv, o := httpRemote(t)
	wrong := filepath.Join(t.TempDir(), "wrong")
	require.NoError(t, os.WriteFile(wrong, []byte("inferplane:"+token+"-but-wrong\n"), 0o600))
	o.CredentialsFile = wrong
	var logs bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	r := open(t, o)
	_, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), srv.RepoURL("inputs"))
	assert.NotContains(t, err.Error(), token)
	assert.NotContains(t, logs.String(), token)

	_, err = Open(Options{URL: strings.Replace(srv.RepoURL("inputs"), "http://", "http://inferplane:"+token+"@", 1)})
	require.ErrorContains(t, err, "carries credentials")
	assert.NotContains(t, err.Error(), token)

	_, err = Open(Options{URL: srv.RepoURL("inputs"), CredentialsFile: filepath.Join(t.TempDir(), "absent")})
	require.ErrorContains(t, err, "credentials")
}

// The writer's trailers join a message's own (a tenant change names its tenant, change and
// reason in trailers, which its history reads): a second paragraph would hide them, since only
// a message's last paragraph holds its trailers.
func TestWriterTrailersJoinTheMessages(t *testing.T) {
	bare, o := fileRemote(t)
	o.WriterID = "http://10.0.0.7:8080 abc"
	for _, msg := range []string{"acme: quota to 16 GPUs\n\nInferplane-Tenant: acme\nInferplane-Reason: growth", "acme: create job phi"} {
		_, err := open(t, o).Write(context.Background(), Change{Author: dana, Message: msg, Apply: addJob("acme", msg[len(msg)-3:]),
			IdempotencyKey: msg})
		require.NoError(t, err)
		tr := Trailers(gitserver.Git(t, bare, "log", "-1", "--format=%B", "main"))
		assert.Equal(t, hashKey(msg), tr[TrailerRequest], msg)
		assert.Equal(t, o.WriterID, tr[TrailerWriter], msg)
		assert.Len(t, tr[TrailerWrite], 26, msg)
		if strings.Contains(msg, "Inferplane-Tenant") {
			assert.Equal(t, "acme", tr["Inferplane-Tenant"])
			assert.Equal(t, "growth", tr["Inferplane-Reason"])
		}
	}
}

func TestTrailers(t *testing.T) {
	assert.Equal(t, map[string]string{"Inferplane-Request": "abc", "Signed-off-by": "x <x@y>"},
		Trailers("subject\n\nbody line\n\nInferplane-Request: abc\nSigned-off-by: x <x@y>\n"))
	assert.Nil(t, Trailers("subject only"))
	assert.Nil(t, Trailers("subject\n\nnot a trailer paragraph"))
}

func TestOpenRefusesBadOptions(t *testing.T) {
	for url, want := range map[string]string{
		"":                        "URL is empty",
		"ssh://git@host/repo.git": "expected https://",
		"git@host:repo.git":       "expected https://",
	} {
		_, err := Open(Options{URL: url})
		assert.ErrorContains(t, err, want, url)
	}
	_, err := Open(Options{URL: "file:///x"})
	assert.NoError(t, err)
}

// A replica that clones afresh (RecloneAfter) goes on writing, and still finds the keys.
func TestReclone(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	o.RecloneAfter = 1
	r := open(t, o)
	first, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job a", Apply: addJob("acme", "a"), IdempotencyKey: "a"})
	require.NoError(t, err)
	old := r.repo
	_, err = r.Write(ctx, Change{Author: dana, Message: "acme: create job b", Apply: addJob("acme", "b")})
	require.NoError(t, err)
	assert.NotSame(t, old, r.repo, "cloned afresh")
	again, err := r.Write(ctx, Change{Author: dana, Message: "acme: create job a", Apply: addJob("acme", "a"), IdempotencyKey: "a"})
	require.NoError(t, err)
	assert.True(t, again.Replayed)
	assert.Equal(t, first.Commit, again.Commit)
	assert.Len(t, remoteLog(t, bare), 3)
}
