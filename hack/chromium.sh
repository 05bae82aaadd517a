#!/usr/bin/env bash
# Prints the path of a Chromium the browser tests can drive (e2e/browser, with chromedp). When
# none is installed it installs Debian's chromium package with apt-get (the test set-up runs as
# root; see the charter), once: a second caller waits on the lock and finds the first one's
# result. No browser is downloaded from anywhere else (test tools' own browser downloads do not
# work here, and would not be pinned by Debian's archive).
set -euo pipefail

find_chromium() {
  local c
  for c in "${INFERPLANE_CHROMIUM:-}" chromium /usr/bin/chromium; do
    [[ -z $c ]] && continue
    if command -v "$c" >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}

if bin=$(find_chromium); then
  echo "$bin"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "chromium.sh: chromium is not installed and this is not root: apt-get install chromium" >&2
  exit 1
fi
lock=/tmp/inferplane-chromium-install.lock
exec 9>"$lock"
flock 9
if bin=$(find_chromium); then
  echo "$bin"
  exit 0
fi
echo "chromium.sh: installing Debian's chromium (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -q && apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core; } >&2 || {
  echo "chromium.sh: apt-get install chromium failed" >&2
  exit 1
}
bin=$(find_chromium) || { echo "chromium.sh: chromium still not found after the install" >&2; exit 1; }
echo "$bin"
