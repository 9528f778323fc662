#!/usr/bin/env bash
# Install what the browser tests (tests/browser, marker `browser`) need:
#   - Debian's Chromium at /usr/bin/chromium (apt-get; `apt-get update` first only when needed)
#   - the `playwright` Python package in the test venv (its own browser downloads are never used:
#     the tests launch /usr/bin/chromium through executable_path; never `playwright install`).
#
#   scripts/install-browser.sh            # install (or reuse); quiet unless something fails
#   scripts/install-browser.sh --check    # exit 0 if both are present, 1 otherwise
#
# Venv: ${AGENT_BRIDGE_CACHE:-$HOME/.cache/agent-bridge}/venv (the one scripts/test uses).
# Idempotent: with everything in place it does no network access.
set -euo pipefail

CACHE_ROOT=${AGENT_BRIDGE_CACHE:-$HOME/.cache/agent-bridge}
VENV=$CACHE_ROOT/venv
PY=$VENV/bin/python
CHROMIUM=/usr/bin/chromium

die() { echo "install-browser: error: $*" >&2; exit 1; }
say() { [ -z "${VERBOSE:-}" ] || echo "install-browser: $*" >&2; }

chromium_ok() { [ -x "$CHROMIUM" ]; }
playwright_ok() { [ -x "$PY" ] && "$PY" -c "import playwright.async_api" >/dev/null 2>&1; }

case "${1:-}" in
  --check) chromium_ok && playwright_ok && exit 0 || exit 1 ;;
  "") ;;
  -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
  *) die "unknown argument: $1 (use --check or no argument)" ;;
esac

if ! chromium_ok; then
  command -v apt-get >/dev/null 2>&1 ||
    die "$CHROMIUM is missing and apt-get is not available: install Debian's chromium package by hand"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "$CHROMIUM is missing; installing it needs root (or sudo)"
    SUDO="sudo -n"
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Try from the current package lists first; refresh them once only if that fails.
  if ! $SUDO apt-get install -y -q chromium >/tmp/install-browser-apt.log 2>&1; then
    say "refreshing apt package lists"
    $SUDO apt-get update -q >>/tmp/install-browser-apt.log 2>&1 ||
      { tail -n 20 /tmp/install-browser-apt.log >&2; die "apt-get update failed (output above)"; }
    $SUDO apt-get install -y -q chromium >>/tmp/install-browser-apt.log 2>&1 ||
      { tail -n 20 /tmp/install-browser-apt.log >&2; die "apt-get install chromium failed (output above)"; }
  fi
  chromium_ok || die "chromium installed but $CHROMIUM is missing"
  say "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
fi

if ! playwright_ok; then
  [ -x "$PY" ] || { mkdir -p "$CACHE_ROOT"; python3 -m venv "$VENV" || die "cannot create the venv $VENV"; }
  "$PY" -m pip install -q --disable-pip-version-check playwright ||
    die "pip install playwright into $VENV failed"
  playwright_ok || die "playwright installed but 'import playwright.async_api' fails in $VENV"
  say "installed playwright into $VENV"
fi
