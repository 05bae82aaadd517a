#!/usr/bin/env bash
# Prints the -ldflags that stamp a build's version into internal/version (make build, make
# image), by the rule internal/version documents: the release tag vX.Y.Z when HEAD is exactly
# at one and the tree is clean, else dev-<first 12 hex digits of the commit>[-dirty], else
# "dev" outside git. $VERSION, when set, is the release version to stamp instead (it must be a
# valid image tag). `hack/version.sh version|commit|date|modified` prints one value alone.
set -euo pipefail
cd "$(dirname "$0")/.."

pkg=github.com/inferplane/inferplane/internal/version
commit="" date="" modified=false
if commit=$(git rev-parse HEAD 2>/dev/null); then
	date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
	# The same test as Go's vcs.modified: anything git status reports, untracked files included.
	if [ -n "$(git status --porcelain 2>/dev/null)" ]; then modified=true; fi
else
	commit=
fi

version=${VERSION:-}
if [ -z "$version" ]; then
	tag=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null || true)
	if [ -n "$tag" ] && [ "$modified" = false ] && [[ $tag =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
		version=$tag
	elif [ -n "$commit" ]; then
		version=dev-${commit:0:12}
		if [ "$modified" = true ]; then version+=-dirty; fi
	else
		version=dev
	fi
fi
if ! [[ $version =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || [ "$version" = latest ]; then
	echo "hack/version.sh: VERSION=$version is not a valid image tag (letters, digits, _ . -; at most 128; never latest)" >&2
	exit 2
fi

case "${1:-ldflags}" in
version) echo "$version" ;;
commit) echo "$commit" ;;
date) echo "$date" ;;
modified) echo "$modified" ;;
ldflags) echo "-X $pkg.version=$version -X $pkg.commit=$commit -X $pkg.commitDate=$date -X $pkg.modified=$modified" ;;
*) echo "usage: hack/version.sh [ldflags|version|commit|date|modified]" >&2; exit 2 ;;
esac
