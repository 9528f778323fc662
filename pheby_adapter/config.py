"""Pheby's part of the configuration (docs/usage.md, "The config file"): its ``[pheby]`` keys, its
port, the form of its URL and its shared secret. The host assembles it with the core's
(``cli/config.py``); ``server.py`` and ``pacing.py`` read the keys (``Config.section``).
"""

from __future__ import annotations

from bridge_core.kit.config import FrontEndPart, Secret
from bridge_core.kit.remote import PublicForm

SECRET = Secret(file="pheby_secret", env="PHEBY_SECRET", label="Pheby secret")

PART = FrontEndPart(
    name="pheby",
    label="Pheby",
    port=8620,
    keys=("port", "hello_timeout", "heartbeat", "rate", "burst", "outbox_items", "draft_interval_ms",
          "draft_min_interval_ms", "draft_max_interval_ms", "draft_full_chars"),
    public=PublicForm(schemes=("ws", "wss"), path="/ws"),
    secret=SECRET,
)
