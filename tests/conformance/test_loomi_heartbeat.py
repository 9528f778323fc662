"""Loomi §1 heartbeat: the server pings; a ping is missed when no pong came within the deadline;
three misses in a row close the socket; a pong resets the count; the client may ping too.

The spec's 25 s / 10 s are the defaults; here the ``[loomi]`` config section shortens them so the
scenarios take a second or two.
"""

from __future__ import annotations

import pytest

from .loomi_client import LoomiApp, close_all


@pytest.fixture(autouse=True)
async def _close_apps():
    yield
    await close_all()


FAST = """
[loomi]
ping_interval = 0.25
pong_timeout = 0.15
"""


@pytest.fixture
def fast(server_factory):
    return server_factory(config=FAST)


async def paired(server) -> LoomiApp:
    app = LoomiApp()
    await app.pair(server.pair_payload())
    return app


async def test_a_device_that_stops_ponging_is_closed_after_three_misses(fast):
    app = await paired(fast)
    app.answer_pings = False
    await app.until(lambda: app.close_code is not None, timeout=10)
    assert app.pings == 3  # closed at the third miss, before a fourth ping
    errors = app.find("error")
    assert [e["payload"]["code"] for e in errors] == ["heartbeat_timeout"] and errors[0]["payload"]["fatal"] is True
    assert app.close_code == 4008
    # and it may come back
    app.answer_pings = True
    await app.connect(fast.url("loomi", "/ws", scheme="ws"))
    assert app.connected
    await app.disconnect()


async def test_a_device_that_pongs_stays(fast):
    app = await paired(fast)
    await app.until(lambda: app.pings >= 8, timeout=10)
    assert app.connected and not app.find("error")
    await app.disconnect()


async def test_a_pong_resets_the_count_of_misses(fast):
    app = await paired(fast)
    app.answer_pings = lambda n: n % 3 == 0  # two misses, an answer, two misses, ...
    await app.until(lambda: app.pings >= 9, timeout=10)
    assert app.connected and not app.find("error")
    await app.disconnect()


async def test_the_client_may_ping(server):
    app = await paired(server)
    await app.send("ping")
    pong = (await app.until(lambda: app.pongs))[0]
    assert pong["type"] == "pong" and pong["payload"] == {} and pong["v"] == 1
    assert pong["seq"] > app.hellos[-1]["seq"] and pong["event_id"] == f"e_{pong['seq']}"
    assert app.connected
    await app.disconnect()
