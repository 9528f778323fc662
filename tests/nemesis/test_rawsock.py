"""rawsock.transport_of still finds the connection under aiohttp's client WebSocket, and the
nemesis's cuts built on it reach a real server as cuts (no close frame; a frame cut short)."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from .clients import abort, half_text_frame
from .rawsock import transport_of


async def _server(seen: asyncio.Queue):
    async def handle(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await seen.put(msg.type)
        await seen.put(("closed", ws.close_code))
        return ws

    app = web.Application()
    app.router.add_get("/ws", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def test_a_cut_mid_frame_and_a_reset_reach_the_server_without_a_close_frame():
    seen: asyncio.Queue = asyncio.Queue()
    runner, port = await _server(seen)
    try:
        async with aiohttp.ClientSession() as session:
            for half in (half_text_frame("hello there, server"), None):
                ws = await session.ws_connect(f"http://127.0.0.1:{port}/ws")
                assert isinstance(transport_of(ws), asyncio.Transport)
                await ws.send_str("whole")
                assert await asyncio.wait_for(seen.get(), 10) == aiohttp.WSMsgType.TEXT
                abort(ws, half)
                got = await asyncio.wait_for(seen.get(), 10)
                while got == aiohttp.WSMsgType.ERROR:  # a frame cut short: an error, then the end
                    got = await asyncio.wait_for(seen.get(), 10)
                assert got[0] == "closed" and got[1] != 1000, got  # never a clean close from the client
                await ws.close()
    finally:
        await runner.cleanup()
