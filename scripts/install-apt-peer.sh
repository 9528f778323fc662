#!/usr/bin/env bash
# Install one Debian package a peer test needs, when its binary is missing (used by
# scripts/install-caddy.sh and scripts/install-nginx.sh):
#
#   scripts/install-apt-peer.sh PACKAGE BINARY          # install (or reuse); quiet unless it fails
#   scripts/install-apt-peer.sh PACKAGE BINARY --check  # exit 0 if BINARY is there, 1 otherwise
#
# apt-get install --no-install-recommends (apt-get update first only when needed). The
# package's own service is never started: the tests run the binary themselves, on loopback,
# with their own config, pid and log files (a policy-rc.d refusing service starts is put in
# place for the install when the system has none, and removed after).
set -euo pipefail
PKG=${1:?package}; BIN=${2:?binary}
die() { echo "install-$PKG: error: $*" >&2; exit 1; }

[ "${3:-}" = "--check" ] && { [ -x "$BIN" ] && exit 0 || exit 1; }
[ -x "$BIN" ] && exit 0
command -v apt-get >/dev/null 2>&1 || die "$BIN is missing and apt-get is not available: install Debian's $PKG by hand"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "$BIN is missing; installing $PKG needs root (or sudo)"
  SUDO="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
LOG=$(mktemp "/tmp/install-$PKG-apt.XXXXXX.log")
POLICY=/usr/sbin/policy-rc.d
placed=""
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null && $SUDO chmod 755 "$POLICY" && placed=1
fi
cleanup() { [ -z "$placed" ] || $SUDO rm -f "$POLICY"; }
trap cleanup EXIT
if ! $SUDO apt-get install -y -q --no-install-recommends "$PKG" >"$LOG" 2>&1; then
  $SUDO apt-get update -q >>"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; die "apt-get update failed (output above)"; }
  $SUDO apt-get install -y -q --no-install-recommends "$PKG" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "apt-get install $PKG failed (output above)"; }
fi
[ -x "$BIN" ] || die "$PKG installed but $BIN is missing"
