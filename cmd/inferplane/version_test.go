package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/internal/version"
)

func TestVersionCommand(t *testing.T) {
	ctx := context.Background()
	out, _, err := execCLI(ctx, "version", "-o", "json")
	require.NoError(t, err)
	var got version.Info
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, version.Get(), got)
	assert.Equal(t, version.ImageRepository+":"+got.Version, got.Image)
	assert.Equal(t, version.GuestImageRepository+":"+got.Version, got.GuestImage)

	out, _, err = execCLI(ctx, "version")
	require.NoError(t, err)
	for _, line := range []string{"Version:     " + got.Version, "Image:       " + got.Image, "Guest image: " + got.GuestImage, "Go:          " + got.GoVersion + " " + got.Platform} {
		assert.Contains(t, out, line+"\n")
	}
	_, _, err = execCLI(ctx, "version", "-o", "xml")
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, err.Error(), `-o "xml": expected table, json or yaml`)
}

// TestVersionStamped builds the binary the two ways a user does, `make build` (stamped by
// -ldflags from hack/version.sh) and a plain `go build` (Go's own VCS data), and checks that
// both say the version, commit and image of this checkout; then `make build VERSION=...`
// stamps a release version. The go build passes -buildvcs=true, Go's default where GOFLAGS
// does not turn it off (as it does on our machines); Go finds the commit only where .git is a
// folder, not in a git worktree, whose binary says "dev".
func TestVersionStamped(t *testing.T) {
	root := kubeenv.RepoRoot()
	commit, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("SKIPPED: %s is not a git checkout (%v): the build has no commit to stamp", root, err)
	}
	rev := strings.TrimSpace(string(commit))
	dir := t.TempDir()
	build := func(name string, argv func(bin string) []string) version.Info {
		t.Helper()
		bin := filepath.Join(dir, name)
		args := argv(bin)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", strings.Join(cmd.Args, " "), out)
		out, err = exec.Command(bin, "version", "-o", "json").Output()
		require.NoError(t, err)
		var in version.Info
		require.NoError(t, json.Unmarshal(out, &in), "%s", out)
		return in
	}
	// The tree's state is read after the builds: a file changed meanwhile (this test writes
	// none into the checkout) would show as a difference below.
	made := build("made", func(bin string) []string { return []string{"make", "--no-print-directory", "build", "BIN=" + bin} })
	plain := build("plain", func(bin string) []string {
		return []string{"go", "build", "-buildvcs=true", "-o", bin, "./cmd/inferplane"}
	})
	status, err := exec.Command("git", "-C", root, "status", "--porcelain").Output()
	require.NoError(t, err)
	want := version.DevVersion(rev, len(status) > 0)
	if tag, err := exec.Command("git", "-C", root, "describe", "--tags", "--exact-match", "--match", "v[0-9]*").Output(); err == nil &&
		len(status) == 0 && version.IsRelease(strings.TrimSpace(string(tag))) {
		want = strings.TrimSpace(string(tag))
	}
	builds := []struct {
		name    string
		info    version.Info
		stamped string
	}{{"make build", made, "ldflags"}}
	if st, err := os.Stat(filepath.Join(root, ".git")); err == nil && st.IsDir() {
		builds = append(builds, struct {
			name    string
			info    version.Info
			stamped string
		}{"go build", plain, "buildinfo"})
		assert.Equal(t, made.CommitDate, plain.CommitDate, "hack/version.sh and Go write the commit's time alike")
	} else {
		t.Logf("%s/.git is not a folder (a git worktree): Go records no commit, the plain build says %q", root, plain.Version)
		assert.Equal(t, version.Info{Version: "dev", StampedBy: "none", Image: version.ImageRepository + ":dev",
			GuestImage: version.GuestImageRepository + ":dev", GoVersion: plain.GoVersion, Platform: plain.Platform}, plain)
	}
	for _, in := range builds {
		assert.Equal(t, want, in.info.Version, in.name)
		assert.Equal(t, rev, in.info.Commit, in.name)
		assert.Equal(t, len(status) > 0, in.info.Modified, in.name)
		assert.NotEmpty(t, in.info.CommitDate, in.name)
		assert.Equal(t, version.ImageRepository+":"+want, in.info.Image, in.name)
		assert.Equal(t, in.stamped, in.info.StampedBy, in.name)
	}

	release := build("release", func(bin string) []string {
		return []string{"make", "--no-print-directory", "build", "VERSION=v1.2.3-rc.1", "BIN=" + bin}
	})
	assert.Equal(t, "v1.2.3-rc.1", release.Version)
	assert.Equal(t, "ghcr.io/inferplane/inferplane:v1.2.3-rc.1", release.Image)
	assert.Equal(t, rev, release.Commit)
}
