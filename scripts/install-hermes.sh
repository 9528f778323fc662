#!/usr/bin/env bash
# Install the pinned Hermes Agent, plus this project (editable), into a separate cached venv.
#
#   scripts/install-hermes.sh            # install (or reuse) and print the paths
#   scripts/install-hermes.sh --check    # exit 0 if installed and current, 1 otherwise
#
# Where:   ${AGENT_BRIDGE_CACHE:-$HOME/.cache/agent-bridge}/hermes-venv   (override with AGENT_BRIDGE_HERMES_VENV)
# What:    hermes-agent==0.19.0 from PyPI, and this checkout installed editable (`pip install -e .`),
#          so the venv's `hermes` discovers the agent-bridge plugin through its entry points.
# Output:  the last lines are   HERMES=<path to hermes>   HERMES_PYTHON=<path to python>
# Idempotent: a second run with everything in place does no network access and prints the same lines.
# The tests marked `hermes` run the gateway from this venv and skip when it is missing.
set -euo pipefail

HERMES_VERSION=0.19.0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE_ROOT=${AGENT_BRIDGE_CACHE:-$HOME/.cache/agent-bridge}
VENV=${AGENT_BRIDGE_HERMES_VENV:-$CACHE_ROOT/hermes-venv}
PY=$VENV/bin/python
HERMES_BIN=$VENV/bin/hermes
STAMP=$VENV/.agent-bridge-stamp

die() { echo "install-hermes: error: $*" >&2; exit 1; }
say() { [ -n "${QUIET:-}" ] || echo "install-hermes: $*" >&2; }

# What the editable install depends on: this checkout's path and its pyproject (entry points, deps).
want_stamp() { printf '%s %s %s\n' "$HERMES_VERSION" "$ROOT" "$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"; }

hermes_ok() {
  [ -x "$PY" ] && [ -x "$HERMES_BIN" ] &&
    [ "$("$PY" -c 'import hermes_cli; print(hermes_cli.__version__)' 2>/dev/null)" = "$HERMES_VERSION" ]
}
bridge_ok() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(want_stamp)" ] &&
    [ "$("$PY" -c 'import bridge_core, os; print(os.path.dirname(os.path.dirname(os.path.abspath(bridge_core.__file__))))' 2>/dev/null)" = "$ROOT" ]
}

report() {
  echo "HERMES=$HERMES_BIN"
  echo "HERMES_PYTHON=$PY"
}

case "${1:-}" in
  --check) hermes_ok && bridge_ok && exit 0 || exit 1 ;;
  "") ;;
  -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
  *) die "unknown argument: $1 (use --check or no argument)" ;;
esac

if hermes_ok && bridge_ok; then
  report
  exit 0
fi

# hermes-agent 0.19.0 needs Python >= 3.11, < 3.14.
pick_python() {
  local c
  for c in ${AGENT_BRIDGE_HERMES_PYTHON:-} python3.11 python3.12 python3.13 python3; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 14) else 1)' 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

mkdir -p "$(dirname "$VENV")" || die "cannot create $(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if hermes_ok && bridge_ok; then report; exit 0; fi

PIP_FLAGS=(-q --disable-pip-version-check --no-input)
LOG=$(mktemp "${TMPDIR:-/tmp}/install-hermes.XXXXXX")
trap 'rm -f "$LOG"' EXIT

run_pip() {
  if ! "$PY" -m pip "${PIP_FLAGS[@]}" "$@" >"$LOG" 2>&1; then
    tail -n 25 "$LOG" >&2
    die "pip install $* failed (output above)"
  fi
}

if ! hermes_ok; then
  PYTHON=$(pick_python) || die "hermes-agent $HERMES_VERSION needs Python 3.11-3.13; none found (set AGENT_BRIDGE_HERMES_PYTHON)"
  if [ ! -x "$PY" ]; then
    say "creating venv $VENV with $PYTHON ..."
    "$PYTHON" -m venv "$VENV" >"$LOG" 2>&1 || { cat "$LOG" >&2; die "python -m venv $VENV failed"; }
  fi
  say "installing hermes-agent==$HERMES_VERSION (PyPI) ..."
  run_pip install "hermes-agent==$HERMES_VERSION"
  hermes_ok || die "hermes-agent $HERMES_VERSION installed but $HERMES_BIN is missing or reports another version"
fi

say "installing agent-bridge (editable, $ROOT) into $VENV ..."
rm -f "$STAMP"
run_pip install -e "$ROOT"
want_stamp >"$STAMP"
bridge_ok || die "agent-bridge installed into $VENV but does not import from $ROOT"

say "ok: hermes-agent $HERMES_VERSION + agent-bridge in $VENV"
report
