"""lvmh's part of the configuration (docs/usage.md, "The config file"): its ``[lvmh]`` keys, its
port, the form of its URL (the web UI at the root of its origin), its token and its settings.
The host assembles it with the core's (``cli/config.py``); ``server.py``, ``spawn.py`` and
``request.py`` read the other keys (``Config.section``).
"""

from __future__ import annotations

from typing import Optional

import attrs

from bridge_core.kit.config import FrontEndPart, Secret, Source
from bridge_core.kit.remote import PublicForm
from bridge_core.model.errors import ConfigError

DEFAULT_WORKER_QUOTA_MB = 64.0  # [lvmh] worker_quota_mb (docs/security.md, "What a worker may store")
SECRET = Secret(file="lvmh_token", env="LVMH_TOKEN", label="lvmh token")


@attrs.define
class LvmhSettings:
    gitlab_url: str = "https://gitlab.com"
    docker_url: Optional[str] = None  # unix:///var/run/docker.sock or http://host:port
    worker_quota_mb: float = DEFAULT_WORKER_QUOTA_MB  # events a plugin session may store (0: no limit)


def parse(src: Source) -> LvmhSettings:
    quota = src.num("worker_quota_mb", ("lvmh", "worker_quota_mb"), DEFAULT_WORKER_QUOTA_MB)
    if not quota >= 0:
        raise ConfigError("lvmh.worker_quota_mb must be a number of megabytes, 0 for no limit")
    gitlab = src.env.get("LVMH_GITLAB_URL") or src.pick("gitlab_url", "lvmh", "gitlab_url", default="https://gitlab.com")
    docker = src.env.get("LVMH_DOCKER_URL") or src.pick("docker_url", "lvmh", "docker_url")
    return LvmhSettings(gitlab_url=str(gitlab), docker_url=docker, worker_quota_mb=quota)


PART = FrontEndPart(
    name="lvmh",
    label="lvmh",
    port=8686,
    keys=("port", "public_url", "gitlab_url", "docker_url", "worker_quota_mb", "plugin_return_seconds", "worker_image",
          "git_image", "models_json", "models_json_target", "worker_context", "worker_dockerfile", "agent_url",
          "network", "clone_user", "clone_timeout", "build_timeout", "max_active_spawns", "job_retention"),
    public=PublicForm(schemes=("http", "https"), path="",
                      root_reason="the web UI is served at the root of its own hostname or port"),
    secret=SECRET,
    parse=parse,
)
