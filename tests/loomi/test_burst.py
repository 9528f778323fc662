"""A burst of frames is answered frame by frame (pong or rate_limited) as fast as the device reads, never by
overflowing its outbox with its own answers (which would close it as a slow consumer)."""

from __future__ import annotations

import orjson

from tests.loomi.helpers import pair


async def test_a_burst_of_pings_is_answered_not_dropped(loomi):
    client, _ = await pair(loomi)
    try:
        n = 6000  # more than the 2048-frame outbox
        ping = orjson.dumps({"v": 1, "type": "ping", "payload": {}}).decode()
        for _ in range(n):
            await client.ws.send_str(ping)
        answered = 0
        while answered < n:
            f = await client.recv()
            if f["type"] == "pong" or (f["type"] == "error" and f["payload"]["code"] == "rate_limited"):
                answered += 1
            else:
                assert f["type"] == "ping", f
        assert not client.ws.closed
    finally:
        await client.ws.close()
        await client.http.close()
