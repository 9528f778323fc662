"""The browser socket ``/ws`` (docs/lvmh.md, Transport 3): bytes only.

On open: the session list and the spawn jobs; then each frame goes through the connection's
``protocol.BrowserProtocol`` (one subscription at a time); a subscribe gets the open message's text
so far (``inflight``) and the session's events from then on (stream.py).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from bridge_core.kit.frontend import ws_text_sender
from bridge_core.kit.outbox import Outbox

from . import codec
from .errors import error_frame
from .listing import EXT_LIST_DELTAS
from .plugin_ws import HEARTBEAT, close_later
from .protocol import BrowserProtocol, Reject, Subscribe
from .stream import BrowserConn

if TYPE_CHECKING:
    from .host import Host


async def browser_ws(fe: "Host", sockets: set, request: web.Request) -> web.StreamResponse:
    ws = web.WebSocketResponse(max_msg_size=codec.MAX_BROWSER_FRAME, heartbeat=HEARTBEAT, compress=False)
    await ws.prepare(request)
    conn = BrowserConn(
        ws, Outbox(ws_text_sender(ws, request), on_overflow=lambda: close_later(fe, ws, b"slow consumer; reconnect")),
        deltas=EXT_LIST_DELTAS in request.query.get("ext", "").split(","),
    )
    writer = fe.tasks.spawn(conn.outbox.run(), name="lvmh-browser-writer")
    state = BrowserProtocol()
    stream = fe.stream
    sockets.add(ws)
    stream.add(conn)
    conn.outbox.put(fe.listing.first_frame(conn.deltas), key="session_list")
    jobs = stream.spawn_jobs()
    if jobs is not None:
        conn.outbox.put(codec.spawn_status_frame(jobs), key="spawn_status")
    try:
        async for msg in ws:
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                continue
            action = state.receive(msg.data)
            if type(action) is Subscribe:
                stream.subscribe(conn, action.session_id)
                inflight = fe.book.inflight.frame(action.session_id)
                if inflight is not None:
                    conn.outbox.put(inflight)
            elif type(action) is Reject:
                if action.answer:
                    conn.outbox.put(error_frame(action.message, action.code))
            else:
                stream.unsubscribe(conn, action.session_id)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        stream.remove(conn)
        sockets.discard(ws)
        conn.outbox.close()
        writer.cancel()
    return ws
