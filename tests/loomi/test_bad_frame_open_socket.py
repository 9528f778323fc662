"""On an open socket, one bad frame (here a wrong envelope version) is answered with a non-fatal error and the
socket stays open: a fatal error is always followed by a close, and this one is not."""

from __future__ import annotations

import json

from tests.loomi.helpers import pair


async def test_wrong_version_on_an_open_socket_is_not_fatal(loomi):
    client, _ = await pair(loomi)
    try:
        for v in (2, None, "1"):
            await client.ws.send_str(json.dumps({"v": v, "type": "ping", "payload": {}}))
            err = await client.recv_type("error")
            assert err["payload"]["code"] == "version_mismatch" and err["payload"]["fatal"] is False, err
        await client.send("ping")
        assert (await client.recv_type("pong"))["type"] == "pong"
    finally:
        await client.ws.close()
        await client.http.close()
