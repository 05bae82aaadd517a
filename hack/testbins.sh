#!/usr/bin/env bash
# Builds every binary the e2e tests run (hack/kubebin.sh: kube-apiserver, etcd;
# hack/gitopsbin.sh: argocd, kustomize, kubevirt-check, kube-controller-manager), each once into
# its own cache folder, and prints the environment that points the tests at them, one
# NAME=folder per line (`make test` passes it to go test).
#
# Cold, the builds run side by side when the machine has the memory for it (each link of
# kube-apiserver, kube-controller-manager or argocd peaks around 2 GB): their downloads and
# single-threaded links then overlap the others' compiles. Warm, every build is a cache hit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=(argocd kustomize kubevirt-check kube-controller-manager)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

avail_gb=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 1024 / 1024 ))
parallel=$(( avail_gb >= 8 ))

status=0
pids=()
run() { # name command...: runs a build, in the background when building in parallel
  local name=$1; shift
  if (( parallel )); then
    "$@" > "$out/$name" &
    pids+=($!)
  else
    "$@" > "$out/$name" || status=1
  fi
}
run kubebin "$root/hack/kubebin.sh"
for t in "${tools[@]}"; do run "$t" "$root/hack/gitopsbin.sh" "$t"; done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
(( status == 0 )) || { echo "testbins: a build failed (see above)" >&2; exit 1; }

echo "INFERPLANE_KUBEBIN=$(cat "$out/kubebin")"
for t in "${tools[@]}"; do
  var=$(echo "INFERPLANE_$t" | tr 'a-z-' 'A-Z_')
  echo "$var=$(cat "$out/$t")"
done
