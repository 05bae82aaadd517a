#!/usr/bin/env bash
# Prints the path of a Chromium the browser tests can drive (e2e/browser, with chromedp):
# $INFERPLANE_CHROMIUM when it names one, else chromium on PATH. When none is installed,
# hack/debpkg.sh installs Debian's chromium package (and a font to render pages with) with
# apt-get (as root, once, under its lock). No browser is downloaded from anywhere else (test
# tools' own browser downloads do not work here, and would not be pinned by Debian's archive).
set -euo pipefail
if [[ -n ${INFERPLANE_CHROMIUM:-} ]] && bin=$(type -P "$INFERPLANE_CHROMIUM"); then
  echo "$bin"
  exit 0
fi
exec "$(dirname "$0")/debpkg.sh" chromium chromium fonts-dejavu-core
