package inputsrepo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/inferplane/inferplane/e2e/gitserver"
)

// fleetRemote serves an inputs repository of tenants x jobs over smart HTTP, built with the
// git CLI in one commit, and returns a replica's options.
func fleetRemote(b *testing.B, tenants, jobs int) Options {
	work := b.TempDir()
	for i := range tenants {
		dir := filepath.Join(work, "tenants", fmt.Sprintf("t%04d", i))
		if err := os.MkdirAll(filepath.Join(dir, "jobs"), 0o755); err != nil {
			b.Fatal(err)
		}
		must(b, os.WriteFile(filepath.Join(dir, "tenant.yaml"), []byte("kind: Tenant\nname: t"+strconv.Itoa(i)+"\n"), 0o644))
		for j := range jobs {
			must(b, os.WriteFile(filepath.Join(dir, "jobs", fmt.Sprintf("j%02d.yaml", j)),
				fmt.Appendf(nil, "kind: ManagedInferenceJob\nname: j%02d\nreplicas: 1\n", j), 0o644))
		}
	}
	srv := gitserver.Start(b, token)
	gitserver.Git(b, "", "init", "-q", "--bare", "-b", "main", srv.Dir("inputs"))
	gitserver.Git(b, work, "init", "-q", "-b", "main")
	gitserver.Git(b, work, "add", "-A")
	gitserver.Git(b, work, "commit", "-q", "-m", "fleet")
	gitserver.Git(b, work, "push", "-q", srv.Dir("inputs"), "main")
	creds := filepath.Join(b.TempDir(), "credentials")
	must(b, os.WriteFile(creds, []byte(token), 0o600))
	return Options{URL: srv.RepoURL("inputs"), CredentialsFile: creds}
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWrite is one job created (fetch, apply, commit, push over smart HTTP) in inputs of
// 200 and 2,000 tenants x 10 jobs: the push sends the objects the write made. Beside it,
// the same write pushed with go-git's Push, which works out what to send by walking what the
// remote's head reaches: the baseline a user of go-git would reach for.
func BenchmarkWrite(b *testing.B) {
	for _, tenants := range []int{200, 2000} {
		o := fleetRemote(b, tenants, 10)
		b.Run(fmt.Sprintf("tenants=%d/inputsrepo", tenants), func(b *testing.B) {
			r, err := Open(o)
			must(b, err)
			_, err = r.Head(context.Background()) // the clone is not what is measured
			must(b, err)
			n := 0
			for b.Loop() {
				n++
				_, err := r.Write(context.Background(), Change{Author: dana, Message: "create",
					Apply: addJob("t0042", fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), n))})
				must(b, err)
			}
		})
		b.Run(fmt.Sprintf("tenants=%d/go-git-Push", tenants), func(b *testing.B) {
			r, err := Open(o)
			must(b, err)
			_, err = r.Head(context.Background())
			must(b, err)
			n := 0
			for b.Loop() {
				n++
				must(b, goGitPushWrite(r, fmt.Sprintf("gogit-%d-%d", time.Now().UnixNano(), n)))
			}
		})
	}
}

// goGitPushWrite is a write whose commit is pushed by go-git's Repository.Push.
func goGitPushWrite(r *Repo, job string) error {
	ctx := context.Background()
	head, err := r.fetch(ctx)
	if err != nil {
		return err
	}
	snap, err := r.snapshot(head)
	if err != nil {
		return err
	}
	if err := addJob("t0042", job)(snap.Files); err != nil {
		return err
	}
	tree, _, err := snap.Files.write()
	if err != nil {
		return err
	}
	commit, err := r.commit(Change{Author: dana, Message: "create"}, "", head.Hash, tree)
	if err != nil {
		return err
	}
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.branch, commit)); err != nil {
		return err
	}
	spec := config.RefSpec(fmt.Sprintf("%s:%s", r.branch, r.branch))
	return r.repo.PushContext(ctx, &git.PushOptions{RemoteName: remoteName, RefSpecs: []config.RefSpec{spec}, Auth: r.auth})
}
