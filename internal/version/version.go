// Package version says which build of inferplane is running: its version, the commit it was
// built from, that commit's time, the Go toolchain, and the image the install manifests run by
// default (the image `make image` builds from the same tree).
//
// `make build` and `make image` stamp the values with the linker:
//
//	go build -ldflags "-X github.com/inferplane/inferplane/internal/version.version=v1.2.3 ..."
//
// A build without those flags (`go run`, `go build`, `go install ...@v1.2.3`) takes them from
// what the Go toolchain records in the binary (runtime/debug.ReadBuildInfo): the module's
// version and the VCS revision, time and modified flag.
//
// A release is a version vMAJOR.MINOR.PATCH[-PRE]. Any other build is a development build,
// named after its commit: dev-<first 12 hex digits>, with -dirty when the tree had uncommitted
// changes, or plain "dev" when no commit is known (a test binary, a build outside git).
// The version is the image's tag: never a tag that moves such as "latest".
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Stamped by the linker (-X); empty when the build set none.
var (
	version    string
	commit     string
	commitDate string
	// modified is "true" when the tree had uncommitted changes.
	modified string
)

// ImageRepository is where inferplane's images are published; a build's image is
// ImageRepository:<version>.
const ImageRepository = "ghcr.io/inferplane/inferplane"

// GuestImageRepository is where the replica VMs' guest disk is published (a KubeVirt
// containerDisk, make guest-image); a build renders VMs that boot GuestImageRepository:<version>.
const GuestImageRepository = "ghcr.io/inferplane/gpu-guest"

// Source is where the project's source lives (the image's org.opencontainers.image.source).
const Source = "https://github.com/inferplane/inferplane"

// Dev is the version of a build that knows neither a release version nor its commit.
const Dev = "dev"

// Info describes a build.
type Info struct {
	Version string `json:"version"`
	// Commit is the full commit hash ("" when unknown); Modified says the tree it was built from
	// had uncommitted changes.
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified"`
	// CommitDate is the commit's time (RFC 3339, UTC). The commit's, not the build's: the same
	// commit builds the same binary and the same image, whenever it is built.
	CommitDate string `json:"commitDate,omitempty"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
	// Image is the image the install manifests default to.
	Image string `json:"image"`
	// GuestImage is the guest disk the rendered VMs boot by default (make guest-image builds it).
	GuestImage string `json:"guestImage"`
	// StampedBy says where the values come from: "ldflags" (make build, make image),
	// "buildinfo" (what the Go toolchain recorded) or "none".
	StampedBy string `json:"stampedBy"`
}

var (
	once sync.Once
	info Info
)

// Get returns this build's Info.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		info = resolve(version, commit, commitDate, modified, bi)
	})
	return info
}

// Version is this build's version, e.g. "v1.2.3" or "dev-0123456789ab".
func Version() string { return Get().Version }

// Image is this build's image, ImageRepository:Version.
func Image() string { return Get().Image }

// GuestImage is this build's guest disk image, GuestImageRepository:Version.
func GuestImage() string { return Get().GuestImage }

// resolve computes a build's Info from the stamped values, else from the build info.
func resolve(ver, rev, date, mod string, bi *debug.BuildInfo) Info {
	in := Info{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, StampedBy: "none"}
	switch {
	case ver != "" || rev != "":
		in.StampedBy = "ldflags"
		in.Commit, in.CommitDate, in.Modified = rev, date, mod == "true"
	case bi != nil:
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		in.Commit, in.CommitDate, in.Modified = settings["vcs.revision"], settings["vcs.time"], settings["vcs.modified"] == "true"
		if IsRelease(bi.Main.Version) {
			ver = bi.Main.Version // go install github.com/inferplane/inferplane/cmd/inferplane@v1.2.3
		}
		if ver != "" || in.Commit != "" {
			in.StampedBy = "buildinfo"
		}
	}
	if bi != nil && bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	in.Version = ver
	if in.Version == "" {
		in.Version = DevVersion(in.Commit, in.Modified)
	}
	in.Image = ImageRepository + ":" + in.Version
	in.GuestImage = GuestImageRepository + ":" + in.Version
	return in
}

// DevVersion names a development build after its commit: dev-<12 hex digits>[-dirty], or
// "dev" when the commit is unknown. hack/version.sh applies the same rule for make.
func DevVersion(commit string, modified bool) string {
	if commit == "" {
		return Dev
	}
	v := Dev + "-" + commit[:min(12, len(commit))]
	if modified {
		v += "-dirty"
	}
	return v
}

var (
	release = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
	// pseudo is the tail of a Go pseudo-version (v0.0.0-20260101120000-0123456789ab), which
	// names a commit, not a release.
	pseudo = regexp.MustCompile(`[-.][0-9]{14}-[0-9a-f]{12}$`)
	tag    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// IsRelease reports whether v is a release version: vMAJOR.MINOR.PATCH with an optional
// pre-release, no build metadata (Go's "+dirty"), not a Go pseudo-version.
func IsRelease(v string) bool { return release.MatchString(v) && !pseudo.MatchString(v) }

// CheckTag says why v cannot be an image tag (the OCI distribution spec's tag grammar), or nil.
func CheckTag(v string) error {
	if !tag.MatchString(v) {
		return fmt.Errorf("version %q is not a valid image tag: want letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'", v)
	}
	if strings.EqualFold(v, "latest") {
		return fmt.Errorf("version %q: a tag that moves is never an inferplane build's tag", v)
	}
	return nil
}
