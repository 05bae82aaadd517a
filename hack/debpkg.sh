#!/usr/bin/env bash
# Prints the path of BINARY (on PATH, or in /usr/sbin or /sbin, which a non-login PATH may
# lack); when there is none, installs Debian's PACKAGEs with apt-get first. The one way the test set-up installs a Debian package (hack/redis.sh, hack/chromium.sh
# and make test's shellcheck call it): another package is one more call.
#
# Usage: hack/debpkg.sh BINARY PACKAGE...     e.g. hack/debpkg.sh shellcheck shellcheck
#
# The install
#   - runs as root only (the charter's bare machine); anyone else is told what to run;
#   - runs once, under one lock for every install on the machine (dpkg installs one thing at a
#     time, and policy-rc.d is one file): a second caller waits, then finds the first one's
#     binary;
#   - starts none of the packages' own services (redis-server's on port 6379, say): their
#     post-install scripts ask policy-rc.d, and for the install ours stands there and says no
#     (exit 101). What was there before (a file, a link, or nothing) is renamed aside and put
#     back as it was when this script exits by any path; a run killed before that is put right
#     by the next one that installs;
#   - when apt-get install fails, finishes what an earlier install left half-done (dpkg
#     --configure -a), updates the package lists (a fresh image has none; stale ones name files
#     the mirror no longer has) and tries once more: lists already there cost no update.
#
# Overridable for the tests (e2e/setupscripts), which run this against stand-ins of apt-get,
# dpkg and id put first on PATH:
#   INFERPLANE_POLICY_RC_D   the policy file (/usr/sbin/policy-rc.d)
#   INFERPLANE_DEBPKG_LOCK   the lock file (/tmp/inferplane-debpkg.lock)
set -euo pipefail

me=hack/debpkg.sh
if (( $# < 2 )); then
  echo "usage: $me BINARY PACKAGE..." >&2
  exit 2
fi
bin=$1
shift
pkgs=("$@")

find_bin() { PATH=$PATH:/usr/sbin:/sbin type -P "$bin"; }

if path=$(find_bin); then
  echo "$path"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "$me: $bin is not installed and this is not root: as root, run apt-get install ${pkgs[*]}" >&2
  exit 1
fi

lock=${INFERPLANE_DEBPKG_LOCK:-/tmp/inferplane-debpkg.lock}
exec 9>>"$lock"
if ! flock -n 9; then
  echo "$me: another install is running (lock $lock): waiting for it" >&2
  flock 9
fi
if path=$(find_bin); then
  echo "$path"
  exit 0
fi

policy=${INFERPLANE_POLICY_RC_D:-/usr/sbin/policy-rc.d}
saved=$policy.inferplane-saved
ours='#!/bin/sh
# Written by inferplane (hack/debpkg.sh) for an install, so that no service starts; it puts
# back what was here when the install ends.
exit 101'
staged=""

# put_back_policy leaves policy-rc.d as it was before any install of ours: the original renamed
# back over ours, or ours removed when there was none. Safe to run at any point: when ours is not
# there it does nothing, which is also how a killed run's leftovers are recognised.
put_back_policy() {
  if [[ -e $saved || -L $saved ]]; then
    mv -f "$saved" "$policy"
  elif [[ -f $policy && ! -L $policy && $(<"$policy") == "$ours" ]]; then
    rm -f "$policy"
  fi
}

# The exit trap must not change how the script ends: whatever fails in it is reported and the
# script's own status stands (under set -e, a trap whose last command fails makes it exit 1).
on_exit() {
  put_back_policy || echo "$me: could not put $policy back as it was (the next install puts it right)" >&2
  if [[ -n $staged ]]; then rm -f "$staged" || true; fi
  return 0
}
trap on_exit EXIT

put_back_policy
# Ours is written beside it and renamed into place, so the file is never half-written.
staged=$(mktemp "$policy.XXXXXX")
printf '%s\n' "$ours" >"$staged"
chmod 0755 "$staged"
if [[ -e $policy || -L $policy ]]; then
  mv "$policy" "$saved"
fi
mv "$staged" "$policy"
staged=""

export DEBIAN_FRONTEND=noninteractive
apt_install() { apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${pkgs[@]}" >&2; }
echo "$me: installing Debian's ${pkgs[*]} for $bin (apt-get)" >&2
if ! apt_install; then
  echo "$me: finishing what an earlier install left half-done (dpkg --configure -a), updating the package lists (apt-get update), and trying again" >&2
  dpkg --configure -a >&2 || echo "$me: dpkg --configure -a failed (above); trying anyway" >&2
  if ! { apt-get update -q >&2 && apt_install; }; then
    echo "$me: apt-get install ${pkgs[*]} failed (its output is above)" >&2
    exit 1
  fi
fi
if ! path=$(find_bin); then
  echo "$me: $bin is still not found after installing ${pkgs[*]}" >&2
  exit 1
fi
echo "$path"
