"""A connection that never sends a complete HTTP request is closed (no descriptor held for aiohttp's hour)."""

from __future__ import annotations

import asyncio

from bridge_core.kit.frontend import FrontEnd


async def test_idle_and_slowloris_connections_are_closed(service_factory, monkeypatch):
    monkeypatch.setattr(FrontEnd, "keepalive_timeout", 0.5)
    svc = await service_factory(adapters=("pheby", "loomi"))

    async def held(port: int, data: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if data:
            writer.write(data)
        try:
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()

    for port in svc.ports.values():
        assert await held(port, b"") == b""  # closed by the server, nothing sent
        assert await held(port, b"GET /ws HTTP/1.1\r\nHost: x\r\n") == b""  # headers never completed


def test_default_is_short():
    assert 0 < FrontEnd.keepalive_timeout <= 15
