#!/usr/bin/env bash
# Installs, when missing, the Debian packages that check and boot the replica VMs' guest
# (docs/guest.md), and prints the path of each command, one per line.
#
# Usage: hack/guesttools.sh check|vm|image...
#   check  what checks the rendered cloud-init as text: cloud-init (its `schema` check and its
#          network renderers), netplan (what the guest renders network-data with), shellcheck,
#          systemd-analyze
#   vm     what boots a guest: qemu-system-x86_64, qemu-img, genisoimage (the NoCloud disk)
#   image  what builds the guest image: debootstrap, mke2fs (e2fsprogs), sfdisk (fdisk), qemu-img
#
# Packages come from Debian's archive with apt-get only (the test set-up runs as root; see the
# charter), once: a second caller waits on the lock and finds the first one's result. None of
# their services is started (policy-rc.d), and cloud-init, installed for its checker only, is
# disabled on this machine (/etc/cloud/cloud-init.disabled) so that it never configures the
# host at a later boot.
set -euo pipefail

declare -A pkg_of=(
  [cloud-init]=cloud-init [netplan]=netplan.io [shellcheck]=shellcheck [systemd-analyze]=systemd
  [qemu-system-x86_64]=qemu-system-x86 [qemu-img]=qemu-utils [genisoimage]=genisoimage
  [debootstrap]=debootstrap [mke2fs]=e2fsprogs [sfdisk]=fdisk
)
declare -A cmds_of=(
  [check]="cloud-init netplan shellcheck systemd-analyze"
  [vm]="qemu-system-x86_64 qemu-img genisoimage"
  [image]="debootstrap mke2fs sfdisk qemu-img"
)

(( $# > 0 )) || { echo "usage: hack/guesttools.sh check|vm|image..." >&2; exit 2; }
want=()
for group in "$@"; do
  [[ -n ${cmds_of[$group]:-} ]] || { echo "guesttools.sh: unknown group $group (check, vm, image)" >&2; exit 2; }
  for c in ${cmds_of[$group]}; do want+=("$c"); done
done

# find prints the path of command $1 (also in the sbin folders a non-login PATH may lack).
find_cmd() {
  PATH=$PATH:/usr/sbin:/sbin command -v "$1" 2>/dev/null
}

missing() {
  local c
  for c in "${want[@]}"; do
    find_cmd "$c" >/dev/null || echo "${pkg_of[$c]}"
  done | sort -u
}

print_all() {
  local c
  for c in "${want[@]}"; do find_cmd "$c"; done | awk '!seen[$0]++'
}

if [[ -z $(missing) ]]; then
  print_all
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "guesttools.sh: missing and this is not root: apt-get install $(missing | tr '\n' ' ')" >&2
  exit 1
fi
lock=/tmp/inferplane-guesttools-install.lock
exec 9>"$lock"
flock 9
pkgs=$(missing)
if [[ -n $pkgs ]]; then
  echo "guesttools.sh: installing Debian's ${pkgs//$'\n'/ } (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  had_cloudinit=$(find_cmd cloud-init || true)
  # policy-rc.d keeps the packages' post-install scripts from starting services here. Restored
  # exactly: removed only when this script made it.
  policy=/usr/sbin/policy-rc.d
  made_policy=""
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
  fi
  cleanup() {
    if [[ -n $made_policy ]]; then rm -f "$policy"; fi
    return 0
  }
  trap cleanup EXIT
  # shellcheck disable=SC2086 # one word per package
  { apt-get update -q && apt-get install -y -q --no-install-recommends $pkgs; } >&2 || {
    echo "guesttools.sh: apt-get install ${pkgs//$'\n'/ } failed" >&2
    exit 1
  }
  if [[ -z $had_cloudinit ]] && find_cmd cloud-init >/dev/null; then
    mkdir -p /etc/cloud && touch /etc/cloud/cloud-init.disabled
  fi
fi
still=$(missing)
if [[ -n $still ]]; then
  echo "guesttools.sh: still missing after the install: ${still//$'\n'/ }" >&2
  exit 1
fi
print_all
