#!/usr/bin/env bash
# The test venv scripts/test runs pytest from: this checkout installed editable with its test extra.
#
#   scripts/install-venv.sh            # install (or reuse); quiet unless something fails
#   scripts/install-venv.sh --check    # exit 0 if the venv is current for this checkout, 1 otherwise
#
# Where:   ${AGENT_BRIDGE_CACHE:-$HOME/.cache/agent-bridge}/venv
# Current: its stamp (this checkout's path and its pyproject.toml's hash, written after a pip install
#          that succeeded) matches, agent-bridge is installed editable from this checkout, and every
#          requirement of agent-bridge[test] is installed. Then nothing runs pip (no network).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
CACHE_ROOT=${AGENT_BRIDGE_CACHE:-$HOME/.cache/agent-bridge}
VENV=$CACHE_ROOT/venv
PY=$VENV/bin/python
STAMP=$VENV/.agent-bridge-test-stamp

die() { echo "install-venv: error: $*" >&2; exit 1; }

want_stamp() { printf '%s %s\n' "$ROOT" "$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"; }

# agent-bridge editable from ROOT, with its requirements and the test extra's installed
installed() {
  (cd / && "$PY" - "$ROOT" <<'PY'
import json, os, re, sys
from importlib import metadata
try:
    dist = metadata.distribution("agent-bridge")
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    for req in dist.requires or []:
        name, _, marker = req.partition(";")
        if not marker.strip() or re.search(r"""extra\s*==\s*["']test["']""", marker):
            metadata.distribution(re.match(r"[A-Za-z0-9._-]+", name.strip()).group(0))
except metadata.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if url == "file://" + os.path.realpath(sys.argv[1]) else 1)
PY
  )
}

venv_ok() { [ -x "$PY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(want_stamp)" ] && installed >/dev/null 2>&1; }

case "${1:-}" in
  --check) venv_ok && exit 0 || exit 1 ;;
  "") ;;
  -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
  *) die "unknown argument: $1 (use --check or no argument)" ;;
esac

venv_ok && exit 0
mkdir -p "$CACHE_ROOT" || die "cannot create $CACHE_ROOT"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
fi
rm -f "$STAMP"
"$PY" -m pip install -q --disable-pip-version-check -e "$ROOT[test]" || die "pip install -e '$ROOT[test]' into $VENV failed"
installed || die "pip install succeeded but $VENV's agent-bridge is not this checkout's, or a requirement is missing"
want_stamp >"$STAMP"
