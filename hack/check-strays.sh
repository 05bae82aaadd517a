#!/usr/bin/env bash
# Fails when a process the tests started is still running after them: the harness must stop
# what it starts. Two ways to recognise one: a binary from the test caches (kube-apiserver,
# etcd, argocd-repo-server, argocd-application-controller, kube-controller-manager) with the
# kubeenv marker on its command line, or the INFERPLANE_E2E_OWNER mark e2e/proc puts in the
# environment of everything the Argo CD and Dex harnesses start (the git and kustomize runs of
# the repo server inherit it), as e2e/redistest does for the redis-server processes of the
# limits tests and e2e/readmetest for README's blocks (a walkthrough's make demo and the
# servers it starts). The Argo CD harness's Redis runs inside the test process (miniredis).
#
# A process whose test binary is still running (its parent, or the owner its mark names) belongs
# to a test run in progress, e.g. another checkout's sharing the cache, or to a make demo
# running: it is not a stray.
#
# It reads /proc alone (no pgrep or ps: a bare Debian image has no procps, and a check whose
# tools are missing would find nothing and pass). Not set -e: processes end while it reads them,
# and each read that fails for that skips the process.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${INFERPLANE_CACHE:-$root/.cache}"

# stat_field PID N: field N of /proc/PID/stat, counted from the state (field 3), after the
# command name, which may hold spaces: 2 is the parent's pid, 20 the start time in clock ticks
# since boot.
stat_field() {
  local stat n=$2
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  [[ $n -le $# ]] || return 1
  echo "${!n}"
}

# cmdline PID: the process's command line, its arguments joined by spaces.
cmdline() {
  local args
  args=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  echo "${args% }"
}

# is_test_binary PID: the process runs a Go test binary.
is_test_binary() {
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [[ ${exe% (deleted)} == *.test ]]
}

# owner_runs OWNER PID: OWNER runs and started no later than PID, so it is PID's owner and not a
# later process given its pid. Owners are test binaries, or make demo (its Dex carries the mark).
owner_runs() {
  local o c
  o=$(stat_field "$1" 20) && c=$(stat_field "$2" 20) || return 1
  (( o <= c ))
}

strays=""
for dir in /proc/[0-9]*; do
  pid=${dir#/proc/}
  [[ $pid == "$$" ]] && continue
  args=$(cmdline "$pid") || continue
  # A server from the caches counts only with the harness's marker on its command line
  # (e2e/kubeenv puts inferplane-kubeenv- there): a developer's own kube-apiserver from the
  # cache is left alone.
  case "$args" in
    *"$cache"/kubebin/*inferplane-kubeenv-* | *"$cache"/argocd/*inferplane-kubeenv-* | \
      *"$cache"/kube-controller-manager/*inferplane-kubeenv-*)
      ppid=$(stat_field "$pid" 2) || continue
      is_test_binary "$ppid" || strays+=$'\n'"$pid $args"
      ;;
  esac
  owner=$(tr '\0' '\n' 2>/dev/null <"$dir/environ" | sed -n 's/^INFERPLANE_E2E_OWNER=//p')
  [[ -z $owner ]] && continue
  owner_runs "$owner" "$pid" && continue
  [[ -d $dir ]] && strays+=$'\n'"$pid $args"
done
strays=$(echo "$strays" | sed '/^[[:space:]]*$/d' | sort -u)
if [[ -n "$strays" ]]; then
  echo "stray test processes left running:" >&2
  echo "$strays" >&2
  exit 1
fi
