#!/usr/bin/env bash
# Fails when a kube-apiserver or etcd the test harness started from the test cache is still
# running after the tests: the harness must stop what it starts. Its servers carry the marker
# inferplane-kubeenv- on their command line (e2e/kubeenv); a developer's own server does not.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
strays=$(pgrep -af "$root/.cache/kubebin/" | grep -- "inferplane-kubeenv-" || true)
if [[ -n "$strays" ]]; then
  echo "stray test processes left running:" >&2
  echo "$strays" >&2
  exit 1
fi
