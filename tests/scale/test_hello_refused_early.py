"""A hello refused before it is authenticated gets its ``error`` before the close, even while the node's writes
wait (the spec: a fatal error frame, then the close). tests/nemesis/test_fenced_owner.py failed 3 runs in 5
under two spinners with a bare close 1008: the hello the new owner could not serve yet (the device's row held by
its stopped owner for 2 s, ``unavailable``) put its error in the outbox, which lets a frame leave only once this
node's writes queued before it have committed (the claim had held the writer those 2 s) and is written by its
own task; the close followed 0.3 s later without it. That error carries seq 0 and nothing stored: it is written
at once now (loomi_adapter/server.py ``_fatal``).

In-process, over a real socket: the store's commits are stalled behind a write of the test's (as
tests/loomi/test_replay.py does), and the refusal is a wrong credential's (the same path as ``unavailable``)."""

from __future__ import annotations

import threading

import pytest

from tests.loomi.helpers import Client, pair


@pytest.fixture
async def loomi(service_factory):
    return await service_factory(adapters=("loomi",))


async def test_a_refused_hello_gets_its_error_before_the_close_while_the_store_is_busy(loomi):
    c, creds = await pair(loomi)
    await c.close()
    store = loomi.bridge.store
    gate = threading.Event()
    store.submit(lambda conn: gate.wait(30))  # a write every frame queued from now on waits for
    try:
        assert store.processed < store.ticket
        wrong = await Client.connect(loomi)
        await wrong.send("hello", {"protocol_version": 1, "device_id": creds["device_id"], "credential": "x" * 43,
                                   "device_info": {"model": "Pixel 9", "os": "Android 16", "app_version": "1.0"}})
        frames, code = await wrong.closed()
        assert [(f["type"], f["payload"]["code"], f["seq"]) for f in frames] == [("error", "unauthorized", 0)], frames
        assert code == 4001
    finally:
        gate.set()
    await store.aflush()
    c2 = await Client.connect(loomi)  # the legitimate path beside it
    ok = await c2.hello(device_id=creds["device_id"], credential=creds["credential"])
    assert ok["type"] == "hello.ok", ok
    await c2.close()
