"""The bridge's only use of aiohttp internals (bridge_core/aiohttp_compat.py) against the installed aiohttp.

These fail loudly when an aiohttp release changes what the batched frame
writer relies on: then either adapt aiohttp_compat or keep the pin in
pyproject.toml below that release.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from bridge_core import aiohttp_compat
from bridge_core.frontend import STORE_KEY, ws_text_sender


def test_the_installed_aiohttp_has_what_the_batched_writer_needs():
    assert aiohttp_compat.check_internals() == [], f"aiohttp {aiohttp.__version__} changed its internals"


async def _serve(handler, keys=None):
    app = web.Application()
    for k, v in (keys or {}).items():
        app[k] = v
    app.router.add_get("/ws", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


async def test_a_batch_goes_out_as_exact_text_frames_in_one_write():
    frames = [b'{"n":1}', b'{"s":"' + b"x" * 200 + b'"}', b'{"s":"' + b"y" * 70000 + b'"}', b"{}"]
    seen: dict = {}
    done = asyncio.get_running_loop().create_future()

    async def handler(request):
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        seen["missing"] = aiohttp_compat.check_internals(ws)
        seen["ready"] = aiohttp_compat.batch_ready(ws)
        transport = request.transport
        writes = []
        original = transport.write

        def counting(data):
            writes.append(len(data))
            return original(data)

        transport.write = counting
        try:
            await ws_text_sender(ws, request).many(frames)
        finally:
            transport.write = original
        seen["writes"] = writes
        await done
        await ws.close()
        return ws

    runner, port = await _serve(handler)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                got = [await ws.receive(timeout=5) for _ in frames]
                done.set_result(None)
        assert [m.type for m in got] == [aiohttp.WSMsgType.TEXT] * len(frames)
        assert [m.data.encode() for m in got] == frames
        assert seen["missing"] == [], f"aiohttp {aiohttp.__version__} changed its WebSocket writer"
        assert seen["ready"] is True, "the batched writer fell back to send_frame on a plain socket"
        assert len(seen["writes"]) == 1
    finally:
        if not done.done():
            done.set_result(None)
        await runner.cleanup()


async def test_the_sender_takes_the_store_from_the_handlers_request():
    marker = object()
    seen = {}

    async def handler(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        seen["store"] = ws_text_sender(ws, request).durable_store()
        seen["none"] = ws_text_sender(ws).durable_store()
        await ws.close()
        return ws

    runner, port = await _serve(handler, {STORE_KEY: marker})
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                await ws.receive(timeout=5)
        assert seen == {"store": marker, "none": None}
    finally:
        await runner.cleanup()
