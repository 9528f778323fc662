"""A socket that floods frames is answered with rate_limited (token bucket: 100/s, bursts of 200); pongs are exempt."""

from __future__ import annotations

import orjson

from tests.loomi.helpers import pair


async def test_a_burst_of_frames_is_answered_with_rate_limited(loomi):
    client, _ = await pair(loomi)
    try:
        burst = 1000
        for i in range(burst):
            await client.ws.send_str(orjson.dumps({"v": 1, "type": "ping", "payload": {}}).decode())
        for _ in range(50):  # answers to the server's pings are never limited
            await client.ws.send_str(orjson.dumps({"v": 1, "type": "pong", "payload": {}}).decode())
        await client.ws.send_str("not json at all")
        answers = []
        while len(answers) < burst + 1:
            f = await client.recv()
            if f["type"] in ("pong", "error"):
                answers.append(f)
        pongs = [f for f in answers if f["type"] == "pong"]
        limited = [f for f in answers if f["type"] == "error" and f["payload"]["code"] == "rate_limited"]
        # every frame answered, the garbage one too (invalid_json once the bucket has refilled a token)
        garbage = [f for f in answers if f["type"] == "error" and f["payload"]["code"] == "invalid_json"]
        assert len(pongs) + len(limited) + len(garbage) == burst + 1 and len(garbage) <= 1
        assert 200 <= len(pongs) < burst
        assert limited and all(not f["payload"]["fatal"] for f in limited)
        # still open and serving once the bucket refills
        conn = next(iter(loomi.frontends["loomi"].registry.devices.values())).conn
        assert conn.proto.rate_limited == len(limited)
    finally:
        await client.ws.close()
        await client.http.close()
