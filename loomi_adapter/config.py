"""Loomi's part of the configuration (docs/usage.md, "The config file"): its ``[loomi]`` keys, its
port, the form of its URL (the QR code carries it, with the certificate pin ``--public-fp``),
and its settings. The host assembles it with the core's (``cli/config.py``); ``server.py``
reads the other keys (``Config.section``).
"""

from __future__ import annotations

import attrs

from bridge_core.kit.config import FrontEndPart, Source
from bridge_core.kit.remote import PublicForm


@attrs.define
class LoomiSettings:
    pair_ttl: float = 300.0  # s a pairing token (the QR code) stays valid


def parse(src: Source) -> LoomiSettings:
    return LoomiSettings(pair_ttl=src.num("loomi_pair_ttl", ("loomi", "pair_ttl"), 300.0))


PART = FrontEndPart(
    name="loomi",
    label="Loomi",
    port=8621,
    keys=("port", "allow_insecure_bind", "pair_ttl", "public_url", "hello_timeout", "ping_interval", "pong_timeout",
          "max_missed_pongs", "outbox_items", "rate", "burst"),
    public=PublicForm(schemes=("ws", "wss"), path="/ws"),
    parse=parse,
    pinned=True,  # --public-fp loomi=HEX: the certificate pin its QR code carries
    url_flag=True,  # --loomi-public-url, from before --public-url
    insecure_bind_key="allow_insecure_bind",  # [loomi] allow_insecure_bind: every front end's, from before
)
