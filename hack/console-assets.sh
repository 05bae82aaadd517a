#!/usr/bin/env bash
# Reproduces the front-end files the console embeds (console/static/vendor/) and the axe-core
# build the browser tests run inside pages (e2e/browser/axe/), from the npm registry, exactly as
# console/web/package-lock.json pins them (versions and integrity hashes; `npm ci` refuses a
# package whose hash differs). Nothing is built, minified or edited: each file is the package's
# own distribution file, copied byte for byte, with the package's licence beside it. Then it
# records every output's SHA-256 in console/web/assets.sha256 (sha256sum's format, paths from
# the repository's root), which the Go test compares with what is committed when node and npm
# are not installed (console/assets_test.go).
#
# Usage: hack/console-assets.sh [--out DIR]
#   --out DIR  writes the same tree under DIR instead of the repository (the test does this and
#              compares DIR with the committed files).
# Needs node and npm (Debian: apt-get install nodejs npm); `go run` and `make test` do not.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root
if [[ ${1:-} == --out ]]; then
  [[ -n ${2:-} ]] || { echo "console-assets.sh: --out needs a folder" >&2; exit 2; }
  mkdir -p "$2"
  out=$(cd "$2" && pwd)
elif [[ -n ${1:-} ]]; then
  echo "usage: hack/console-assets.sh [--out DIR]" >&2
  exit 2
fi
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "console-assets.sh: $tool is not installed (apt-get install nodejs npm)" >&2; exit 1; }
done

# package -> file inside it -> where it goes (repository-relative). One list: the checksums file
# and the test follow it.
files=(
  "htmx.org dist/htmx.min.js console/static/vendor/htmx.min.js"
  "htmx.org dist/ext/hx-sse.min.js console/static/vendor/hx-sse.min.js"
  "htmx.org LICENSE console/static/vendor/LICENSE.htmx"
  "uplot dist/uPlot.iife.min.js console/static/vendor/uPlot.iife.min.js"
  "uplot dist/uPlot.min.css console/static/vendor/uPlot.min.css"
  "uplot LICENSE console/static/vendor/LICENSE.uplot"
  "axe-core axe.min.js e2e/browser/axe/axe.min.js"
  "axe-core LICENSE e2e/browser/axe/LICENSE.axe-core"
)

work=$(mktemp -d)
trap 'rm -rf "$work" || true' EXIT # never fails the script (set -e)
cp "$root/console/web/package.json" "$root/console/web/package-lock.json" "$root/console/web/.npmrc" "$work/"
# --ignore-scripts: no package runs code at install; the lock file is not rewritten by ci.
(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund) >&2

sums=()
for f in "${files[@]}"; do
  read -r pkg src dst <<<"$f"
  from="$work/node_modules/$pkg/$src"
  [[ -f $from ]] || { echo "console-assets.sh: $pkg has no $src (a new version moved it?)" >&2; exit 1; }
  mkdir -p "$(dirname "$out/$dst")"
  cp "$from" "$out/$dst"
  chmod 0644 "$out/$dst"
  sums+=("$(cd "$out" && sha256sum "$dst")")
done
mkdir -p "$out/console/web"
printf '%s\n' "${sums[@]}" > "$out/console/web/assets.sha256"
for f in "${files[@]}"; do
  read -r pkg src dst <<<"$f"
  ver=$(node -p "require('$work/node_modules/$pkg/package.json').version")
  echo "console-assets.sh: $dst <- $pkg@$ver $src" >&2
done
