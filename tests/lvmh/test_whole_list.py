"""The spec's whole session list, built from encoded entries (lvmh_adapter/listing.py, ``encoded``).

A spec client's ``session_list`` frame and ``GET /api/sessions`` carry every session. They are
built one entry at a time (no dict per session held at once), the socket's frame encoded once for
every spec client and let go a second later, the REST answer written in pieces. The bytes are the
ones the straightforward build gives (every entry's dict, sorted, encoded in one ``orjson.dumps``),
compared here over real sockets against that build.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import tracemalloc

import aiohttp
import orjson

from lvmh_adapter import heap
from lvmh_adapter import listing as listing_mod
from tests.conftest import LVMH_TOKEN
from tests.lvmh.helpers import AUTH, session_snapshot
from tests.waiting import until

PI_ON = "01a22693-a4c3-719c-9d1e-0000000000b1"
PI_OFF = "01a22693-a4c3-719c-9d1e-0000000000b2"


def _reference(listing) -> list:
    """The spec's list built the plain way: every entry's dict, the latest activity first, ties as listed."""
    views = [v for v in (listing.view(sid) for sid in listing.ids()) if v is not None]
    views.sort(key=lambda s: (s.get("lastEventAt") or s.get("startedAt") or 0), reverse=True)
    return views


async def _raw_get(port: int, path: str, method: str = "GET", headers: dict = AUTH) -> tuple[int, dict, bytes]:
    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"http://127.0.0.1:{port}{path}", headers=headers) as resp:
            return resp.status, dict(resp.headers), await resp.read()


async def _spec_socket(http: aiohttp.ClientSession, port: int):
    return await http.ws_connect(f"http://127.0.0.1:{port}/ws?token={LVMH_TOKEN}", max_msg_size=0)


async def _next_list(ws) -> bytes:
    while True:
        msg = await ws.receive(timeout=10)
        data = msg.data.encode() if isinstance(msg.data, str) else msg.data
        if data.startswith(b'{"type":"session_list"'):
            return data


async def _fill(lvmh, plugins, n: int) -> None:
    for i in range(n):
        lvmh.bridge.create_conversation(f"chat {i} {'alpha' if i % 4 == 0 else 'beta'}")
    off = plugins(PI_OFF, session=session_snapshot(PI_OFF, name="pi alpha gone", startedAt=1_600_000_000_000))
    await off.connect()
    await off.event("message_end", message={"role": "assistant", "content": [{"type": "text", "text": "bye"}]})
    await off.close()
    on = plugins(PI_ON, session=session_snapshot(PI_ON, name="pi here"))
    await on.connect()
    await on.event("message_end", message={"role": "assistant", "content": [{"type": "text", "text": "é ✓ \"q\""}]})


async def test_the_whole_list_is_the_plain_builds_bytes_over_the_socket_and_rest(lvmh, plugins):
    await _fill(lvmh, plugins, 240)
    port = lvmh.ports["lvmh"]
    listing = lvmh.frontends["lvmh"].listing
    # its event stored, then taken into the core (an lvmh event is acted on once it is durable): the list settled
    await until(lambda: any(s["id"] == PI_ON and s["online"] and s["status"] == "running" for s in _reference(listing)),
                what="the pi session online, its message taken in")
    async with aiohttp.ClientSession() as http:
        spec = await _spec_socket(http, port)
        frame = await _next_list(spec)
        expected = _reference(listing)
        assert len(expected) == 242
        assert frame == orjson.dumps({"type": "session_list", "sessions": expected})

        status, headers, body = await _raw_get(port, "/api/sessions")
        assert status == 200 and headers["Content-Type"].startswith("application/json")
        assert body == orjson.dumps(expected) and int(headers["Content-Length"]) == len(body)
        assert len(body) > 64 * 1024  # written in several pieces

        # the search of the bridge's conversations: the same entries, those that match, same bytes
        status, _, found = await _raw_get(port, "/api/conversations?q=ALPHA")
        wanted = [s for s in expected if "alpha" in (s.get("name") or "").casefold()]
        assert status == 200 and found == orjson.dumps(wanted) and len(wanted) == 61
        status, _, none = await _raw_get(port, "/api/conversations?q=nothing-like-it")
        assert (status, none) == (200, b"[]")

        # HEAD: the length, no body
        status, headers, empty = await _raw_get(port, "/api/sessions", method="HEAD")
        assert status == 200 and empty == b""

        # a change: every spec client gets the new list, and one connecting now the same bytes
        lvmh.bridge.create_conversation("the newest")
        changed = await _next_list(spec)
        assert changed == orjson.dumps({"type": "session_list", "sessions": _reference(listing)})
        assert b'"name":"the newest"' in changed and len(orjson.loads(changed)["sessions"]) == 243
        late = await _spec_socket(http, port)
        assert await _next_list(late) == changed
        await late.close()
        await spec.close()


async def test_no_credential_no_list(lvmh, plugins):
    await _fill(lvmh, plugins, 3)
    port = lvmh.ports["lvmh"]
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
        status, _, body = await _raw_get(port, "/api/sessions", headers=headers)
        assert status == 401 and b"pi here" not in body and b"chat 0" not in body
    status, _, body = await _raw_get(port, "/api/sessions")  # the legitimate reader, beside it
    assert status == 200 and b"pi here" in body


async def test_the_encoded_frame_is_let_go_once_sent(lvmh, plugins):
    """Shared by the spec clients of one second, then dropped, and the heap trimmed after it: the server does
    not hold megabytes at rest."""
    await _fill(lvmh, plugins, 50)
    listing = lvmh.frontends["lvmh"].listing
    async with aiohttp.ClientSession() as http:
        spec = await _spec_socket(http, lvmh.ports["lvmh"])
        frame = await _next_list(spec)
        assert len(orjson.loads(frame)["sessions"]) == 52
        trims = heap.trims
        await until(lambda: listing._full_cache is None, timeout=listing_mod.CACHE_SECONDS + 5,
                    what="the encoded whole list let go")
        if heap.trim():  # glibc: the heap is trimmed once it has left
            await until(lambda: heap.trims >= trims + 2, timeout=listing_mod.TRIM_AFTER_SECONDS + 5,
                        what="the heap trimmed after the whole list")
        lvmh.bridge.create_conversation("one more")  # still built anew on a change
        assert len(orjson.loads(await _next_list(spec))["sessions"]) == 53
        await spec.close()


async def test_building_the_whole_list_holds_its_bytes_not_a_dict_per_session(lvmh, plugins):
    """The peak of one build, traced: about the frame twice (its entries, then the frame: 2.1 here), where the
    plain build held every entry's dict and orjson's oversized buffer (3.9 times the frame here)."""
    await _fill(lvmh, plugins, 2000)
    listing = lvmh.frontends["lvmh"].listing
    listing._full_cache = None
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        frame = listing.spec_frame()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(orjson.loads(frame)["sessions"]) == 2002
    assert peak < 2.5 * len(frame), (peak, len(frame))


async def test_a_reader_going_away_mid_list_is_no_error_and_the_next_gets_it_whole(lvmh, plugins, caplog):
    """A client that asks for the whole list and resets its connection while the list is still being written (a
    hardening fuzzer does): the server logs no error and the next reader gets the list whole."""
    import socket

    await _fill(lvmh, plugins, 3000)
    port = lvmh.ports["lvmh"]
    for k in range(20):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # the server's writes wait on this reader
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, f"GET /api/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}"
                                      f"\r\n\r\n".encode())
        if k % 2:  # half the readers go before the answer starts, half once it has
            assert (await loop.sock_recv(sock, 1024)).startswith(b"HTTP/1.1 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, no close handshake
        sock.close()
    status, _, body = await _raw_get(port, "/api/sessions")
    assert status == 200 and len(orjson.loads(body)) == 3002
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
