"""A Loomi phone's new task whose socket closed before the send's answer: the run every phone got complete
is the store's text on every node, and the node goes on writing (chaos seed 2003,
``transcript_contradicts_client``: phone-3's ``/bench 842 2000`` to n1 waited 5.5 s for its answer and its
socket closed first; phones 1 and 3 got the run's 3,368 chars, and the report said the store held ''. The
checker had never read that conversation: the scenario learned conversations from send answers only, and
now learns them from ``task.created`` too, tests/nemesis/scenario.py ``told_created``). The bridge's side
of that shape, the rule of issue 41 item 2 (the transcript never holds less than what was durably sent):

- the run started, its answer lost (the ``runs`` table locked by the test's own transaction: the answer
  waits for the batch with the run's row while the phone closes its socket): stored as every phone got it;
- the send cancelled with its socket while its new task's write waited (the ``conversations`` table
  locked): the store writer took the cancelled write's result, raised InvalidStateError and ended, and
  the node wrote nothing more (bridge_core/bridge/store.py ``_deliver``); now the task is stored and the
  next send to it runs and is stored.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis."""

from __future__ import annotations

import aiohttp
import psycopg
import pytest

from tests.conformance.loomi_client import LoomiApp
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import PHEBY_SECRET, BridgeProcess, admin_headers_for
from tests.scale.phones import loomi_ws, pair_qr
from tests.waiting import until

BENCH = "/bench 842 2000"  # the seed's run: 842 tokens of 'tok ' at 2000 deltas/s
WAITING = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass"


@pytest.fixture
async def two(serve_nodes, engines):
    """Two nodes, the sender and a watching phone paired on the first, a reading connection."""
    n1, n2 = serve_nodes("n1", "n2", adapters="pheby,loomi")
    sender, watcher = LoomiApp("Sender"), LoomiApp("Watcher")
    reads = await psycopg.AsyncConnection.connect(engines[0], autocommit=True)
    try:
        await sender.pair(dict(await pair_qr(n1), url=loomi_ws(n1)))
        await watcher.pair(dict(await pair_qr(n1), url=loomi_ws(n1)))
        yield n1, n2, sender, watcher, reads
    finally:
        await reads.close()
        await sender.disconnect()
        await watcher.disconnect()


async def _offline(node: BridgeProcess, device_id: str) -> bool:
    """Whether ``node`` has taken the device's socket close (its send's worker cancelled in that same step)."""
    port = node.ports["loomi"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/internal/devices", headers=admin_headers_for(port)) as r:
            devices = (await r.json())["devices"]
    return not any(d["device_id"] == device_id and d["online"] for d in devices)


async def _send_and_close(engines, reads, sender: LoomiApp, table: str, node: BridgeProcess) -> None:
    """The new task's send, its socket closed while its write (and so its answer) waits for ``table``; the
    lock held until ``node`` has taken the close, so the send is cancelled while its write still waits (a
    close read after the write committed is another case: the run starts, test_a_run_whose_answer_...)."""
    held = await psycopg.AsyncConnection.connect(engines[0])
    try:
        await held.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")  # reads go on, the node's writes wait
        await sender.send("session.send", {"request_id": "lost", "text": BENCH})

        async def waiting() -> bool:
            return (await (await reads.execute(WAITING, (table,))).fetchone())[0] > 0

        await until(waiting, 15, f"the node's write waiting for {table}")
        await sender.disconnect()  # the socket closed before the answer
        await until(lambda: _offline(node, sender.device_id), 15, "the node took the socket's close")
    finally:
        await held.rollback()
        await held.close()


async def _stored_as_got(nodes, reads, cid: str, run_id: str, text: str, user: str = BENCH) -> None:
    """Every node's transcript ends with the run's completion as the phones got it; its run row completed."""
    for proc in nodes:
        app = PhebyApp(f"ws://127.0.0.1:{proc.ports['pheby']}/ws", PHEBY_SECRET)
        try:
            await app.connect()
            messages = (await app.open(cid))["messages"]
        finally:
            await app.close()
        assert [(m["role"], m["text"]) for m in messages][-2:] == [("user", user), ("assistant", text)], (
            proc.ports, [(m["role"], len(m["text"])) for m in messages])
    cur = await reads.execute("SELECT status FROM runs WHERE run_id=%s", (run_id,))
    assert await cur.fetchone() == ("completed",)


async def _completed(phone: LoomiApp, timeout: float = 30, **match) -> tuple[str, str, str]:
    done = await phone.wait_for("run.completed", timeout, **match)
    assert done["payload"]["status"] == "completed" and len(done["payload"]["text"]) == 842 * 4, done
    return done["payload"]["run_id"], done["task_id"], done["payload"]["text"]


async def test_a_run_whose_answer_was_lost_is_stored_as_every_phone_got_it(two, engines):
    n1, n2, sender, watcher, reads = two
    await _send_and_close(engines, reads, sender, "runs", n1)
    run_id, cid, text = await _completed(watcher)
    assert watcher.run_text(run_id) == text
    await sender.connect(loomi_ws(n1))  # the send's task and run replayed to the sender
    assert (await _completed(sender, run_id=run_id))[2] == text
    assert not sender.find("ack", request_id="lost")  # its answer never reached it
    await _stored_as_got((n1, n2), reads, cid, run_id, text)


async def test_a_send_cancelled_with_its_socket_leaves_its_node_writing(two, engines):
    n1, n2, sender, watcher, reads = two
    await _send_and_close(engines, reads, sender, "conversations", n1)
    created = await watcher.wait_for("task.created", 30)  # before: never (the node's writer had ended)
    cid = created["task_id"]
    await sender.connect(loomi_ws(n1))
    ack = await sender.request("session.send", {"task_id": cid, "text": BENCH}, timeout=30)
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack["payload"]
    run_id = ack["payload"]["result"]["run_id"]
    _, _, text = await _completed(watcher, run_id=run_id)
    assert (await _completed(sender, run_id=run_id))[2] == text
    assert [f for f in watcher.find("run.started") if f.get("task_id") == cid] == watcher.find(
        "run.started", run_id=run_id)  # the cancelled send started no run: this one is the task's only
    await _stored_as_got((n1, n2), reads, cid, run_id, text)
