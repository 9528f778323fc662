"""A Loomi hello's claim of a device waits a bounded time for the device's row lock (loomi_adapter/
cluster.py ``CLAIM_LOCK_WAIT``, PostgreSQL's ``lock_timeout``: bridge_core/scale/pgstore.py
``lock_bounded``; docs/scale-out.md "Fenced ownership"), over real sockets to `agent-bridge serve`
processes on a private PostgreSQL and Redis.

The device's previous owner, stopped (SIGSTOP) inside a batch that guards the device's epoch, holds its
row lock for as long as it is stopped. Here the test's own transaction holds that lock, as such a
batch does (the guard's ``UPDATE ... SET epoch=epoch``), for as long as the test wants: the hello to
another node is answered with the spec's ``error {code: "unavailable", fatal: true}`` once the bound
has passed, that node's other devices go on meanwhile, and the phone's retry once the lock is gone
is a plain hello.ok (no ``truncated``, nothing twice). On the code before the bound the hello waits
for the lock, unanswered (and with it every write of that node). A wrong credential never reaches the
claim: refused at once, lock or not.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.conformance.loomi_client import HelloRefused, LoomiApp, close_all
from tests.scale.phones import loomi_run as _run, loomi_ws as _ws, pair_qr as _qr
from tests.scale.test_fenced_devices import _whole


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="loomi")


class RowLock:
    """A transaction of the test's own holding a device's row lock, as a stopped owner's guard does."""

    def __init__(self, store_url: str):
        self.url = store_url
        self.conn = None

    async def take(self, device_id: str) -> None:
        self.conn = await psycopg.AsyncConnection.connect(self.url)
        cur = await self.conn.execute("UPDATE loomi_devices SET epoch=epoch WHERE device_id=%s RETURNING epoch",
                                      (device_id,))  # fmt: skip
        assert await cur.fetchone() is not None

    async def release(self) -> None:
        if self.conn is not None:
            await self.conn.rollback()
            await self.conn.close()
            self.conn = None


async def test_a_hello_waiting_for_a_locked_device_row_is_answered_unavailable(nodes, engines):
    n1, n2 = nodes("n1", "n2")
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    lock = RowLock(engines[0])
    try:
        await phone.pair(dict(await _qr(n1), url=_ws(n1)))
        await other.pair(dict(await _qr(n2), url=_ws(n2)))
        runs = {await _run(phone, "on the first node"): "on the first node"}

        await lock.take(phone.device_id)
        with pytest.raises(HelloRefused) as refused:
            await phone.connect(_ws(n2))  # n2's claim waits for the row lock, at most the bound
        payload = refused.value.frame["payload"]
        assert refused.value.frame["type"] == "error", refused.value.frame
        assert payload["code"] == "unavailable" and payload["fatal"] is True, payload
        assert refused.value.code == 1008
        # the attacker's side: a wrong credential is refused at once, the lock never reached
        intruder = LoomiApp("Intruder")
        intruder.url = _ws(n2)
        with pytest.raises(HelloRefused) as wrong:
            await intruder.open_with({"protocol_version": 1, "device_id": phone.device_id,
                                     "credential": "x" * 43, "device_info": {}})  # fmt: skip
        assert wrong.value.frame["payload"]["code"] == "unauthorized", wrong.value.frame
        # n2's writer was not held with the claim: its other device goes on while the lock is held
        text = "from the other phone while the row is locked"
        runs_other = {await _run(other, text): text}

        await lock.release()  # the stopped owner continued: the phone's retry is a plain hello
        ok = await phone.connect(_ws(n2))
        assert ok["payload"]["truncated"] is False and ok["seq"] == phone.processed, ok
        text = "on the second node"
        runs[await _run(phone, text)] = text
        await phone.until(lambda: all(phone.completed(r) for r in {**runs, **runs_other}))
        _whole(phone, {**runs, **runs_other})
        _whole(other, runs_other)
        assert "Traceback" not in n1.stderr() + n2.stderr()
    finally:
        await lock.release()
        await close_all()
