"""Request helpers of every lvmh HTTP route (REST, conversations, push, spawn, GitLab): the one body
reader, the command ``Origin`` a request carries into the bridge, and the browser ``Origin`` rule
(docs/security.md). Small and below every route module, so none of them imports another for these.
"""

from __future__ import annotations

from typing import Any, Optional

from aiohttp import web
from yarl import URL

from bridge_core.kit.frontend import peer_host
from bridge_core.model import commands as cmd
from bridge_core.model.errors import TooLarge

from . import codec


def command_origin(request: web.Request) -> cmd.Origin:
    return cmd.Origin(surface="lvmh", connection=peer_host(request), decided_by="remote")


async def read_json(request: web.Request, *, allow_empty: bool = False) -> dict:
    """The one reader of REST bodies (sessions, decisions, spawn, GitLab): a JSON object or a
    ``BridgeError`` answered as 400 (not JSON, not an object, too deep) or 413 (over the
    server's body limit). Never a 500. The body is judged by what it is, whatever its
    declared Content-Type (``curl -d`` sends JSON as a form): anything else is not JSON."""
    try:
        data = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise TooLarge(f"Body larger than {codec.MAX_BODY} bytes") from None
    return codec.json_body(data, allow_empty=allow_empty)


# --- Origin ---------------------------------------------------------------------------------------


def public_url(config: Any) -> Optional[str]:
    """The lvmh public URL (``https://lvmh.example.com``), when configured: the one hook the
    Origin check (and anything else that needs where browsers reach lvmh) reads.

    ``config.public_urls["lvmh"]`` (``--public-url lvmh=URL``) when the config has it, else
    ``[lvmh] public_url`` in the config file.
    """
    urls = getattr(config, "public_urls", None)
    if isinstance(urls, dict) and urls.get("lvmh"):
        return str(urls["lvmh"])
    section = config.section("lvmh") if hasattr(config, "section") else {}
    value = section.get("public_url")
    return str(value) if value else None


def _origin_tuple(url: str) -> Optional[tuple[str, str, int]]:
    try:
        u = URL(url)
    except (ValueError, TypeError):
        return None
    scheme = (u.scheme or "").lower()
    if scheme in ("ws", "wss"):
        scheme = "http" if scheme == "ws" else "https"
    if scheme not in ("http", "https") or not u.host:
        return None
    port = u.port
    if port is None:
        return None
    return scheme, u.host.lower(), port


def origin_allowed(origin: str, scheme: str, host_header: Optional[str], public: Optional[str]) -> bool:
    """A present ``Origin`` is allowed when it is the origin the request was sent to
    (``scheme://Host``) or the public URL's origin."""
    got = _origin_tuple(origin.strip())
    if got is None:
        return False
    if host_header and got == _origin_tuple(f"{scheme}://{host_header.strip()}"):
        return True
    return bool(public) and got == _origin_tuple(public)


def check_origin(request: web.Request, public: Optional[str]) -> Optional[str]:
    """None when the request may go on; else why its ``Origin`` is refused."""
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    if origin_allowed(origin, request.scheme, request.headers.get("Host"), public):
        return None
    return "Origin not allowed: a browser may reach lvmh only from its own address"
