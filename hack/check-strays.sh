#!/usr/bin/env bash
# Fails when a process the tests started is still running after them: the harness must stop
# what it starts. Two ways to recognise one: a binary from the test caches (kube-apiserver,
# etcd, argocd-repo-server, argocd-application-controller, kube-controller-manager) with the
# kubeenv marker on its command line, or the INFERPLANE_E2E_OWNER mark e2e/proc puts in the
# environment of everything the Argo CD and Dex harnesses start (the git and kustomize runs of
# the repo server inherit it), as e2e/redistest does for the redis-server processes of the
# limits tests. The Argo CD harness's Redis runs inside the test process (miniredis).
#
# A process whose test binary is still running (its parent, or the owner its mark names) belongs
# to a test run in progress, e.g. another checkout's sharing the cache, or to a make demo
# running: it is not a stray.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${INFERPLANE_CACHE:-$root/.cache}"

# is_test_binary PID: the process runs a Go test binary.
is_test_binary() {
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [[ ${exe% (deleted)} == *.test ]]
}

# start_time PID: when the process started, in clock ticks since boot (field 22 of
# /proc/PID/stat, counted after the command name, which may hold spaces).
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  echo "${20}"
}

# owner_runs OWNER PID: OWNER runs and started no later than PID, so it is PID's owner and not a
# later process given its pid. Owners are test binaries, or make demo (its Dex carries the mark).
owner_runs() {
  local o c
  o=$(start_time "$1") && c=$(start_time "$2") || return 1
  (( o <= c ))
}

strays=""
# A server from the caches counts only with the harness's marker on its command line (e2e/kubeenv
# puts inferplane-kubeenv- there): a developer's own kube-apiserver from the cache is left alone.
for pid in $(pgrep -f "$cache/(kubebin|argocd|kube-controller-manager)/.*inferplane-kubeenv-"); do
  ppid=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ') || continue
  is_test_binary "$ppid" && continue
  strays+=$'\n'"$(ps -o pid=,args= -p "$pid" 2>/dev/null)"
done
for env in /proc/[0-9]*/environ; do
  pid=${env#/proc/}
  pid=${pid%/environ}
  [[ $pid == "$$" ]] && continue
  owner=$(tr '\0' '\n' 2>/dev/null < "$env" | sed -n 's/^INFERPLANE_E2E_OWNER=//p') 2>/dev/null || continue
  [[ -z $owner ]] && continue
  owner_runs "$owner" "$pid" && continue
  strays+=$'\n'"$(ps -o pid=,args= -p "$pid" 2>/dev/null)"
done
strays=$(echo "$strays" | sed '/^[[:space:]]*$/d' | sort -u)
if [[ -n "$strays" ]]; then
  echo "stray test processes left running:" >&2
  echo "$strays" >&2
  exit 1
fi
