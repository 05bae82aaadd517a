#!/usr/bin/env bash
# The console on the bundled examples, on this machine (make console; docs/console.md): the
# checkout's recipes/ and tenants/ committed to a bare inputs repository in a temporary folder,
# `api serve` over it with the development sign-in (refused unless on 127.0.0.1), API keys in a
# bbolt file there, no cluster and no gateway (jobs show stage unknown, usage and health say
# why). Everything is removed when it stops (Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
listen=${CONSOLE_LISTEN:-127.0.0.1:8080}
go=${GO:-go}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/inferplane-console.XXXXXX")
trap 'rm -rf "$tmp" || true' EXIT # never fails the script (set -e)
trap 'exit 130' INT TERM

git init -q --bare -b main "$tmp/inputs.git"
git init -q -b main "$tmp/seed"
cp -R recipes tenants "$tmp/seed/"
git -C "$tmp/seed" add -A
git -C "$tmp/seed" -c user.name=inferplane -c user.email=console-demo@localhost commit -q -m "the bundled examples"
git -C "$tmp/seed" push -q "$tmp/inputs.git" main
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/keys-secret"

echo "console: open http://$listen/ and sign in with any email; groups acme-ml (developer in acme), acme-all (viewer), globex-admins (admin in globex)" >&2
"$go" run ./cmd/inferplane api serve --console-dev --listen "$listen" --inputs-repo "file://$tmp/inputs.git" \
  --work-dir "$tmp/work" --keys-file "$tmp/keys.db" --keys-secret-file "$tmp/keys-secret" \
  --repo-url "file://$tmp/tenants" --domain inference.localhost "$@"
