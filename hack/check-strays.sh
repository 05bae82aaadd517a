#!/usr/bin/env bash
# Fails when a process the tests started is still running after them: the harness must stop
# what it starts. Two ways to recognise one: a binary from the test caches (kube-apiserver,
# etcd, argocd-repo-server, argocd-application-controller, kube-controller-manager) with the
# kubeenv marker on its command line, or the INFERPLANE_E2E_OWNER mark the Argo CD harness puts
# in the environment of everything it starts (the git and kustomize runs of the repo server
# inherit it). Redis runs inside the test process
# (miniredis), so no redis process exists to outlive it.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${INFERPLANE_CACHE:-$root/.cache}"
# A server from the caches counts only with the harness's marker on its command line (e2e/kubeenv
# puts inferplane-kubeenv- there): a developer's own kube-apiserver from the cache is left alone.
strays=$(pgrep -af "$cache/(kubebin|argocd|kube-controller-manager)/" | grep -- "inferplane-kubeenv-" || true)
for env in /proc/[0-9]*/environ; do
  pid=${env#/proc/}
  pid=${pid%/environ}
  if [[ $pid != "$$" ]] && grep -qaz '^INFERPLANE_E2E_OWNER=' "$env" 2>/dev/null; then
    strays+=$'\n'"$(ps -o pid=,args= -p "$pid" 2>/dev/null)"
  fi
done
strays=$(echo "$strays" | sed '/^[[:space:]]*$/d' | sort -u)
if [[ -n "$strays" ]]; then
  echo "stray test processes left running:" >&2
  echo "$strays" >&2
  exit 1
fi
