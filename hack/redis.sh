#!/usr/bin/env bash
# Prints the path of a redis-server the tests can start (auth/limits and the gateway's limit
# tests run a real Redis on 127.0.0.1). When none is on PATH, hack/debpkg.sh installs Debian's
# redis-server package with apt-get (as root, once, under its lock), without starting the
# package's own service: the tests start their own servers on free ports and stop them.
set -euo pipefail
exec "$(dirname "$0")/debpkg.sh" redis-server redis-server
