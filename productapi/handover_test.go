package productapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// answerLost stands between the replicas and the writer: it forwards each request to the
// writer and, once the writer has answered (a submit's push has landed), breaks the connection
// instead of passing the answer on, as when the writer dies or the network breaks right after
// its push.
type answerLost struct {
	to string // the writer's peer listener (Replica.PeerURL)

	mu      sync.Mutex
	answers []string // what the writer answered, never delivered
}

func (a *answerLost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, a.to+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	var answer []byte
	if resp, err := http.DefaultClient.Do(req); err == nil {
		answer, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err) // an HTTP/1.1 server's writer always hijacks
	}
	conn.Close()
	a.mu.Lock()
	a.answers = append(a.answers, string(answer))
	a.mu.Unlock()
}

func (a *answerLost) lost() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.answers...)
}

// lostAnswerSetup is two replicas with the peer token: the writer, whose peer URL reaches it
// through an answerLost, and a follower that hands its writes to it.
type lostAnswerSetup struct {
	r                apitest.Remotes
	writer, follower replica
	lost             *answerLost
	writerURL        string // the writer's peer URL (the answerLost's)
}

func startLostAnswerSetup(t *testing.T) *lostAnswerSetup {
	ctx := apitest.Ctx(t)
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	lost := &answerLost{}
	proxy := httptest.NewUnstartedServer(lost)
	t.Cleanup(proxy.Close)
	writerURL := "http://" + proxy.Listener.Addr().String()
	w := apitest.StartReplica(t, r, inputs, people, productapi.Options{PeerToken: "peers-secret", PeerURL: writerURL})
	lost.to = w.PeerURL // where it serves the peer route
	proxy.Start()
	writer := replica{srv: w.Server, url: w.URL}
	// The first URL of the recent writers is followed: the follower's sorts after the writer's
	// (nothing is ever posted to it here).
	follower := startReplica(t, r, inputs, people, productapi.Options{PeerToken: "peers-secret", PeerURL: writerURL + "/follower"})
	// A write on the writer names it in the head's trailer; the follower reads that head.
	_, err := client.New(writer.url, client.StaticToken("dana")).CreateJob(ctx, "acme",
		apiv1.JobCreate{Name: "warm", Model: "Qwen/Qwen3-32B", Replicas: 1}, client.WriteOptions{})
	require.NoError(t, err)
	require.NoError(t, follower.srv.Refresh(ctx))
	return &lostAnswerSetup{r: r, writer: writer, follower: follower, lost: lost, writerURL: writerURL}
}

// peerAnswer is what the writer answered a hand-over (never delivered).
type peerAnswer struct {
	Commit   string `json:"commit"`
	Replayed bool   `json:"replayed"`
}

// handOver creates acme/chat on the follower, which hands it to the writer, whose answer is
// lost; it returns the client's answer and the writer's.
func (s *lostAnswerSetup) handOver(t *testing.T, key string) (apiv1.JobWritten, peerAnswer) {
	w, err := client.New(s.follower.url, client.StaticToken("dana")).CreateJob(apitest.Ctx(t), "acme",
		apiv1.JobCreate{Name: "chat", Model: "Qwen/Qwen3-32B", Replicas: 1}, client.WriteOptions{IdempotencyKey: key})
	require.NoError(t, err)
	answers := s.lost.lost()
	require.Len(t, answers, 1, "the write was handed to the writer once")
	var a struct {
		Result *peerAnswer `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(answers[0]), &a), answers[0])
	require.NotNil(t, a.Result, "the writer took the write: %s", answers[0])
	return w, *a.Result
}

// createChat is handOver, checking that the writer wrote and pushed it.
func (s *lostAnswerSetup) createChat(t *testing.T, key string) apiv1.JobWritten {
	w, a := s.handOver(t, key)
	assert.False(t, a.Replayed)
	assert.Equal(t, a.Commit, w.Write.InputsCommit, "the client's answer is the writer's commit")
	head := gitserver.Git(t, s.r.Path("inputs"), "log", "-1", "--format=%H%n%B", "main")
	assert.True(t, strings.HasPrefix(head, a.Commit+"\n"), "the writer's commit is the inputs head:\n%s", head)
	assert.Contains(t, inputsrepo.Trailers(strings.SplitN(head, "\n", 2)[1])[inputsrepo.TrailerWriter], s.writerURL+" ",
		"the writer pushed it")
	return w
}

// commitsOf counts the inputs commits whose subject is subject.
func (s *lostAnswerSetup) commitsOf(t *testing.T, subject string) int {
	log := gitserver.Git(t, s.r.Path("inputs"), "log", "--format=%s", "main")
	return strings.Count("\n"+log, "\n"+subject+"\n")
}

// TestHandedOverWriteWhoseAnswerIsLost: the writer takes a handed-over write and pushes it, but
// its answer never reaches the replica that handed it over, which then submits the write to
// its own writer and finds it there. That is the client's one request, written once: answered
// as written (not replayed), and the tenant's repository published by the replica that
// prepared it (rendered), with the client's key or without one (the key the hand-over adds).
func TestHandedOverWriteWhoseAnswerIsLost(t *testing.T) {
	for _, tc := range []struct{ name, key string }{
		{"the client's key", "chat-1"},
		{"no key", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startLostAnswerSetup(t)
			w := s.createChat(t, tc.key)
			assert.False(t, w.Write.Replayed, "the client asked once: its write, not a replay")
			assert.True(t, w.Write.Rendered, w.Write.RenderError)
			assert.Empty(t, w.Write.RenderError)
			assert.NotEmpty(t, w.Write.TenantCommit, "the tenant's repository was pushed")
			assert.Contains(t, gitserver.Git(t, s.r.Path("acme"), "show", "main:jobs/chat/kustomization.yaml"), "r0-n0-vm.yaml")
			assert.Contains(t, gitserver.Git(t, s.r.Path("acme"), "log", "-1", "--format=%B", "main"),
				inputsrepo.InputsTrailer(w.Write.InputsCommit), "rendered from the write's commit")
			assert.Equal(t, 1, s.commitsOf(t, "acme: create job chat (Qwen/Qwen3-32B)"), "the inputs have the write once")
			// The follower's writer found the commit: its reads are there at once, no refresh.
			list, err := client.New(s.follower.url, client.StaticToken("dana")).ListJobs(apitest.Ctx(t), "acme")
			require.NoError(t, err)
			assert.Equal(t, w.Write.InputsCommit, list.InputsCommit)
		})
	}
}

// TestHandedOverWriteWhoseAnswerIsLostRetried: the client sending the same request again with
// its Idempotency-Key, to either replica, after such a write is answered replayed, with the
// write's commit, and writes nothing.
func TestHandedOverWriteWhoseAnswerIsLostRetried(t *testing.T) {
	s := startLostAnswerSetup(t)
	first := s.createChat(t, "chat-1")
	for _, rep := range []replica{s.follower, s.writer} {
		again, err := client.New(rep.url, client.StaticToken("dana")).CreateJob(apitest.Ctx(t), "acme",
			apiv1.JobCreate{Name: "chat", Model: "Qwen/Qwen3-32B", Replicas: 1}, client.WriteOptions{IdempotencyKey: "chat-1"})
		require.NoError(t, err)
		assert.True(t, again.Write.Replayed, "a retry of an earlier request is a replay")
		assert.Equal(t, first.Write.InputsCommit, again.Write.InputsCommit)
	}
	assert.Equal(t, 1, s.commitsOf(t, "acme: create job chat (Qwen/Qwen3-32B)"), "the inputs have the write once")
}

// TestHandedOverRetryWhoseAnswerIsLost: a client's retry handed over by a replica that had not
// fetched the first request's commit (the writer wrote it, after another write to the tenant),
// the writer's answer (a replay) lost: the replica finds the first commit too, which does not
// hold the tenant as the retry was prepared, so it is the earlier request's write: answered
// replayed, nothing written or published by the retry.
func TestHandedOverRetryWhoseAnswerIsLost(t *testing.T) {
	ctx := apitest.Ctx(t)
	s := startLostAnswerSetup(t)
	onWriter := client.New(s.writer.url, client.StaticToken("dana"))
	_, err := onWriter.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "rho", Model: "Qwen/Qwen3-32B", Replicas: 1}, client.WriteOptions{})
	require.NoError(t, err)
	first, err := onWriter.CreateJob(ctx, "acme", apiv1.JobCreate{Name: "chat", Model: "Qwen/Qwen3-32B", Replicas: 1}, client.WriteOptions{IdempotencyKey: "chat-1"})
	require.NoError(t, err)
	require.False(t, first.Write.Replayed)
	tenantHead := gitserver.Git(t, s.r.Path("acme"), "rev-parse", "main")

	again, a := s.handOver(t, "chat-1")
	assert.True(t, a.Replayed, "the writer found the key")
	assert.True(t, again.Write.Replayed, "a retry of an earlier request is a replay")
	assert.Equal(t, first.Write.InputsCommit, again.Write.InputsCommit)
	assert.Equal(t, 1, s.commitsOf(t, "acme: create job chat (Qwen/Qwen3-32B)"), "the inputs have the write once")
	assert.Equal(t, tenantHead, gitserver.Git(t, s.r.Path("acme"), "rev-parse", "main"), "the retry published nothing")
}
