// Package inputsrepo keeps the operator's inputs (recipes/, tenants/) in a git repository and
// makes every change to them one commit, safe when several API replicas write at once.
//
// A Repo is one replica's clone: in memory (go-git), fetched before each write, never checked
// out. Write runs one change: fetch, look the request's idempotency key up in the history,
// apply the caller's change function to a Tree (the head commit with the change on top, as an
// fs.FS), run the caller's check on the result, commit with the caller as author and push it
// with the branch's old value as the expected one. When another replica pushed first the push
// is refused; the write fetches again and re-applies the change on the new head (bounded,
// jittered retries). A change that no longer applies returns its *ConflictError; a failed
// check returns a *CheckError; in both cases nothing is committed or pushed.
//
// The idempotency key is recorded in the commit itself (a trailer, hashed), so any replica
// finds it in the history: no other store. Reconcile finds the tenants whose rendered
// repository was rendered from an older inputs commit (publish records it as a trailer).
package inputsrepo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/inferplane/inferplane/generator/publish"
)

// DefaultBranch is the branch used when Options names none.
const DefaultBranch = "main"

const remoteName = "origin"

// Options say where the inputs live and how to reach them.
type Options struct {
	// URL of the repository: https://, http://, or file:// (tests, a shared disk). Credentials
	// in the URL are refused: they would end up in logs; use CredentialsFile.
	URL string
	// Branch defaults to DefaultBranch.
	Branch string
	// CredentialsFile holds the HTTP credentials: "user:password" or a bare token (sent as
	// the password of user "inferplane"), on its first line. Empty: none.
	CredentialsFile string
	// Committer is the committer of every commit (the author is the caller). Default
	// "inferplane-api <inferplane-api@localhost>".
	Committer object.Signature
	// Now is the clock of commit times. Nil: time.Now.
	Now func() time.Time
	// Logger receives a line per retried push (never a credential). Nil: no logging.
	Logger *slog.Logger
	// Attempts bounds the tries of one write (default 8); Backoff is the first pause between
	// two (default 20 ms), doubled each time up to 1 s, with jitter.
	Attempts int
	Backoff  time.Duration
	// IdempotencyWindow is how far back the history is searched for an idempotency key
	// (default 24 h of commit time, and never more than 10,000 commits).
	IdempotencyWindow time.Duration
	// RecloneAfter bounds the memory a clone takes: after this many writes (default 10,000)
	// the next one clones afresh, dropping the objects of every commit it fetched and made.
	RecloneAfter int
	// MaxBatch bounds the writes one push carries (group commit; default 64). 1 pushes every
	// write on its own.
	MaxBatch int
	// WriterID names this replica's writer in the commits it pushes (TrailerWriter), so that
	// other replicas can hand it their writes (Submit). Empty: no trailer.
	WriterID string
	// CheckAgain applies and checks a write again on every new head, even where its Reads did
	// not change: what a race costs without carry-over, for the benchmarks that compare the two.
	CheckAgain bool
}

// Repo is one replica's clone of the inputs. Its writes run one at a time (a replica's
// handlers queue here; replicas race each other through the remote). Safe for concurrent use.
type Repo struct {
	opts   Options
	auth   transport.AuthMethod
	branch plumbing.ReferenceName
	remote plumbing.ReferenceName

	mu     sync.Mutex // one fetch or batch of writes at a time
	repo   *git.Repository
	trees  *trees // the decoded trees of repo's storage
	writes int    // since the last clone
	keys   *keyIndex
	// objMu guards the object storage between a fetch or a write and the snapshots being read.
	objMu sync.RWMutex

	// The writes waiting for the writer (group commit: writer.go).
	qmu     sync.Mutex
	queue   []*pending
	writing bool
	stats   stats
	// The writers of the commits fetched or pushed, and their last commit's time (guarded by
	// objMu).
	writers map[string]time.Time
	// pushTime is how long a push takes (nanoseconds, a moving average), for the pause after a
	// refused one.
	pushTime atomic.Int64
}

// objects is the storage as snapshots and writes use it. Callers hold mu.
func (r *Repo) objects() guarded { return guarded{mu: &r.objMu, s: r.repo.Storer} }

// fetched is the storage and its decoded trees, for reads that do not hold mu (a write may
// reclone meanwhile: it replaces r.repo under objMu).
func (r *Repo) fetched() (*trees, error) {
	r.objMu.RLock()
	repo, trees := r.repo, r.trees
	r.objMu.RUnlock()
	if repo == nil {
		return nil, errors.New("inputsrepo: nothing fetched yet")
	}
	return trees, nil
}

// setRepo replaces the clone (nil: clone afresh on the next fetch). Callers hold mu.
func (r *Repo) setRepo(repo *git.Repository) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	r.repo, r.trees = repo, nil
	if repo != nil {
		r.trees = newTrees(guarded{mu: &r.objMu, s: repo.Storer})
	}
}

// Open checks the options and reads the credentials; it reaches no network (the first Fetch or
// Write clones).
func Open(opts Options) (*Repo, error) {
	if opts.URL == "" {
		return nil, errors.New("the inputs repository URL is empty (--inputs-repo)")
	}
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "file") {
		return nil, fmt.Errorf("the inputs repository URL %s: expected https://, http:// or file://", publish.Redact(opts.URL))
	}
	if u.User != nil {
		return nil, fmt.Errorf("the inputs repository URL %s carries credentials; they would reach logs: put them in a credentials file (--inputs-credentials-file)", publish.Redact(opts.URL))
	}
	opts.Branch = cmp.Or(opts.Branch, DefaultBranch)
	if opts.Committer.Name == "" {
		opts.Committer = object.Signature{Name: "inferplane-api", Email: "inferplane-api@localhost"}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Attempts = cmp.Or(opts.Attempts, 8)
	opts.Backoff = cmp.Or(opts.Backoff, 20*time.Millisecond)
	opts.IdempotencyWindow = cmp.Or(opts.IdempotencyWindow, 24*time.Hour)
	opts.RecloneAfter = cmp.Or(opts.RecloneAfter, 10000)
	opts.MaxBatch = max(cmp.Or(opts.MaxBatch, 64), 1)
	r := &Repo{
		opts:   opts,
		branch: plumbing.NewBranchReferenceName(opts.Branch),
		remote: plumbing.NewRemoteReferenceName(remoteName, opts.Branch),
		keys:   newKeyIndex(),
	}
	if opts.CredentialsFile != "" {
		if r.auth, err = readCredentials(opts.CredentialsFile); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// readCredentials reads "user:password" or a bare token. Its errors never quote the file.
func readCredentials(file string) (transport.AuthMethod, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("inputs repository credentials: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return nil, fmt.Errorf("inputs repository credentials: %s is empty; expected user:password or a token on its first line", file)
	}
	user, password, ok := strings.Cut(line, ":")
	if !ok {
		user, password = "inferplane", line
	}
	return &githttp.BasicAuth{Username: user, Password: password}, nil
}

// clone returns the in-memory repository, creating it on first use. Callers hold mu.
func (r *Repo) clone() (*git.Repository, error) {
	if r.repo != nil {
		return r.repo, nil
	}
	repo, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		return nil, err
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{r.opts.URL}}); err != nil {
		return nil, err
	}
	r.setRepo(repo)
	return repo, nil
}

// fetch brings the branch's remote head into memory and returns it (nil for an empty
// repository). Callers hold mu.
func (r *Repo) fetch(ctx context.Context) (*object.Commit, error) {
	repo, err := r.clone()
	if err != nil {
		return nil, err
	}
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", r.branch, r.remote))
	start := time.Now()
	defer func() { r.opts.Logger.Debug("inputs: fetched", "took", time.Since(start)) }()
	r.objMu.Lock()
	err = repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: remoteName, RefSpecs: []config.RefSpec{spec}, Auth: r.auth, Force: true,
	})
	r.objMu.Unlock()
	var noMatch git.NoMatchingRefSpecError
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, transport.ErrEmptyRemoteRepository), errors.As(err, &noMatch):
		return nil, nil
	default:
		return nil, r.remoteErr(ctx, "fetch", err)
	}
	ref, err := repo.Reference(r.remote, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	head, err := repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, err
	}
	if err := r.keys.update(head, r.opts.Now().Add(-r.opts.IdempotencyWindow), r.noteWriter); err != nil {
		return nil, err
	}
	return head, nil
}

// remoteErr says what failed against which repository, with no credential in it: the URL
// carries none (Open refuses it) and the error is go-git's, which never quotes the password.
// When the context ended, the error also is the context's (go-git keeps only its text).
func (r *Repo) remoteErr(ctx context.Context, op string, err error) error {
	e := fmt.Errorf("%s %s of %s: %v", op, r.opts.Branch, publish.Redact(r.opts.URL), err)
	if cerr := ctx.Err(); cerr != nil {
		return &withCause{err: e, cause: cerr}
	}
	return e
}

// withCause is an error that reads as err and also is cause.
type withCause struct{ err, cause error }

func (e *withCause) Error() string   { return e.err.Error() }
func (e *withCause) Unwrap() []error { return []error{e.err, e.cause} }

// Snapshot is the inputs at one commit.
type Snapshot struct {
	// Commit is the commit's hash ("" for an empty repository).
	Commit string
	// Files reads the commit's files.
	Files *Tree
}

// Head fetches and returns the branch's head.
func (r *Repo) Head(ctx context.Context) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	head, err := r.fetch(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	return r.snapshot(head)
}

func (r *Repo) snapshot(c *object.Commit) (Snapshot, error) {
	if c == nil {
		return Snapshot{Files: newTree(r.trees, plumbing.ZeroHash)}, nil
	}
	if _, err := r.trees.get(c.TreeHash); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Commit: c.Hash.String(), Files: newTree(r.trees, c.TreeHash)}, nil
}

// snapshotAt is the inputs at a commit already in memory. Callers hold mu.
func (r *Repo) snapshotAt(commit string) (Snapshot, error) {
	c, err := object.GetCommit(r.objects(), plumbing.NewHash(commit))
	if err != nil {
		return Snapshot{}, fmt.Errorf("inputs commit %s: %w", commit, err)
	}
	return r.snapshot(c)
}
