#!/usr/bin/env bash
# Builds one of the GitOps tools the e2e tests run, once, into a git-ignored cache, the way
# hack/kubebin.sh builds kube-apiserver and etcd:
#
#   argocd          the real Argo CD v3 multi-call binary (hack/gitopstools/argocd), with the
#                   argocd-repo-server and argocd-application-controller names linked to it
#   kustomize       kustomize v5, which Argo CD's repo server runs for kustomize sources
#   kubevirt-check  KubeVirt's own VirtualMachine validation over YAML files
#                   (hack/gitopstools/kubevirtcheck)
#   kube-controller-manager  built like kube-apiserver (hack/gitopstools/kcm pins the same versions):
#                   its garbage collector finishes the foreground deletions Argo CD asks for
#   dex             the real Dex OIDC provider the product API's tests sign in with
#                   (hack/gitopstools/dex; cgo, for its sqlite storage driver)
#
# Each tool lives in its own tools module (never inferplane's module: their k8s.io pins differ
# from ours). Its cache folder is named after a hash of that module's files and the Go version,
# so a pin change rebuilds and anything else reuses.
#
# Usage: hack/gitopsbin.sh TOOL   prints the folder that holds TOOL's binaries.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tool=${1:?usage: hack/gitopsbin.sh argocd|kustomize|kubevirt-check|kube-controller-manager|dex}
case "$tool" in
  argocd) src=gitopstools/argocd ;;
  kustomize) src=gitopstools/kustomize ;;
  kubevirt-check) src=gitopstools/kubevirtcheck ;;
  kube-controller-manager) src=gitopstools/kcm ;;
  dex) src=gitopstools/dex ;;
  *) echo "gitopsbin: unknown tool $tool" >&2; exit 2 ;;
esac
src="$root/hack/$src"
cache="${INFERPLANE_CACHE:-$root/.cache}/$tool"

# Every file of the module (go.mod, go.sum and, for the checker, its source) keys the build.
stamp=$( (cd "$src" && find . -type f | LC_ALL=C sort | xargs cat; go env GOVERSION) | sha256sum | cut -c1-16)
dest="$cache/$stamp"

if [[ -x "$dest/$tool" ]]; then
  touch "$dest" 2>/dev/null || true # marks it used (see the pruning below)
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
# One build at a time per cache: a second caller (another checkout sharing the cache, a
# developer's make beside a test run) waits for the first and then finds its result.
exec 9>"$cache/.lock"
flock 9
if [[ -x "$dest/$tool" ]]; then
  touch "$dest" 2>/dev/null || true # marks it used (see the pruning below)
  echo "$dest"
  exit 0
fi
tmp=$(mktemp -d "$cache/.build.XXXXXX")
# Not `rm -rf "$tmp"` alone: under set -e a failing command in the trap would turn the exit 0
# of a good build into 1.
trap 'rm -rf "$tmp" || true' EXIT

version() { (cd "$src" && go list -m -f '{{.Version}}' "$1"); }
start=$SECONDS
case "$tool" in
  argocd)
    v=$(version github.com/argoproj/argo-cd/v3)
    echo "gitopsbin: building argocd $v (several minutes, once)" >&2
    # Argo CD reports this version to its clients and in its logs.
    (cd "$src" && go build -buildvcs=false -ldflags "-s -w -X github.com/argoproj/argo-cd/v3/common.version=${v#v}" \
      -o "$tmp/argocd" github.com/argoproj/argo-cd/v3/cmd)
    # The multi-call binary picks its component from the name it is invoked by.
    for name in argocd-repo-server argocd-application-controller; do ln -s argocd "$tmp/$name"; done
    # Argo CD's own CRDs at the same tag, for the harness to install beside the binary.
    crds=$(cd "$src" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)/manifests/crds
    mkdir "$tmp/crds" && cp "$crds"/*-crd.yaml "$tmp/crds/"
    ;;
  kustomize)
    echo "gitopsbin: building kustomize $(version sigs.k8s.io/kustomize/kustomize/v5)" >&2
    (cd "$src" && go build -buildvcs=false -ldflags "-s -w" -o "$tmp/kustomize" sigs.k8s.io/kustomize/kustomize/v5)
    ;;
  kubevirt-check)
    echo "gitopsbin: building kubevirt-check on kubevirt.io/kubevirt $(version kubevirt.io/kubevirt)" >&2
    (cd "$src" && go build -buildvcs=false -ldflags "-s -w" -o "$tmp/kubevirt-check" .)
    ;;
  kube-controller-manager)
    v=$(version k8s.io/kubernetes)
    echo "gitopsbin: building kube-controller-manager $v" >&2
    # Stamped like hack/kubebin.sh stamps kube-apiserver, and like it built without -trimpath, so
    # it reuses the packages that build compiled.
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$v"
    ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$v" | cut -d. -f2)"
    (cd "$src" && go build -ldflags "$ldflags" -o "$tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager)
    ;;
  dex)
    v=$(version github.com/dexidp/dex)
    echo "gitopsbin: building dex $v (a few minutes, once)" >&2
    # Dex links its sqlite storage driver through cgo (gcc); `dex version` reports the pin.
    (cd "$src" && CGO_ENABLED=1 go build -buildvcs=false -ldflags "-s -w -X main.version=$v" -o "$tmp/dex" github.com/dexidp/dex/cmd/dex)
    ;;
esac
echo "gitopsbin: built $tool in $((SECONDS - start)) s" >&2

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
