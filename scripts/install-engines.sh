#!/usr/bin/env bash
# Install the engines the several-nodes tests (tests/store, tests/scale) start their own private
# instances of: Debian's PostgreSQL server (initdb, pg_ctl) and redis-server. Nothing is started
# or enabled as a system service: the tests run initdb / redis-server in temporary directories
# on loopback ports (tests/engines.py).
#
#   scripts/install-engines.sh postgresql|redis     # install (or reuse); quiet unless something fails
#   scripts/install-engines.sh --check postgresql|redis
#
# Idempotent: with the engine in place it does no network access.
set -euo pipefail

die() { echo "install-engines: error: $*" >&2; exit 1; }

pg_ok() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; }
redis_ok() { command -v redis-server >/dev/null 2>&1; }

check=""
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
engine=${1:-}
case "$engine" in
  postgresql) ok=pg_ok; pkg=postgresql ;;
  redis) ok=redis_ok; pkg=redis-server ;;
  -h|--help|"") sed -n '2,10p' "$0"; exit 0 ;;
  *) die "unknown engine: $engine (postgresql or redis)" ;;
esac
if $ok; then exit 0; fi
[ -z "$check" ] || exit 1

command -v apt-get >/dev/null 2>&1 || die "$engine is missing and apt-get is not available: install Debian's $pkg package by hand"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "$engine is missing; installing it needs root (or sudo)"
  SUDO="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
# the packages' maintainer scripts would start a system service: forbid it for the install
policy=/usr/sbin/policy-rc.d
made_policy=""
if [ ! -e "$policy" ] && [ -z "$SUDO" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
cleanup() { [ -z "$made_policy" ] || rm -f "$policy"; }
trap cleanup EXIT
if ! $SUDO apt-get install -y --no-install-recommends "$pkg"; then
  $SUDO apt-get update || die "apt-get update failed"
  $SUDO apt-get install -y --no-install-recommends "$pkg" || die "apt-get install $pkg failed"
fi
$ok || die "$pkg installed but its binaries are not where expected"
