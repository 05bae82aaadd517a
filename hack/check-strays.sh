#!/usr/bin/env bash
# Fails when a kube-apiserver or etcd started from the test cache is still running after the
# tests: the harness must stop what it starts.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
strays=$(pgrep -af "$root/.cache/kubebin/" || true)
if [[ -n "$strays" ]]; then
  echo "stray test processes left running:" >&2
  echo "$strays" >&2
  exit 1
fi
