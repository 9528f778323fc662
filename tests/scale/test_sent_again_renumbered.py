"""An event the bus sent again after Redis lost it is shown once to a phone that moves from a node that read the
first copy to one that read only the second (chaos seed 3612: ``event_twice``, ``decision_not_once``; not fixed:
docs/performance.md, "Seed 3612").

The bus's writer sends a batch again when Redis's answer was lost (bridge_core/scale/buswrite.py): a node that read
the first copy drops the second as replayed, a node that never got it (Redis lost it unread) delivers the second,
under the new stream's number, far above the first's. The same event then has two numbers on two nodes, and a
phone's catch-up on the second node, from a cursor the first node gave, serves it again.

Here: n1's and n2's buses go through proxies. Nothing comes back to n2 any more, nor to n1 once it sends the
creation of a conversation: the entry reaches Redis and n3 (phone P sees ``task.created``). Redis is flushed (the
entry lost, unread by n2), a conversation created on n3 finds the counter gone back (numbering goes on far above),
the proxies cut their connections, n1 sends its batch again and n2 delivers it. P moves to n2 and gets the
``task.created`` a second time (4 runs of 4 at 3594c01). A non-strict xfail until the fix: the cut of n1's
connection races the writer's own timeout, so a run of it may not show the duplicate; only the assertion counts.
"""

from __future__ import annotations

import asyncio
import pytest
import redis.asyncio as aioredis

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.killed import pheby_app
from tests.scale.phones import loomi_ws, pair_qr
from tests.scale.test_close_unsent import _proxied
from tests.waiting import until

NAME = "sent twice, numbered twice"


def _created(phone: LoomiApp) -> list:
    return [f for f in phone.events if f["type"] == "task.created"
            and (f["payload"].get("task") or {}).get("title") == NAME]  # fmt: skip


@pytest.mark.xfail(strict=False, raises=AssertionError,
                   reason="chaos seed 3612: an event sent again after a loss has two numbers (open)")
async def test_an_event_sent_again_after_a_loss_is_shown_once_to_a_phone_moving_nodes(serve_nodes, engines, tmp_path):
    proxy, n1 = await _proxied(tmp_path, engines, "n1")
    deaf, n2 = await _proxied(tmp_path, engines, "n2", adapters="pheby,loomi,lvmh")
    (n3,) = serve_nodes("n3", adapters="pheby,loomi,lvmh")
    r = aioredis.Redis.from_url(engines[1])
    a1, a2 = pheby_app(n1), pheby_app(n2)
    phone = LoomiApp("P")
    try:
        await phone.pair(dict(await pair_qr(n3), url=loomi_ws(n3)))
        await a1.connect()
        deaf.deaf = True  # nothing Redis sends n2 gets there: it reads nothing of the first copy
        proxy.needle, proxy.armed, proxy.down = NAME.encode(), True, True  # to Redis; no answer back to n1
        await a1.send({"type": "conversation.create", "request_id": "twice", "name": NAME})
        await asyncio.wait_for(proxy.held.wait(), 30)
        await phone.until(lambda: _created(phone), timeout=30)  # n3 read the first copy
        await r.flushall()  # the first copy lost, n2 never read it
        a3 = pheby_app(n3)
        await a3.connect()
        await a3.create("after the loss")  # n3 finds the counter gone back: numbering goes on far above
        await phone.until(lambda: any(f["type"] == "task.created" for f in phone.events[1:]), timeout=30)
        await a3.close()
        proxy.cut()  # n1's publish fails: it sends the batch again, into the new stream
        deaf.cut()  # n2's connections too: what Redis sent it is gone with them; it reads the new stream
        await a1.close()
        await a2.connect()

        async def known() -> bool:  # n2 delivered the second copy
            reply = await a2.request("conversation.list")
            return any(c.get("name") == NAME for c in reply.get("conversations") or [])

        await until(known, 30, "n2 knows the conversation")
        await phone.connect(loomi_ws(n2))
        await phone.request("task.list", {"limit": 50}, answer="task.list.result")  # (after the catch-up)
        assert len(_created(phone)) == 1, [f["seq"] for f in _created(phone)]
    finally:
        for app in (a1, a2):
            await app.close()
        proxy.cut()
        deaf.cut()
        await r.aclose()
        await close_all()
        for node in (n1, n2):  # (started here, not by the fixture)
            await asyncio.to_thread(node.stop)
