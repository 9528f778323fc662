"""What a spawn runs, without I/O (spawn.py runs it): the images, volumes and scripts of the clone,
the checks of a spawn's repo and branch, the engine's address and the worker's view of the daemon
(docs/security.md, "Worker containers and spawn")."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
from pathlib import Path
from typing import Any, Optional

from yarl import URL

from bridge_core.kit.security import is_loopback
from bridge_core.model.errors import ConfigError

from .errors import HttpError

WORKER_IMAGE = "lvmh-worker:latest"
GIT_IMAGE = "alpine/git:latest"
UNAVAILABLE_HEADER = "X-Lvmh-Spawn-Unavailable"
MIRROR_DIR = "/mirror"
WORKER_DOCKERFILE = "docker/worker.Dockerfile"  # in a [lvmh] worker_context (the spec's repo layout)
PACKAGE_DIR = Path(__file__).resolve().parent
SHIPPED_DOCKERFILE = "worker/Dockerfile"  # in PACKAGE_DIR: worker/index.mjs + pi_extension/, shipped in the wheel
MODELS_JSON_TARGET = "/root/.pi/agent/models.json"
WORKER_CMD = ["node", "/bridge/index.mjs"]
ACTIVE_STATES = ("queued", "cloning", "building", "starting")
TERMINAL_STATES = ("failed", "exited", "stopped", "cancelled")
_CONTEXT_SKIP = {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", ".hypothesis"}

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*){1,19}$")
_BRANCH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}$")
_WORKER_TOKEN = re.compile(r"lvmhw_[A-Za-z0-9_-]{16,}")
_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")

# The clone runs in two short-lived containers (docs/security.md, "Worker containers and spawn"):
#
# FETCH_SCRIPT, with the GitLab token, mounts only the repository's mirror volume: a bare
# repository at $LVMH_MIRROR_DIR/repo.git that these fetch containers alone write and no worker
# ever mounts. Its config and hooks are ours; git runs with hooks, fsmonitor, system and global
# config off, and the credential helper answers only for the configured GitLab host and scheme.
#
# CHECKOUT_SCRIPT, without any token, mounts the mirror read-only and the repo volume (the tree a
# worker writes) and brings the tree up to date from the mirror. What a worker could have left
# in $LVMH_WORKSPACE/.git to run code (config with core.fsmonitor, includes, credential helpers,
# filters; hooks; commondir/worktree links; alternates) is removed and the config rewritten
# before git reads it; a .git that is a symlink or a file is replaced by a fresh clone.
#
# Both are POSIX sh (busybox in alpine/git), inputs from the environment only.
_GIT_ENV = r"""set -eu
umask 022
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=/bin/false SSH_ASKPASS=/bin/false
unset GIT_DIR GIT_WORK_TREE GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT GIT_EXEC_PATH || true
m="${LVMH_MIRROR_DIR:-/mirror}/repo.git"
"""

FETCH_SCRIPT = _GIT_ENV + r"""proto="${LVMH_CLONE_URL%%://*}"
helper='!f() { test "$1" = get || exit 0; h=; p=; while IFS== read -r k v; do case "$k" in host) h="$v";; protocol) p="$v";; esac; done; test -n "${LVMH_GIT_TOKEN:-}" && test "$p" = "$LVMH_GIT_PROTOCOL" && test "$h" = "$LVMH_GIT_HOST" || exit 0; echo username=oauth2; echo "password=$LVMH_GIT_TOKEN"; }; f'
g() {
  git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c credential.helper= -c "credential.helper=$helper" \
      -c protocol.allow=never -c "protocol.$proto.allow=always" "$@"
}
if [ -L "$m" ] || [ ! -f "$m/HEAD" ]; then
  rm -rf -- "$m"
  git -c init.defaultBranch=main init -q --bare "$m"
fi
g --git-dir="$m" fetch --prune --no-tags "$LVMH_CLONE_URL" '+refs/heads/*:refs/heads/*' '+refs/tags/*:refs/tags/*'
head="$(g --git-dir="$m" ls-remote --symref "$LVMH_CLONE_URL" HEAD | sed -n 's|^ref: refs/heads/\(.*\)[[:space:]]HEAD$|\1|p')"
if [ -n "$head" ]; then
  git --git-dir="$m" symbolic-ref HEAD "refs/heads/$head"
fi
"""

CHECKOUT_SCRIPT = _GIT_ENV + r"""w="${LVMH_WORKSPACE:-/workspace}"
d="$w/.git"
g() {
  git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c credential.helper= \
      -c protocol.allow=never -c protocol.file.allow=always "$@"
}
if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; } || { [ -d "$d" ] && [ ! -f "$d/HEAD" ]; }; then
  echo "lvmh: $d is not a usable git directory; checking out afresh" >&2
  rm -rf -- "$d"
  find "$w" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
fi
if [ -d "$d" ]; then
  rm -rf -- "$d/hooks" "$d/config" "$d/config.worktree" "$d/commondir" "$d/worktrees" "$d/modules" \
            "$d/objects/info/alternates" "$d/objects/info/http-alternates" "$d/info/attributes"
  mkdir -p "$d/hooks"
  printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tlogallrefupdates = true\n[remote "origin"]\n\turl = %s\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n' "$LVMH_CLONE_URL" > "$d/config"
  cd "$w"
  g fetch -q --prune --no-tags "$m" '+refs/heads/*:refs/remotes/origin/*' '+refs/tags/*:refs/tags/*'
  br="${LVMH_BRANCH:-}"
  if [ -z "$br" ]; then
    br="$(g ls-remote --symref "$m" HEAD | sed -n 's|^ref: refs/heads/\(.*\)[[:space:]]HEAD$|\1|p')"
  fi
  if [ -z "$br" ]; then
    echo "lvmh: the repository has no default branch" >&2
    exit 1
  fi
  g symbolic-ref refs/remotes/origin/HEAD "refs/remotes/origin/$br"
  if g rev-parse -q --verify "refs/heads/$br" >/dev/null; then
    g checkout -q "$br"
    g merge -q --ff-only "refs/remotes/origin/$br"
  else
    g checkout -q -b "$br" --track "origin/$br"
  fi
else
  find "$w" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
  if [ -n "${LVMH_BRANCH:-}" ]; then
    g clone -q --no-local --branch "$LVMH_BRANCH" -- "$m" "$w"
  else
    g clone -q --no-local -- "$m" "$w"
  fi
  g -C "$w" remote set-url origin "$LVMH_CLONE_URL"
fi
"""


class SpawnError(HttpError):
    """Answered as ``{"error": message}`` with ``status``."""


def valid_repo(repo: Any) -> bool:
    return (
        isinstance(repo, str)
        and len(repo) <= 255
        and bool(_REPO.fullmatch(repo))
        and not any(seg in (".", "..") or seg.endswith((".git", ".atom", ".")) for seg in repo.split("/"))
    )


def valid_branch(branch: Any) -> bool:
    return (
        isinstance(branch, str)
        and bool(_BRANCH.fullmatch(branch))
        and ".." not in branch
        and "//" not in branch
        and not branch.endswith(("/", ".lock", "."))
    )


def _number(section: dict, key: str, default: float) -> float:
    val = section.get(key, default)
    try:
        out = float(val)
    except (TypeError, ValueError):
        out = -1.0
    if not out > 0:
        raise ConfigError(f"lvmh.{key} must be a positive number, not {val!r}")
    return out


def repo_key(repo: str) -> str:
    """The spec's slug (``/`` -> ``-``) plus a short hash of the path, so that no two
    repositories share a volume (``team-a/tools`` and ``team/a-tools`` have one slug)."""
    return repo.replace("/", "-") + "-" + hashlib.sha256(repo.encode()).hexdigest()[:10]


def repo_volume(repo: str) -> str:
    """The tree workers of ``repo`` mount at /workspace."""
    return "lvmh-repo-" + repo_key(repo)


def mirror_volume(repo: str) -> str:
    """The bare mirror only the fetch container (with the GitLab token) writes; no worker mounts it."""
    return "lvmh-mirror-" + repo_key(repo)


def sessions_volume(session_id: str) -> str:
    """One session's pi session files (/pi-sessions): each worker sees only its own."""
    return "lvmh-sessions-" + session_id


def git_host(url: str) -> tuple[str, str]:
    """(protocol, host[:port]) of a URL as git's credential protocol names them."""
    u = URL(url)
    host = u.raw_host or ""
    if ":" in host:
        host = f"[{host}]"
    if u.explicit_port is not None:
        host = f"{host}:{u.explicit_port}"
    return (u.scheme or ""), host


def fetch_env(clone_url: str, token: Optional[str]) -> list[str]:
    """The fetch container's environment: the only place the GitLab token goes, with the one
    host (and scheme) the credential helper may answer for."""
    proto, host = git_host(clone_url)
    env = [f"LVMH_CLONE_URL={clone_url}", f"LVMH_GIT_PROTOCOL={proto}", f"LVMH_GIT_HOST={host}",
           "GIT_TERMINAL_PROMPT=0"]
    if token:
        env.append(f"LVMH_GIT_TOKEN={token}")
    return env


def checkout_env(clone_url: str, branch: Optional[str]) -> list[str]:
    """The checkout container's environment: no token of any kind."""
    return [f"LVMH_CLONE_URL={clone_url}", f"LVMH_BRANCH={branch or ''}", "GIT_TERMINAL_PROMPT=0"]


def docker_url_of(config: Any, env: Any = None) -> str:
    """``[lvmh] docker_url`` / ``LVMH_DOCKER_URL``, else ``LVMH_CONTAINER_DOCKER_SOCK`` (the spec's),
    else ``DOCKER_HOST``, else the default socket."""
    env = os.environ if env is None else env
    sock = env.get("LVMH_CONTAINER_DOCKER_SOCK") or ""
    if sock and "://" not in sock:
        sock = "unix://" + sock
    url = config.frontend("lvmh").docker_url or sock or env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if url.startswith("tcp://"):
        url = "http://" + url[len("tcp://"):]
    return url


def container_host(host: str) -> str:
    """How a worker container reaches a daemon listening on ``host``.

    Loopback and wildcard addresses mean the engine's host: ``host.docker.internal``
    (mapped with ``ExtraHosts: host-gateway``). A daemon bound to loopback only is not
    reachable from containers: set ``[lvmh] agent_url`` (or listen on another address).
    """
    if not host or host in ("0.0.0.0", "::", "[::]") or is_loopback(host):
        return "host.docker.internal"
    return host


def agent_ws_url(url: str) -> str:
    """``http(s)://host:port`` or ``ws(s)://host:port[/agent/ws]`` -> the plugin's ``ws(s)://.../agent/ws``."""
    for a, b in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(a):
            url = b + url[len(a):]
    scheme, sep, rest = url.partition("://")
    if sep and "/" not in rest.rstrip("/"):
        url = url.rstrip("/") + "/agent/ws"
    return url



def _tar_context(root: Path) -> bytes:
    """The build context as a gzipped tar, without VCS and dependency directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _CONTEXT_SKIP)
            for name in sorted(filenames):
                full = Path(dirpath) / name
                if full.is_symlink() or not full.is_file():
                    continue
                tar.add(str(full), arcname=str(full.relative_to(root)), recursive=False)
    return buf.getvalue()
