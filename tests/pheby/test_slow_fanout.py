"""A client whose outbox overflows mid fan-out never costs the other clients that event."""

from __future__ import annotations

from tests.pheby.client import PhebyClient


async def test_an_overflow_during_fan_out_does_not_skip_later_clients(service_factory):
    svc = await service_factory(adapters=("pheby",))
    port = svc.ports["pheby"]
    fe = svc.frontends["pheby"]
    slow = await PhebyClient.connect(port)  # first in the fan-out order
    fast = await PhebyClient.connect(port)
    try:
        slow_conn = next(iter(fe.conns.values()))
        slow_conn.outbox.max_items = 0  # its next frame overflows: _slow removes it from fe.conns
        await fast.send({"type": "conversation.create", "name": "x", "request_id": "c"})
        frames = []
        while not any(f["type"] == "conversation.updated" for f in frames):
            frames.append(await fast.recv())
        assert slow_conn.id not in fe.conns
        assert fe.stats["slow_disconnects"] == 1
    finally:
        await fast.close()
        await slow.close()
