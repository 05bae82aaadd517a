#!/usr/bin/env bash
# Prints the path of each command that checks, boots or builds the replica VMs' guest
# (docs/guest.md), one per line, installing Debian's package of any that is missing through
# hack/debpkg.sh (as root, once, no service started).
#
# Usage: hack/guesttools.sh check|vm|image...
#   check  what checks the rendered cloud-init as text: cloud-init (its `schema` check and its
#          network parser), netplan (what the guest renders network-data with), systemd-analyze
#   vm     what boots a guest: qemu-system-x86_64, qemu-img, xorrisofs (the NoCloud and Secret
#          disks, made as virt-launcher makes them)
#   image  what builds the guest image: debootstrap, mke2fs (e2fsprogs), sfdisk (fdisk), qemu-img
#
# cloud-init, installed here for its checker only, is disabled on this machine when this script
# installs it (/etc/cloud/cloud-init.disabled): it never configures the host at a later boot.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
declare -A pkg_of=(
  [cloud-init]=cloud-init [netplan]=netplan.io [systemd-analyze]=systemd
  [qemu-system-x86_64]=qemu-system-x86 [qemu-img]=qemu-utils [xorrisofs]=xorriso
  [debootstrap]=debootstrap [mke2fs]=e2fsprogs [sfdisk]=fdisk
)
declare -A cmds_of=(
  [check]="cloud-init netplan systemd-analyze"
  [vm]="qemu-system-x86_64 qemu-img xorrisofs"
  [image]="debootstrap mke2fs sfdisk qemu-img"
)

(( $# > 0 )) || { echo "usage: hack/guesttools.sh check|vm|image..." >&2; exit 2; }
want=()
for group in "$@"; do
  [[ -n ${cmds_of[$group]:-} ]] || { echo "guesttools.sh: unknown group $group (check, vm, image)" >&2; exit 2; }
  for c in ${cmds_of[$group]}; do want+=("$c"); done
done

declare -A printed=()
for c in "${want[@]}"; do
  [[ -n ${printed[$c]:-} ]] && continue
  printed[$c]=1
  had=""
  if PATH=$PATH:/usr/sbin:/sbin type -P "$c" >/dev/null; then had=1; fi
  "$here/debpkg.sh" "$c" "${pkg_of[$c]}"
  if [[ $c == cloud-init && -z $had ]]; then
    mkdir -p /etc/cloud && touch /etc/cloud/cloud-init.disabled
  fi
done
