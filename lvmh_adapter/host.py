"""What the lvmh parts see of their front end (server.LvmhFrontEnd), typed without importing it:
the routes, the sockets, the relay, the source and cutshort are built on it and the front end
assembles them, so none of them imports the module that imports them (no cycle)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:
    from .book import SessionBook


class Host(Protocol):
    bridge: Any  # the core's Bridge
    config: Any
    tasks: Any  # bridge_core TaskSet: every task of the front end
    limiter: Any  # kit.security.AuthLimiter
    auth: Any  # auth.Authenticator
    public_url: Optional[str]  # request.public_url
    counts: Any  # kit.frontend.FrontEndCounts
    port: Optional[int]
    cluster: Any  # several nodes (docs/scale-out.md), else None
    book: "SessionBook"  # records, event log, in-flight text, renderer (book.py)
    listing: Any  # listing.Listing
    stream: Any  # stream.EventStream: the browsers
    relay: Any  # relay.PluginRelay: the link to the other nodes
    source: Any  # plugin_source.PluginSource
    plugins: Any  # plugin_ws.PluginSockets: the plugins' sockets (prompt, abort)
    plugin_return: float  # s a plugin has to come back before its open run is closed (cutshort.py)
