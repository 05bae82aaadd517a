#!/usr/bin/env bash
# Builds every binary the e2e tests run (hack/kubebin.sh: kube-apiserver, etcd;
# hack/gitopsbin.sh: argocd, kustomize, kubevirt-check, kube-controller-manager, dex), each once into
# its own cache folder, and prints the environment that points the tests at them, one
# NAME=folder per line (`make test` passes it to go test).
#
# Usage: hack/testbins.sh [COMMAND...]
# COMMAND (e.g. `go vet ./...`) runs once kube-apiserver is built, beside the builds still
# running; its output goes to stderr and its failure fails the script.
#
# Cold, on two cores the CPU is what limits, so what matters is compiling nothing twice. Go's
# build cache shares a compiled package only once it is written: two builds that need the same
# package at the same time both compile it. kube-apiserver, kube-controller-manager and
# inferplane's own module pin the same k8s.io versions, so kube-apiserver is built first and the
# other two (COMMAND, e.g. vet, compiles inferplane's module) after it, side by side, finding
# most of their packages compiled; Argo CD (k8s.io v0.34), KubeVirt's checker
# (v0.33), kustomize and Dex share next to nothing with them or each other, so they run alongside,
# when the machine has the memory for it (a link of kube-apiserver, kube-controller-manager or
# argocd peaks around 2 GB). Warm, every build is a cache hit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=(argocd kustomize kubevirt-check kube-controller-manager dex)
out=$(mktemp -d)
# `|| true`: under set -e a failing command in the trap would turn the script's exit 0 into 1.
trap 'rm -rf "$out" || true' EXIT

# INFERPLANE_BUILD_PARALLEL=0|1 overrides the choice the memory makes (the tests take both ways).
avail_gb=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 1024 / 1024 ))
parallel=${INFERPLANE_BUILD_PARALLEL:-$(( avail_gb >= 8 ))}

kube_chain() { # kube-apiserver first, then kube-controller-manager beside COMMAND
  "$root/hack/kubebin.sh" > "$out/kubebin" || return 1
  "$root/hack/gitopsbin.sh" kube-controller-manager > "$out/kube-controller-manager" &
  local kcm=$! cmd=0
  if (( $# > 0 )); then "$@" >&2 || cmd=1; fi
  wait "$kcm" && (( cmd == 0 ))
}

status=0
pids=()
run() { # runs a build, in the background when building in parallel
  if (( parallel )); then
    "$@" &
    pids+=($!)
  else
    "$@" || status=1
  fi
}
run kube_chain "$@"
for t in argocd kustomize kubevirt-check dex; do
  run sh -c '"$1" "$2" > "$3"' _ "$root/hack/gitopsbin.sh" "$t" "$out/$t"
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
(( status == 0 )) || { echo "testbins: a build or the command failed (see above)" >&2; exit 1; }

echo "INFERPLANE_KUBEBIN=$(cat "$out/kubebin")"
for t in "${tools[@]}"; do
  var=$(echo "INFERPLANE_$t" | tr 'a-z-' 'A-Z_')
  echo "$var=$(cat "$out/$t")"
done
