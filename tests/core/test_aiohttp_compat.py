"""The bridge's only use of aiohttp internals (bridge_core/kit/aiohttp_compat.py) against the installed aiohttp.

These fail loudly when an aiohttp release changes what the batched frame
writer relies on: then either adapt aiohttp_compat or keep the pin in
pyproject.toml below that release.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from bridge_core.kit import aiohttp_compat
from bridge_core.kit.frontend import STORE_KEY, ws_text_sender


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


async def _frames_from(handler, count: int, done: asyncio.Future) -> list:
    """Serve ``handler``, read ``count`` frames from it as a client, then let it finish (``done``)."""
    runner, port = await _serve(handler)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"http://127.0.0.1:{port}/ws", max_msg_size=0) as ws:
                got = [await ws.receive(timeout=5) for _ in range(count)]
                done.set_result(None)
        return got
    finally:
        if not done.done():
            done.set_result(None)
        await runner.cleanup()


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

    got = await _frames_from(handler, len(frames), done)
    assert [m.type for m in got] == [aiohttp.WSMsgType.TEXT] * len(frames)
    assert [m.data.encode() for m in got] == frames
    assert seen["missing"] == [], f"aiohttp {aiohttp.__version__} changed its WebSocket writer"
    assert seen["ready"] is True, "the batched writer fell back to send_frame on a plain socket"
    assert len(seen["writes"]) == 1


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


async def test_batched_writes_keep_aiohttps_buffered_count():
    """The count aiohttp's flow control reads (``_output_size``) grows with a batched write at least as much
    as aiohttp's own ``send_frame`` makes it grow (at most 8 bytes a frame more: a header counted at its
    largest), and starts again past ``_limit`` as aiohttp's does."""
    from bridge_core.kit.aiohttp_compat import FrameWriter, _writer, write_text_frames

    seen: dict = {}
    done = asyncio.get_running_loop().create_future()

    async def handler(request):
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        w = _writer(ws)
        fw = FrameWriter(ws)
        assert fw.ready()
        frame = b'{"s":"' + b"x" * 100 + b'"}'
        before = w._output_size
        await ws.send_frame(frame, aiohttp.WSMsgType.TEXT)
        seen["theirs"] = w._output_size - before
        before = w._output_size
        fw.write([frame, frame])
        seen["ours"] = w._output_size - before
        before = w._output_size
        seen["one_written"] = fw.write_one(frame)  # the one-frame flush: the same frame, the same count
        seen["one"] = w._output_size - before
        big = b'{"s":"' + b"y" * (w._limit // 4) + b'"}'
        await write_text_frames(ws, [big] * 5)  # past the limit: the count starts again
        seen["after_limit"] = w._output_size
        seen["limit"] = w._limit
        seen["ready"] = fw.ready()
        await done
        await ws.close()
        return ws

    got = await _frames_from(handler, 9, done)
    assert [m.type for m in got] == [aiohttp.WSMsgType.TEXT] * 9
    assert [m.data for m in got[:4]] == ['{"s":"' + "x" * 100 + '"}'] * 4
    assert 2 * seen["theirs"] <= seen["ours"] <= 2 * (seen["theirs"] + 8)
    assert seen["one_written"] is True and seen["theirs"] <= seen["one"] <= seen["theirs"] + 8
    assert seen["after_limit"] == 0 < seen["limit"]
    assert seen["ready"] is True
