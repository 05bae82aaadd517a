#!/usr/bin/env bash
# Builds the replica VMs' guest disk from Debian packages (docs/guest.md): debootstrap a Debian 12
# root, install hack/guest/packages and the GPU driver layer hack/guest/packages-gpu at the
# versions hack/guest/debian.lock pins, add
# hack/guest/rootfs and the inferplane binary (the agent), and write a bootable disk (MBR, one
# ext4 partition made by mke2fs -d, GRUB for BIOS) as a compressed qcow2. No loop device, no
# mount of the disk: the file system is written from the folder, GRUB's images by offset.
#
# Usage: hack/guest/build.sh --agent BIN --out FILE.qcow2 [--lock locked|archive|update] [--without-gpu]
#        hack/guest/build.sh --root-only [--lock ...] [--without-gpu]   build (or find) the root only
#        hack/guest/build.sh --print-root-key [--lock ...] [--without-gpu]   the cached root's folder
#
# The root folder (the slow part: packages and the NVIDIA module's DKMS build) is cached in
# $INFERPLANE_CACHE/guest/root-<key>, keyed on this recipe (this script, packages, the lock,
# rootfs/ and the settings below); the disk is rebuilt from it when the agent changes.
#   --lock locked   (default) install exactly the lock's versions; a version the archive no
#                   longer has fails the build, naming it
#   --lock archive  install the archive's current versions, and say how they differ from the
#                   lock (the boot test: it tests the recipe, not one day's archive)
#   --lock update   as archive, then write the versions installed to debian.lock
#   --without-gpu   leave out the GPU driver layer (packages-gpu: NVIDIA's driver, its DKMS
#                   build, the kernel headers and compiler it needs): the boot test's image, for
#                   VMs without a GPU; only with --lock archive (the lock pins the whole image).
#                   Its manifest says "nvidiaDriver": "absent", and its console says so at boot.
# Settings (environment):
#   GUEST_MIRROR                     Debian mirror (default http://deb.debian.org/debian)
#   GUEST_SECURITY_MIRROR            (default http://deb.debian.org/debian-security)
#   GUEST_NVIDIA_CONTAINER_REPO      an apt source line for NVIDIA's container toolkit, e.g.
#     "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /"
#   GUEST_NVIDIA_CONTAINER_KEY       the file of that repository's signing key (binary, gpg --dearmor)
#   GUEST_NVIDIA_CONTAINER_VERSION   nvidia-container-toolkit's version to pin (default: newest)
# Without GUEST_NVIDIA_CONTAINER_REPO the image has no NVIDIA container toolkit, and says so: in
# /usr/share/inferplane/guest-image.json, on the console at every boot, and in the image's labels.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
agent="" out="" lock_mode=locked print_key="" root_only="" gpu=1
while (( $# > 0 )); do
  case $1 in
    --print-root-key) print_key=1; shift ;;
    --root-only) root_only=1; shift ;;
    --without-gpu) gpu=0; shift ;;
    --agent) agent=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --lock) lock_mode=$2; shift 2 ;;
    *) echo "build.sh: unknown argument $1 (--agent BIN --out FILE [--lock locked|archive|update] [--without-gpu])" >&2; exit 2 ;;
  esac
done
[[ -n $print_key$root_only || ( -n $agent && -n $out ) ]] || { echo "build.sh: --agent and --out are required" >&2; exit 2; }
case $lock_mode in locked|archive|update) ;; *) echo "build.sh: --lock is locked, archive or update" >&2; exit 2 ;; esac
[[ -n $print_key$root_only || -x $agent ]] || { echo "build.sh: --agent $agent is not an executable file" >&2; exit 2; }
[[ $gpu == 1 || $lock_mode == archive ]] || { echo "build.sh: --without-gpu needs --lock archive (debian.lock pins the whole image, its GPU layer too)" >&2; exit 2; }
[[ -n $print_key || $(id -u) == 0 ]] || { echo "build.sh: debootstrap and chroot need root" >&2; exit 1; }

mirror=${GUEST_MIRROR:-http://deb.debian.org/debian}
security=${GUEST_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
nv_repo=${GUEST_NVIDIA_CONTAINER_REPO:-}
nv_key=${GUEST_NVIDIA_CONTAINER_KEY:-}
nv_version=${GUEST_NVIDIA_CONTAINER_VERSION:-}
suite=bookworm
components="main contrib non-free non-free-firmware"
lockfile=$here/debian.lock
if [[ -n $nv_repo && $gpu == 0 ]]; then
  echo "build.sh: GUEST_NVIDIA_CONTAINER_REPO needs the GPU layer: drop --without-gpu" >&2
  exit 2
fi
if [[ -n $nv_repo && ! -r $nv_key ]]; then
  echo "build.sh: GUEST_NVIDIA_CONTAINER_REPO needs GUEST_NVIDIA_CONTAINER_KEY, the repository's key file" >&2
  exit 2
fi
if [[ $lock_mode == locked && ! -s $lockfile ]]; then
  echo "build.sh: $lockfile is missing: run with --lock update once and commit it" >&2
  exit 1
fi

cache=${INFERPLANE_CACHE:-$repo/.cache}/guest
mkdir -p "$cache/debs"
# SOURCE_DATE_EPOCH: every time stamp in the image (files, file system, GRUB) is the lock's, so
# the same pins give the same bytes.
epoch=$(awk '$1 == "#" && $2 == "epoch" {print $3}' "$lockfile" 2>/dev/null || true)
epoch=${epoch:-1767225600}
export SOURCE_DATE_EPOCH=$epoch


log() { echo "guest-image: $*" >&2; }

# chroot_mounts mounts what package scripts need inside the root; unmount_all undoes it. Both
# are safe to run twice, and the EXIT trap cannot turn a success into a failure.
mounted=()
chroot_mounts() {
  local r=$1
  mount -t proc proc "$r/proc" && mounted+=("$r/proc")
  mount -t sysfs sysfs "$r/sys" && mounted+=("$r/sys")
  mount --bind /dev "$r/dev" && mounted+=("$r/dev")
  mount -t devpts devpts "$r/dev/pts" && mounted+=("$r/dev/pts")
  mkdir -p "$r/var/cache/apt/archives"
  mount --bind "$cache/debs" "$r/var/cache/apt/archives" && mounted+=("$r/var/cache/apt/archives")
}
unmount_all() {
  local i
  for (( i=${#mounted[@]}-1; i>=0; i-- )); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  mounted=()
  return 0
}
work=""
cleanup() {
  unmount_all
  if [[ -n $work ]]; then rm -rf "$work"; fi
  return 0
}
trap cleanup EXIT

in_root() { chroot "$root.tmp" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  SOURCE_DATE_EPOCH="$epoch" LC_ALL=C.UTF-8 "$@"; }

# wanted lists the packages to install: hack/guest/packages, the GPU layer's packages-gpu unless
# --without-gpu, and the toolkit when its repository is set; in locked mode every package of the
# lock at its version (the base set's too).
wanted() {
  if [[ $lock_mode == locked ]]; then
    awk '$1 !~ /^#/ && NF == 2 {print $1 "=" $2}' "$lockfile"
  else
    sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages"
    if [[ $gpu == 1 ]]; then sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages-gpu"; fi
    if [[ -n $nv_repo ]]; then echo "nvidia-container-toolkit${nv_version:+=$nv_version}"; fi
  fi
}

build_root() {
  local t=$root.tmp
  rm -rf "$t"
  log "debootstrap $suite from $mirror (cached .debs: $cache/debs)"
  debootstrap --variant=minbase --components="${components// /,}" --cache-dir="$cache/debs" \
    --include=ca-certificates "$suite" "$t" "$mirror" >&2
  cat > "$t/etc/apt/sources.list" <<EOF
deb $mirror $suite $components
deb $mirror $suite-updates $components
deb $security $suite-security $components
EOF
  if [[ -n $nv_repo ]]; then
    install -D -m 0644 "$nv_key" "$t/usr/share/keyrings/nvidia-container-toolkit.gpg"
    echo "$nv_repo" > "$t/etc/apt/sources.list.d/nvidia-container-toolkit.list"
  fi
  # No service starts inside the chroot; the kernel's postinst must not look for a boot loader.
  printf '#!/bin/sh\nexit 101\n' > "$t/usr/sbin/policy-rc.d"
  chmod 0755 "$t/usr/sbin/policy-rc.d"
  printf 'do_bootloader = no\ndo_symlinks = yes\n' > "$t/etc/kernel-img.conf"
  echo 'APT::Install-Recommends "false"; APT::Install-Suggests "false";' > "$t/etc/apt/apt.conf.d/90inferplane"
  chroot_mounts "$t"
  in_root apt-get update -q >&2
  local pkgs
  mapfile -t pkgs < <(wanted)
  if [[ $gpu == 1 ]]; then
    log "installing ${#pkgs[@]} packages (the NVIDIA module builds with DKMS: minutes)"
  else
    log "installing ${#pkgs[@]} packages (--without-gpu: no GPU driver layer)"
  fi
  if ! in_root apt-get install -y -q --allow-downgrades "${pkgs[@]}" >&2; then
    if [[ $lock_mode == locked ]]; then
      log "a locked version is not in the archive any more (above): rebuild with --lock update (make guest-image GUEST_LOCK=update) and commit hack/guest/debian.lock"
    fi
    return 1
  fi
  if [[ -n $nv_repo ]]; then in_root nvidia-ctk runtime configure --runtime=docker >&2; fi
  # DKMS must have built the module for the image's kernel, or the image cannot drive a GPU.
  local kver
  kver=$(in_root linux-version list | sort -V | tail -1)
  # (Debian names it nvidia-current.ko, for its driver alternatives.)
  if [[ $gpu == 1 ]]; then
    in_root sh -c "find /lib/modules/$kver/updates/dkms -name 'nvidia*.ko*' | grep -q ." || { log "DKMS built no nvidia module for $kver"; return 1; }
  fi
  # shellcheck disable=SC2016 # dpkg-query's format, not the shell's
  in_root dpkg-query -W -f '${Package} ${Version}\n' | LC_ALL=C sort > "$t.packages"
  unmount_all
  rm -f "$t/usr/sbin/policy-rc.d"
  # Nothing of this build's host or time stays in the image.
  rm -rf "$t"/var/lib/apt/lists/* "$t"/var/cache/apt/*.bin "$t"/var/cache/debconf/*-old "$t"/var/log/* \
    "$t"/tmp/* "$t"/var/tmp/* "$t"/root/.bash_history "$t"/var/lib/dbus/machine-id
  : > "$t/etc/machine-id"
  mv "$t" "$root"
  mv "$t.packages" "$root.packages"
}

# The root's key: the code that builds it (these functions, as bash prints them), the package
# list, the lock when installing from it, the settings. The disk's key adds this whole script,
# rootfs/ and the agent.
root_key() {
  { declare -f build_root wanted chroot_mounts in_root; cat "$here/packages"
    if [[ $gpu == 1 ]]; then cat "$here/packages-gpu"; else echo without-gpu; fi
    if [[ $1 == locked ]]; then cat "$lockfile"; fi
    # update and archive install the same (the archive's versions): one root for both.
    echo "${1/update/archive} $suite $components $mirror $security $nv_repo $nv_version"
    if [[ -n $nv_key ]]; then cat "$nv_key"; fi; } | sha256sum | cut -c1-16
}
key=$(root_key "$lock_mode")
root=$cache/root-$key
if [[ -n $print_key ]]; then
  echo "$root"
  exit 0
fi
if [[ ! -d $root ]]; then
  start=$(date +%s)
  build_root
  log "root built in $(( $(date +%s) - start )) s: $root"
else
  log "root cached: $root"
fi

# The lock: compare what was installed with it, or write it.
if [[ -s $lockfile && $gpu == 0 ]]; then
  # Without the GPU layer the root holds fewer packages than the lock: compare the versions of
  # those it has.
  drift=$(LC_ALL=C join <(awk '$1 !~ /^#/ && NF == 2' "$lockfile") "$root.packages" | awk '$2 != $3' || true)
  if [[ -n $drift ]]; then
    log "the archive has moved on from debian.lock ($(wc -l <<<"$drift") packages differ; the image has the archive's versions)"
  fi
elif [[ -s $lockfile ]]; then
  drift=$(diff <(awk '$1 !~ /^#/ && NF == 2' "$lockfile") "$root.packages" || true)
  if [[ -n $drift ]]; then
    case $lock_mode in
      locked) log "installed packages differ from debian.lock:"; echo "$drift" >&2; exit 1 ;;
      archive) log "the archive has moved on from debian.lock ($(grep -c '^>' <<<"$drift") packages differ; the image has the archive's versions)" ;;
    esac
  fi
fi
if [[ $lock_mode == update ]]; then
  { echo "# Debian package versions of the guest image (hack/guest/build.sh --lock update); the build installs exactly these."
    echo "# epoch $(date +%s)"
    cat "$root.packages"; } > "$lockfile"
  log "wrote $lockfile"
fi

# A root of the archive's versions that are exactly the lock's is the locked build's root too.
if [[ $lock_mode != locked && $gpu == 1 && -s $lockfile ]] && diff -q <(awk '$1 !~ /^#/ && NF == 2' "$lockfile") "$root.packages" >/dev/null; then
  locked_root=$cache/root-$(root_key locked)
  if [[ ! -e $locked_root ]]; then
    ln -s "$(basename "$root")" "$locked_root" && ln -s "$(basename "$root").packages" "$locked_root.packages"
  fi
fi

if [[ -n $root_only ]]; then
  exit 0
fi

# The disk: a working copy of the root with rootfs/, the agent and the image's manifest; kept
# while the root and the agent stay the same.
disk_key=$( { echo "$key"; sha256sum < "$agent"; cat "$0"; (cd "$here/rootfs" && find . -type f -print0 | sort -z | xargs -0 sha256sum); } |
  sha256sum | cut -c1-16)
if [[ -f $out && -f $out.key && $(<"$out.key") == "$disk_key" ]]; then
  log "disk up to date: $out"
  exit 0
fi
work=$(mktemp -d "$cache/disk.XXXXXX")
tree=$work/root
cp -a "$root" "$tree"
cp -a "$here/rootfs/." "$tree/"
install -D -m 0755 "$agent" "$tree/usr/local/bin/inferplane"
chroot "$tree" systemctl enable --quiet inferplane-cache-disk.service inferplane-image-seed.service \
  inferplane-boot-report.service systemd-networkd.service systemd-resolved.service
kver=$(find "$tree/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -1)
agent_version=$("$agent" version -o json 2>/dev/null | sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' | head -1)
toolkit=absent
if grep -q '^nvidia-container-toolkit ' "$root.packages"; then toolkit=$(awk '$1 == "nvidia-container-toolkit" {print $2}' "$root.packages"); fi
mkdir -p "$tree/usr/share/inferplane"
cat > "$tree/usr/share/inferplane/guest-image.json" <<EOF
{
  "debian": "$(cat "$tree/etc/debian_version")",
  "kernel": "$kver",
  "nvidiaDriver": "$(awk '$1 == "nvidia-kernel-dkms" {d = $2} END {print d == "" ? "absent" : d}' "$root.packages")",
  "nvidiaContainerToolkit": "$toolkit",
  "docker": "$(awk '$1 == "docker.io" {print $2}' "$root.packages")",
  "cloudInit": "$(awk '$1 == "cloud-init" {print $2}' "$root.packages")",
  "agent": "${agent_version:-unknown}"
}
EOF
cp "$root.packages" "$tree/usr/share/inferplane/guest-packages.txt"
# GRUB reads its modules from the disk; the kernel and initramfs keep their Debian names.
mkdir -p "$tree/boot/grub/i386-pc"
cp "$tree"/usr/lib/grub/i386-pc/*.mod "$tree"/usr/lib/grub/i386-pc/*.lst "$tree/boot/grub/i386-pc/"
sed -i "s/@KVER@/$kver/g" "$tree/boot/grub/grub.cfg"
# GRUB's core image (made with the image's own grub-mkimage, kept out of the file system).
chroot "$tree" grub-mkimage -O i386-pc -o /tmp/core.img -p '(hd0,msdos1)/boot/grub' \
  biosdisk part_msdos ext2 normal linux configfile echo test search search_label
mv "$tree/tmp/core.img" "$work/core.img"
find "$tree" -newermt "@$epoch" -print0 | xargs -0r touch -h -d "@$epoch"

# The disk image: 1 MiB for the MBR and GRUB's core image, then one ext4 partition filling an
# 8 GiB disk (sparse: the qcow2 holds only what is written; the root gets the free space that
# the guest's own writes need, Docker's images live on the model-cache disk).
size_mib=8192
raw=$work/disk.raw
truncate -s "${size_mib}M" "$raw"
printf 'label: dos\nlabel-id: 0x1f0e1f0e\nstart=2048, type=83, bootable\n' | sfdisk -q "$raw" >&2
uuid=6c1c4f2e-3b1a-4a5e-9c8f-1f0e1f0e0001
E2FSPROGS_FAKE_TIME=$epoch mke2fs -q -F -t ext4 -L inferplane-root -U "$uuid" -E "offset=$((2048 * 512)),hash_seed=$uuid,lazy_itable_init=1" \
  -d "$tree" "$raw" "$(( (size_mib - 1) * 1024 ))k" >&2
# GRUB for BIOS, installed by hand: boot.img's code (not the partition table) in the MBR, and a
# core image at sector 1 whose first sector loads the rest from sector 2 (its default blocklist).
core_sectors=$(( ($(stat -c %s "$work/core.img") + 511) / 512 ))
(( core_sectors < 2047 )) || { log "GRUB's core image ($core_sectors sectors) does not fit before the partition"; exit 1; }
dd if="$tree/usr/lib/grub/i386-pc/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$raw" bs=512 seek=1 conv=notrunc status=none
mkdir -p "$(dirname "$out")"
log "writing $out (qcow2, compressed)"
qemu-img convert -c -O qcow2 "$raw" "$out.tmp"
mv "$out.tmp" "$out"
cp "$tree/usr/share/inferplane/guest-image.json" "$out.json"
echo "$disk_key" > "$out.key"
log "done: $out ($(du -h "$out" | cut -f1); root folder $(du -sh "$root" | cut -f1))"
