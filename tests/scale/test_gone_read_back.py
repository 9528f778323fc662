"""After events gone for good, a node reads back from the store what they did besides its transcripts
(bridge_core/scale/reload.py, gone.py ``_refresh``; docs/scale-out.md "Catching up"; chaos seed 2018).

Node ``b`` is behind (its reads held) while, on node ``a``, an approval ``b`` saw asked is denied (its run
ends) and a conversation is created with a long run in it; ``a`` keeps its last 2 entries only and Redis loses
its keys: ``b`` gets the rest back from nobody, gone for good. Before, ``b`` only re-read the transcripts it
held: it never learnt of the new conversation (``nodes_disagree``) and kept the approval pending and its run
running for good (``run_not_closed``), and the phone on ``b``, told ``truncated``, fetched a task list without
the new task and with the old one still ``waiting``. Two in-process nodes on a private PostgreSQL and Redis,
the spec-built phone over real sockets."""

from __future__ import annotations

import pytest

from bridge_core.scale import catchup
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.test_bus_catchup import Gate
from tests.scale.test_cluster import _nodes
from tests.scale.test_gone_truncated import _qr
from tests.waiting import until


@pytest.mark.parametrize("after_in", ["the approval's", "the new"])
async def test_a_conversation_and_a_run_end_gone_for_good_are_read_back(service_factory, engines, tmp_path,
                                                                        redis_server, after_in):  # fmt: skip
    """``after_in``: the conversation of the message after the gap (b's gap): in the approval's, its start takes
    the ended run's place on b before the run's end is read back (the decision settled as its run's end says);
    in the new one, b still holds the run running when it reads back (ended as the store says)."""
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        await phone.pair(await _qr(b))
        await other.pair(await _qr(a))
        ack = await other.request("session.send", {"text": "/approve make deploy"})  # a run on node a
        asked_in, run = ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]
        required = await phone.wait_for("approval.required", run_id=run)  # b delivered the request
        aid = required["payload"]["approval_id"]
        assert b.bridge.decisions.pending(aid) == asked_in

        a.bridge.cluster.bus._written = catchup.Written(keep=2)  # a keeps its last 2 entries only
        gate = Gate(b.bridge.cluster.bus)
        gate.close()  # b stops reading (a stopped or behind node)
        await until(lambda: gate.parked.is_set(), what="b's reads held")
        denied = await other.request("approval.resolve", {"approval_id": aid, "choice": "deny"})
        assert denied["type"] == "ack" and denied["payload"]["ok"] is True, denied
        await other.wait_for("run.completed", run_id=run)
        ack = await other.request("session.send", {"text": "/bench 30 200"})  # a new conversation, a long run
        created, bench = ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]
        await other.wait_for("run.completed", run_id=bench)
        redis_server.flush()  # Redis loses what b had not read
        gate.open.set()
        into = asked_in if after_in == "the approval's" else created
        ack = await other.request("session.send", {"text": "after", "task_id": into})  # numbered above: b's gap
        after = ack["payload"]["result"]["run_id"]
        await until(lambda: b.bridge.cluster.bus.gone > 0, timeout=20, what="events gone found on b")
        await until(lambda: b.bridge.cluster.gaps.refreshes > 0, what="b's state read back")

        # b's state as the store records it: the conversation created in the gap, the approval denied, its run ended
        conv = b.bridge.conversations[asked_in]
        assert (created in b.bridge.conversations, b.bridge.decisions.pending(aid), list(conv.approvals),
                conv.run is None or conv.run.run_id == after) == (True, None, [], True)  # fmt: skip
        # the phone on b, told of the hole, fetches the task list: the new task in it, the old one not waiting
        await phone.until(lambda: phone.close_code is not None)
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True, ok
        tasks = {t["task_id"]: t for t in phone.task_lists[-1]}  # (fetched as the hello said truncated)
        assert created in tasks, sorted(tasks)
        assert tasks[asked_in]["status"] != "waiting", tasks[asked_in]
        await phone.wait_for("run.completed", run_id=after)  # and what follows, as ever
        assert b.bridge.conversations[asked_in].run is None
        assert [m.message_id for m in b.bridge.conversations[asked_in].messages] == \
            [m.message_id for m in a.bridge.conversations[asked_in].messages]  # fmt: skip
        # the nodes agree on the conversations
        assert sorted(b.bridge.conversations) == sorted(a.bridge.conversations)
    finally:
        await close_all()
