package inputsrepo

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
)

// acmeReads is what a write to acme reads.
var acmeReads = DefaultDeps("acme")

// A change prepared on one replica (its Apply and Check run there) is put on the branch by
// another replica's writer, as the preparing one made it: one commit, its author, its message,
// its key; the writer that pushed it named in a trailer, which the other replicas read back.
func TestPreparedChangeSubmittedElsewhere(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	a := open(t, o)
	wo := o
	wo.WriterID = "http://10.0.0.2:8080 mac"
	writer := open(t, wo)
	checked := 0
	p, res, err := a.Prepare(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"), Reads: acmeReads,
		IdempotencyKey: "k-phi", Check: func(context.Context, *Tree) error { checked++; return nil }}, false)
	require.NoError(t, err)
	require.Nil(t, res)
	assert.Equal(t, 1, checked)
	// What crosses between replicas is data: it survives JSON.
	data, err := json.Marshal(p)
	require.NoError(t, err)
	var got Prepared
	require.NoError(t, json.Unmarshal(data, &got))

	w, err := writer.Submit(ctx, got)
	require.NoError(t, err)
	assert.Equal(t, []string{"tenants/acme/jobs/phi.yaml"}, w.Changed)
	log := remoteLog(t, bare)
	require.Len(t, log, 2)
	assert.Equal(t, w.Commit+" acme: create job phi", log[0])
	assert.Equal(t, "Dana <dana@acme.example>", strings.TrimSpace(gitserver.Git(t, bare, "log", "-1", "--format=%an <%ae>", "main")))
	msg := gitserver.Git(t, bare, "log", "-1", "--format=%B", "main")
	assert.Contains(t, msg, TrailerRequest+": "+hashKey("k-phi"))
	assert.Contains(t, msg, TrailerWriter+": http://10.0.0.2:8080 mac")
	assert.Equal(t, 1, checked, "not checked again by the writer")

	_, err = a.Head(ctx)
	require.NoError(t, err)
	assert.Contains(t, a.Writers(time.Now().Add(-time.Hour)), "http://10.0.0.2:8080 mac")

	// The same request again is found by its key wherever it is prepared.
	_, res, err = a.Prepare(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"), Reads: acmeReads,
		IdempotencyKey: "k-phi"}, false)
	require.NoError(t, err)
	require.NotNil(t, res)
	assert.True(t, res.Replayed)
	assert.Equal(t, w.Commit, res.Commit)
}

// A prepared change whose tenant another write changed since is refused by the writer
// (*ReadsMovedError), nothing of it written; one whose tenant did not change lands although the
// head moved (a write to another tenant).
func TestPreparedChangeAndTheHeadMoving(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	a, writer := open(t, o), open(t, o)
	p, _, err := a.Prepare(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"), Reads: acmeReads}, false)
	require.NoError(t, err)
	_, err = writer.Write(ctx, Change{Author: dana, Message: "globex: create job x", Apply: addJob("globex", "x"), Reads: DefaultDeps("globex")})
	require.NoError(t, err)
	_, err = writer.Submit(ctx, p)
	require.NoError(t, err, "another tenant's write does not touch what it read")
	assert.Len(t, remoteLog(t, bare), 3)

	p, _, err = a.Prepare(ctx, Change{Author: dana, Message: "acme: create job psi", Apply: addJob("acme", "psi"), Reads: acmeReads}, false)
	require.NoError(t, err)
	_, err = writer.Write(ctx, Change{Author: dana, Message: "acme: create job rho", Apply: addJob("acme", "rho"), Reads: acmeReads})
	require.NoError(t, err)
	_, err = writer.Submit(ctx, p)
	var moved *ReadsMovedError
	require.ErrorAs(t, err, &moved)
	assert.Equal(t, "tenants/acme", moved.Path)
	assert.Len(t, remoteLog(t, bare), 4, "nothing of it written")
	// Prepared again on the new head, it lands.
	p, _, err = a.Prepare(ctx, Change{Author: dana, Message: "acme: create job psi", Apply: addJob("acme", "psi"), Reads: acmeReads}, true)
	require.NoError(t, err)
	_, err = writer.Submit(ctx, p)
	require.NoError(t, err)
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/psi.yaml"), "name: psi")
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/rho.yaml"), "name: rho")
}

// Prepare refuses what Write refuses, and what no writer could check.
func TestPrepareRefuses(t *testing.T) {
	ctx := context.Background()
	_, o := fileRemote(t)
	a := open(t, o)
	_, _, err := a.Prepare(ctx, Change{Author: dana, Message: "acme: create job qwen", Apply: addJob("acme", "qwen"), Reads: acmeReads}, false)
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	_, _, err = a.Prepare(ctx, Change{Author: dana, Message: "acme: create job x", Apply: addJob("acme", "x")}, false)
	require.ErrorContains(t, err, "needs its Reads")
	_, err = a.Submit(ctx, Prepared{Author: dana, Message: "x", Reads: []string{"tenants/acme"}, Deps: []string{""},
		Edits: map[string][]byte{"../escape": []byte("x")}})
	require.ErrorContains(t, err, "not a clean relative path")
}

// Holds: the commit a writer made of a prepared change has the change's Reads as prepared, and
// so does a head that only another tenant's write moved since; a head where another write changed
// the tenant, or the head the change was prepared on, does not.
func TestHolds(t *testing.T) {
	ctx := context.Background()
	_, o := fileRemote(t)
	a, writer := open(t, o), open(t, o)
	p, _, err := a.Prepare(ctx, Change{Author: dana, Message: "acme: create job phi", Apply: addJob("acme", "phi"), Reads: acmeReads}, false)
	require.NoError(t, err)
	made, err := writer.Submit(ctx, p)
	require.NoError(t, err)
	other, err := writer.Write(ctx, Change{Author: dana, Message: "globex: create job x", Apply: addJob("globex", "x"), Reads: DefaultDeps("globex")})
	require.NoError(t, err)
	moved, err := writer.Write(ctx, Change{Author: dana, Message: "acme: create job rho", Apply: addJob("acme", "rho"), Reads: acmeReads})
	require.NoError(t, err)
	_, err = a.Head(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, commit string
		holds        bool
	}{
		{"the writer's commit of it", made.Commit, true},
		{"a head only another tenant's write moved", other.Commit, true},
		{"a head where its tenant moved", moved.Commit, false},
		{"the head it was prepared on", p.Base, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holds, err := a.Holds(tc.commit, p)
			require.NoError(t, err)
			assert.Equal(t, tc.holds, holds)
		})
	}
	_, err = a.Holds(strings.Repeat("0", 40), p)
	assert.Error(t, err, "a commit not fetched")
}
