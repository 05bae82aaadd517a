#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the e2e tests run, once, into a git-ignored cache.
#
# No container engine or binary download is available on our machines, so both are compiled
# from the Go module proxy: kube-apiserver from k8s.io/kubernetes (hack/kubetools/apiserver,
# whose go.mod maps each staging module to its published v0 version) and etcd from
# go.etcd.io/etcd/server/v3 (hack/kubetools/etcd). The cache folder is named after a hash of
# both tool modules and the Go version, so a pin change rebuilds and anything else reuses.
#
# Prints the folder that holds the binaries (envtest's BinaryAssetsDirectory).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/kubetools"
cache="${INFERPLANE_CACHE:-$root/.cache}/kubebin"

stamp=$( (cat "$tools"/apiserver/go.mod "$tools"/apiserver/go.sum "$tools"/etcd/go.mod "$tools"/etcd/go.sum; go env GOVERSION) | sha256sum | cut -c1-16)
dest="$cache/$stamp"

if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
  touch "$dest" 2>/dev/null || true # marks it used (see the pruning below)
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
# One build at a time per cache: a second caller (another checkout sharing the cache, a
# developer's make beside a test run) waits for the first and then finds its result.
exec 9>"$cache/.lock"
flock 9
if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
  touch "$dest" 2>/dev/null || true # marks it used (see the pruning below)
  echo "$dest"
  exit 0
fi
tmp=$(mktemp -d "$cache/.build.XXXXXX")
# Not `rm -rf "$tmp"` alone: under set -e a failing command in the trap would turn the exit 0
# of a good build into 1.
trap 'rm -rf "$tmp" || true' EXIT

k8s_version=$(cd "$tools/apiserver" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$k8s_version" | cut -d. -f2)
# Clients (controller-runtime, kubectl) parse the server's version, so stamp the real one in.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"

echo "kubebin: building kube-apiserver $k8s_version (several minutes, once)" >&2
(cd "$tools/apiserver" && go build -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
echo "kubebin: building etcd $(cd "$tools/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)" >&2
(cd "$tools/etcd" && go build -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)

# No -trimpath: the compiled k8s.io and golang.org/x packages then share Go's build cache with
# the main module's own build (hack/kubetools/apiserver pins the same versions of the modules
# both build), which saves minutes on a cold `make test`.

# Publish atomically so an interrupted build never leaves a half-filled folder that looks done.
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
# Older builds are only disk, but another checkout sharing the cache may have other pins and
# be running its tests from its build: remove the builds no run has used for 3 days, and the
# folders of builds killed before they finished (we hold the lock: none is running).
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$stamp" \( -name '.build.*' -o -mtime +3 \) -exec rm -rf {} + ||
  echo "${0##*/}: could not remove older builds in $cache" >&2
echo "$dest"
