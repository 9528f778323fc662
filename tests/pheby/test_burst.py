"""A burst of frames is answered frame by frame (pong or rate_limited) as fast as the client reads, never by
overflowing the client's outbox with its own answers (which would close it as a slow consumer)."""

from __future__ import annotations

import json

from tests.pheby.client import PhebyClient


async def test_a_burst_of_pings_is_answered_not_dropped(service_factory):
    svc = await service_factory(adapters=("pheby",))
    client = await PhebyClient.connect(svc.ports["pheby"])
    try:
        n = 6000  # more than the 2048-frame outbox
        ping = json.dumps({"type": "ping"})
        for _ in range(n):
            await client.ws.send_str(ping)
        kinds = {"pong": 0, "rate_limited": 0}
        for _ in range(n):
            f = await client.recv(10)
            if f["type"] == "pong":
                kinds["pong"] += 1
            else:
                assert f["type"] == "error" and f["error"]["code"] == "rate_limited", f
                kinds["rate_limited"] += 1
        assert kinds["pong"] >= 200 and kinds["rate_limited"] > 0
        assert not client.ws.closed
        assert svc.frontends["pheby"].stats["slow_disconnects"] == 0
    finally:
        await client.close()
