// Package setupscripts tests the set-up scripts under hack/ that `make test` runs before any Go
// test, on the states a machine can be in when they run: what they install absent or present,
// policy-rc.d absent, present or odd, a fresh image without package lists, an install an
// earlier run left half-done or was killed in, a failing apt-get or go build, a second run and
// two runs at once. Each runs the real script against stand-ins of what would change this
// machine (apt-get, dpkg, id, go) put first on a PATH that holds nothing else of the machine's
// but the basic tools the scripts use, so no test installs, builds or starts anything real.
//
// It also runs shellcheck (Debian's package, installed by hack/debpkg.sh when missing) on every
// shell script the project ships, and holds every EXIT trap of a set -e script to one that
// cannot fail: the fault that made the first `make test` on a new machine exit 1.
package setupscripts
