"""The lvmh front end: plugin socket ``/agent/ws``, REST ``/api``, browser ``/ws``, web UI ``/``.

This module assembles the parts around the session book (``book``: records, event log, in-flight
text, renderer, without I/O) and runs their lifecycle; it holds no protocol rule:

- ``plugin_ws`` (the plugin socket; its rules in ``protocol``), ``browser_ws`` (the browser socket)
  and ``stream`` (the browsers' fan-out);
- ``guard`` (origin, credential, scope; the ``/api`` error shape), ``rest``, ``conversations``,
  ``push``, and the optional ``spawn`` and ``gitlab`` routes; ``request`` holds their helpers;
- ``plugin_source`` (plugin sessions as a bridge agent source), ``relay`` (the link to the other
  nodes) and ``cutshort`` (runs a restart or a lost plugin left open).

Every lvmh session is a record of the book: plugin sessions (their seq comes from the plugin) and
the bridge's own conversations (their seq is assigned there).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from aiohttp import web

from bridge_core.kit.frontend import FrontEnd

from . import codec, cutshort
from .auth import Authenticator, WorkerCredentials
from .book import SessionBook
from .browser_ws import browser_ws
from .guard import middlewares
from .listing import Listing
from .persistence import EventLog
from .plugin_source import PluginSource
from .plugin_ws import PluginSockets
from .push import push_routes
from .relay import PluginRelay
from .request import public_url
from .stream import EventStream

log = logging.getLogger("agent_bridge.lvmh")

MAX_BODY = codec.MAX_BODY
PLUGIN_RETURN = 60.0  # s a plugin has to come back before the daemon closes its open run (twice its backoff cap)


class LvmhFrontEnd(FrontEnd):
    name = "lvmh"

    def __init__(self, bridge, config):
        super().__init__(bridge, config)
        self.workers = WorkerCredentials(bridge.store)
        self.auth = Authenticator(config.secret("lvmh"), self.workers)
        self.public_url = public_url(config)
        self.book = SessionBook(bridge, EventLog(bridge.store))
        self.listing = Listing(self.book)  # entries, the full list, the list in pages (listing.py)
        self.stream = self.book.browsers = EventStream(self.listing, self.spawn_jobs)
        self.source = self.book.source = PluginSource(self)
        self.relay = self.book.link = PluginRelay(self)  # pi sessions on every node (relay.py)
        self.plugins = PluginSockets(self, self.sockets)
        self.workers.on_revoke(self.plugins.worker_revoked)
        self.on_event = self.book.on_event  # the core's events (book.py)
        self.spawn: Any = None
        self.gitlab: Any = None
        sec = config.section("lvmh") if hasattr(config, "section") else {}
        self.plugin_return = float(sec.get("plugin_return_seconds") or PLUGIN_RETURN)
        self.cluster: Any = None  # several nodes (docs/scale-out.md): set in prepare

    @property
    def log(self) -> EventLog:
        """The session book's event log (tests and tools flush and read it)."""
        return self.book.log

    def plugin_online(self, sid: str) -> bool:
        return self.book.plugin_online(sid)

    def watching(self, conversation_id: str) -> bool:
        """Whether a browser has ``conversation_id`` open now (push: docs/push.md)."""
        return self.stream.subscribed(conversation_id)

    # --- lifecycle ---------------------------------------------------------------------------------

    async def prepare(self) -> None:
        log_ = self.book.log
        await log_.amigrate()
        self.workers.migrated()
        self.cluster = getattr(self.bridge, "cluster", None)
        if self.cluster is not None:
            self.book.seq_base = await log_.cluster_base()
        self.book.registry.restore(log_.load(shared=self.cluster is not None), codec.session_info)
        self.bridge.add_source(self.source)
        self.relay.attach()
        self._load_extensions()

    def _load_extensions(self) -> None:
        try:
            from .gitlab import GitLabClient
        except ImportError:
            GitLabClient = None  # type: ignore[assignment]
        if GitLabClient is not None:
            self.gitlab = GitLabClient(self.bridge.store, self.config.frontend("lvmh").gitlab_url)
        try:
            from .spawn import SpawnManager
        except ImportError:
            SpawnManager = None  # type: ignore[assignment]
        if SpawnManager is not None:
            self.spawn = SpawnManager(self.config, self.bridge.store, on_change=self.spawn_changed,
                                      credentials=self.workers)

    async def start(self, host: str, port: int, ssl_context=None) -> int:
        bound = await super().start(host, port, ssl_context)
        self.book.forget_deleted()  # the bridge has loaded its conversations
        cutshort.restore_open_runs(self)  # runs the previous process left open
        self.relay.start()
        if self.spawn is not None and getattr(self.spawn, "daemon_url", None) is None:
            scheme = "https" if ssl_context is not None else "http"
            shown = f"[{host}]" if ":" in host else host
            self.spawn.daemon_url = f"{scheme}://{shown}:{bound}"
        return bound

    async def stop(self) -> None:
        held = []
        for rec in self.book.records.values():
            if rec.abandon is not None:
                rec.abandon.cancel()
                rec.abandon = None
            conn = rec.conn
            if conn is not None:
                rec.conn = None
                self.book.log.set_online(rec.id, False)
                held.append(rec.id)
        await super().stop()
        self.book.log.flush()
        await self.relay.stopped(held)
        for ext in (self.spawn, self.gitlab):
            close = getattr(ext, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.exception("lvmh: closing %s failed", type(ext).__name__)
        await self.source.stop()

    def build_app(self) -> web.Application:
        from .conversations import Conversations
        from .rest import Rest

        app = web.Application(middlewares=middlewares(self), client_max_size=MAX_BODY)
        rest = Rest(self)
        app.add_routes(rest.routes())
        app.add_routes(Conversations(self).routes())  # the bridge's own conversations (new, rename, delete, search)
        app.add_routes([web.get("/agent/ws", self.plugins.handle), web.get("/ws", self._browser_ws)])
        app.add_routes(push_routes(self))  # /api/push/* and the service worker (lvmh_adapter/push.py)
        for ext in (self.spawn, self.gitlab):
            if ext is not None:
                app.add_routes(ext.routes())
        try:
            from .web import static_routes
        except ImportError:
            static_routes = None  # type: ignore[assignment]
        if static_routes is not None:
            app.add_routes(static_routes())
        app.router.add_route("*", "/api/{tail:.*}", rest.not_found)
        return app

    async def _browser_ws(self, request: web.Request) -> web.StreamResponse:
        return await browser_ws(self, self.sockets, request)

    # --- spawn ---------------------------------------------------------------------------------------

    def spawn_jobs(self) -> Optional[list]:
        if self.spawn is None:
            return None
        try:
            return list(self.spawn.jobs())
        except Exception:
            log.exception("lvmh: spawn job list failed")
            return None

    def spawn_changed(self, jobs: Any = None) -> None:
        """``on_change`` callback of the spawner: ``spawn_status`` to every browser (coalesced per tick)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.stream.spawn_changed()
