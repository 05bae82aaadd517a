package version

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResolve(t *testing.T) {
	vcs := func(mainVersion, rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/inferplane/inferplane", Version: mainVersion}}
		if rev != "" {
			bi.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-01T04:46:06Z"},
				{Key: "vcs.modified", Value: modified}}
		}
		return bi
	}
	const rev = "b7c82618ae2c4786d191bc5e801cb70006adde3a"
	for _, tc := range []struct {
		name                    string
		ver, commit, date, mod  string
		bi                      *debug.BuildInfo
		version, stamped, image string
		modified                bool
	}{
		{name: "make build at a release tag", ver: "v1.2.3", commit: rev, date: "2026-12-01T04:46:06Z", mod: "false", bi: vcs("(devel)", rev, "false"),
			version: "v1.2.3", stamped: "ldflags", image: "ghcr.io/inferplane/inferplane:v1.2.3"},
		{name: "make build of a dirty tree", ver: "dev-b7c82618ae2c-dirty", commit: rev, mod: "true", bi: vcs("", "", ""),
			version: "dev-b7c82618ae2c-dirty", stamped: "ldflags", image: "ghcr.io/inferplane/inferplane:dev-b7c82618ae2c-dirty", modified: true},
		{name: "go build in a clean checkout (Go's pseudo-version is a commit, not a release)", bi: vcs("v0.0.0-20261201044606-b7c82618ae2c", rev, "false"),
			version: "dev-b7c82618ae2c", stamped: "buildinfo", image: "ghcr.io/inferplane/inferplane:dev-b7c82618ae2c"},
		{name: "go run with uncommitted changes", bi: vcs("v0.0.0-20261201044606-b7c82618ae2c+dirty", rev, "true"),
			version: "dev-b7c82618ae2c-dirty", stamped: "buildinfo", image: "ghcr.io/inferplane/inferplane:dev-b7c82618ae2c-dirty", modified: true},
		{name: "go build at a tag with changes is not the release", bi: vcs("v1.2.3+dirty", rev, "true"),
			version: "dev-b7c82618ae2c-dirty", stamped: "buildinfo", image: "ghcr.io/inferplane/inferplane:dev-b7c82618ae2c-dirty", modified: true},
		{name: "go install ...@v1.2.3 (no VCS data)", bi: vcs("v1.2.3", "", ""),
			version: "v1.2.3", stamped: "buildinfo", image: "ghcr.io/inferplane/inferplane:v1.2.3"},
		{name: "after a tag (Go's pseudo-version after v1.2.3)", bi: vcs("v1.2.4-0.20261201044606-b7c82618ae2c", rev, "false"),
			version: "dev-b7c82618ae2c", stamped: "buildinfo", image: "ghcr.io/inferplane/inferplane:dev-b7c82618ae2c"},
		{name: "a test binary: nothing known", bi: vcs("", "", ""),
			version: "dev", stamped: "none", image: "ghcr.io/inferplane/inferplane:dev"},
		{name: "no build info at all", version: "dev", stamped: "none", image: "ghcr.io/inferplane/inferplane:dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := resolve(tc.ver, tc.commit, tc.date, tc.mod, tc.bi)
			assert.Equal(t, tc.version, in.Version)
			assert.Equal(t, tc.stamped, in.StampedBy)
			assert.Equal(t, tc.image, in.Image)
			assert.Equal(t, GuestImageRepository+":"+tc.version, in.GuestImage, "the guest disk of the same build")
			assert.Equal(t, tc.modified, in.Modified)
			assert.NotContains(t, in.Image, ":latest")
			assert.NoError(t, CheckTag(in.Version))
		})
	}
}

func TestIsRelease(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.2.3": true, "v0.1.0-rc.1": true, "v10.0.0": true,
		"1.2.3": false, "v1.2": false, "v1.2.3+dirty": false, "(devel)": false, "": false, "dev-b7c82618ae2c": false,
		"v0.0.0-20261201044606-b7c82618ae2c": false, "v1.2.4-0.20261201044606-b7c82618ae2c": false,
	} {
		assert.Equal(t, want, IsRelease(v), v)
	}
}

func TestCheckTag(t *testing.T) {
	for _, bad := range []string{"", "latest", "has space", "-dash", ".dot", "a/b", string(make([]byte, 129))} {
		assert.Error(t, CheckTag(bad), "%q", bad)
	}
}
