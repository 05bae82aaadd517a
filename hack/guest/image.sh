#!/usr/bin/env bash
# make guest-image: the replica VMs' guest disk (hack/guest/build.sh) as a KubeVirt containerDisk
# (hack/image containerdisk: an OCI image whose one layer holds /disk/gpu-guest.qcow2, owned by
# 107:107), tagged ghcr.io/inferplane/gpu-guest:<version>, the image this build's generate
# renders into every VM. Prints the archive, the reference and the digest, like make image.
#
# Usage: hack/guest/image.sh AGENT_BINARY DISK TAR [locked|archive|update]
#   AGENT_BINARY  the static inferplane binary (make image's), installed as the agent
#   DISK          where the qcow2 goes; TAR the image's archive (an OCI layout and a docker
#                 archive in one: docker load, skopeo copy oci-archive:, crane push)
# Settings: build.sh's (GUEST_NVIDIA_CONTAINER_REPO and the others), VERSION as for make image.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
(( $# >= 3 )) || { echo "usage: hack/guest/image.sh AGENT_BINARY DISK TAR [locked|archive|update]" >&2; exit 2; }
agent=$1 disk=$2 tar=$3 lock=${4:-locked}

"$repo/hack/guesttools.sh" image > /dev/null
start=$(date +%s)
"$here/build.sh" --agent "$agent" --out "$disk" --lock "$lock"
v() { VERSION=${VERSION:-} "$repo/hack/version.sh" "$1"; }
# The manifest build.sh wrote beside the disk becomes the image's labels: what it holds, and
# plainly what it lacks.
labels=()
while IFS='=' read -r k val; do
  labels+=(--label "io.inferplane.guest.$k=$val")
done < <(sed -n 's/^ *"\([A-Za-z]*\)": "\(.*\)",\{0,1\}$/\1=\2/p' "$disk.json")
description="inferplane's GPU guest for KubeVirt: Debian 12, NVIDIA driver, Docker, cloud-init, the inference agent"
if grep -q '"nvidiaContainerToolkit": "absent"' "$disk.json"; then
  description+=". LACKS the NVIDIA container toolkit (not in Debian; set GUEST_NVIDIA_CONTAINER_REPO): GPU containers cannot start"
  echo "guest-image: this image has NO NVIDIA container toolkit: build with GUEST_NVIDIA_CONTAINER_REPO (docs/guest.md) for one that runs GPU containers" >&2
fi
(cd "$repo/hack/image" && go run . containerdisk --disk "$(realpath "$disk")" --out "$(realpath -m "$tar")" \
  --tag "$(v version)" --revision "$(v commit)" --created "$(v date)" --description "$description" "${labels[@]}")
echo "guest-image: $(( $(date +%s) - start )) s; disk $(du -h "$disk" | cut -f1), image $(du -h "$tar" | cut -f1)" >&2
