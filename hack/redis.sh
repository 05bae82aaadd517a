#!/usr/bin/env bash
# Prints the path of a redis-server the tests can start (auth/limits and the gateway's limit
# tests run a real Redis on 127.0.0.1). When none is on PATH it installs Debian's redis-server
# package with apt-get (the test set-up runs as root; see the charter), once: a second caller
# waits on the lock and finds the first one's result. The package's own service is not
# started: the tests start their own servers on free ports and stop them.
set -euo pipefail

find_redis() {
  command -v redis-server 2>/dev/null || { [[ -x /usr/bin/redis-server ]] && echo /usr/bin/redis-server; }
}

if bin=$(find_redis); then
  echo "$bin"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "redis.sh: redis-server is not installed and this is not root: apt-get install redis-server" >&2
  exit 1
fi
lock=/tmp/inferplane-redis-install.lock
exec 9>"$lock"
flock 9
if bin=$(find_redis); then
  echo "$bin"
  exit 0
fi
echo "redis.sh: installing Debian's redis-server (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps the package's post-install from starting its own service on port 6379.
policy=/usr/sbin/policy-rc.d
made_policy=""
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
fi
cleanup() { [[ -n $made_policy ]] && rm -f "$policy"; }
trap cleanup EXIT
{ apt-get update -q && apt-get install -y -q --no-install-recommends redis-server; } >&2 || {
  echo "redis.sh: apt-get install redis-server failed" >&2
  exit 1
}
bin=$(find_redis) || { echo "redis.sh: redis-server still not found after the install" >&2; exit 1; }
echo "$bin"
